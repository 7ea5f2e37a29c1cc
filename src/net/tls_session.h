// One TLS connection's state over two memory BIOs: ciphertext in, plaintext out and the reverse,
// with no descriptor and no blocking call. The core owns the socket I/O (src/net/core_tls.cc:
// the ring receives into feed() and sends what take_output() hands over); this type owns only
// OpenSSL's state machine, so it is tested and fuzzed without a ring (tests/net,
// tests/fuzz/fuzz_tls.cc).
//
// Handing the transmit side to the kernel (kTLS, net/ktls.h): a session opened with `track_keys`
// follows what the kernel would need (the server's TLS 1.3 application traffic secret, from the
// context's key log callback, and how many records it has written under it, from OpenSSL's
// message callback); once established with nothing pending, kernel_tx_keys() gives the key, IV
// and next sequence number, and after the core installed them, the session only reads.
//
// Not thread-safe: one session, one core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tollgate/net/tls.h"

struct ssl_st;
struct ssl_ctx_st;

namespace tollgate::net::detail {

struct ktls_keys;
struct tx_track;

/// Makes `ctx` report each session's TLS 1.3 server application traffic secret to the sessions
/// that track keys (its key log callback). Only for contexts whose sessions may go to kTLS:
/// OpenSSL formats every secret of every handshake for the callback.
void capture_tx_secrets(ssl_ctx_st* ctx);

class tls_session {
 public:
  /// A ClientHello is far below this: a read buffer that grows past it before the handshake
  /// ends is not TLS.
  static constexpr size_t kMaxHandshakeBytes = 64 * 1024;

  tls_session() = default;
  ~tls_session() { close(); }
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;
  tls_session(tls_session&& o) noexcept { take(o); }
  tls_session& operator=(tls_session&& o) noexcept {
    if (this != &o) {
      close();
      take(o);
    }
    return *this;
  }

  /// Starts a server-side session on `ctx`; with `track_keys`, one that may hand its transmit
  /// side to the kernel (the context must capture_tx_secrets). False: no memory (nothing is
  /// held then).
  bool open(ssl_ctx_st* ctx, bool track_keys = false);
  /// Frees the state; a closed session is inert. Idempotent.
  void close() noexcept;
  bool is_open() const noexcept { return ssl_ != nullptr; }

  /// Ciphertext as received. False: no memory, or (before the handshake ended) more unread
  /// ciphertext than kMaxHandshakeBytes: the peer does not speak TLS.
  bool feed(const char* data, size_t n);

  enum class step : uint8_t { more, done, failed };
  /// One handshake step over the ciphertext fed so far: `more` (wants more input; output such
  /// as the ServerHello may be pending), `done` (established), or `failed` (`why` says why;
  /// an alert may be pending).
  step handshake(tls_failure& why);
  bool established() const noexcept { return established_; }
  bool resumed() const noexcept;
  bool tls13() const noexcept;
  /// "TLSv1.3" / "TLSv1.2"; empty when closed.
  std::string_view version() const noexcept;

  enum class read_result : uint8_t { data, more, peer_closed, broken };
  /// Plaintext of the established session into `buf` (up to `cap`): `data` with `got` bytes,
  /// `more` (no whole record buffered), `peer_closed` (close_notify: a half-close), or
  /// `broken` (a bad record: the stream cannot go on).
  read_result read(char* buf, size_t cap, size_t& got);

  /// Encrypts all of `data` into the output (established sessions). False: the stream broke.
  bool write(const char* data, size_t n);
  /// Queues a close_notify (once), never waiting for the peer's.
  void shutdown();
  bool shut() const noexcept { return shut_; }

  /// Ciphertext waiting to be sent (records, alerts, tickets).
  size_t pending_output() const noexcept;
  /// Moves up to `cap` bytes of pending output into `dst`; returns how many.
  size_t take_output(char* dst, size_t cap);

  // ---- kTLS: the transmit side to the kernel ----
  /// Whether the session may still hand its transmit side over (tracking, not decided yet).
  bool kernel_tx_pending() const noexcept { return track_ != nullptr; }
  enum class handover : uint8_t {
    ready,  ///< `out` holds the parameters: install them now, then kernel_tx_taken()
    later,  ///< not yet (handshake running, or output pending: send it first)
    never,  ///< this session cannot (TLS 1.2, a suite or key state the kernel cannot take)
  };
  /// The kernel's transmit parameters, when the session can hand over now: an established
  /// TLS 1.3 session with a suite the kernel takes, its secret captured and never updated, and
  /// no ciphertext pending (every record OpenSSL wrote must reach the socket before the kernel
  /// writes the next one).
  handover kernel_tx_keys(ktls_keys& out) const;
  /// The kernel took the transmit side: from now on write() must not be called, shutdown()
  /// only marks the session shut (the core sends the close_notify through the kernel), and the
  /// tracked secret is wiped.
  void kernel_tx_taken() noexcept;
  /// The handover will not happen: the tracked secret is wiped, records stay in user space.
  void kernel_tx_dropped() noexcept;
  bool kernel_tx() const noexcept { return kernel_tx_; }
  /// With the kernel transmitting: OpenSSL owes the peer a record only it could have written
  /// (the KeyUpdate a peer's update_requested asks for, an alert). The connection must close.
  bool kernel_tx_stuck() const noexcept;

 private:
  void take(tls_session& o) noexcept {
    ssl_ = o.ssl_;
    track_ = o.track_;
    established_ = o.established_;
    shut_ = o.shut_;
    kernel_tx_ = o.kernel_tx_;
    o.ssl_ = nullptr;
    o.track_ = nullptr;
  }

  ssl_st* ssl_ = nullptr;
  tx_track* track_ = nullptr;  // owned; set while a kernel handover may still happen
  bool established_ = false;
  bool shut_ = false;
  bool kernel_tx_ = false;
};

/// The failure reason of OpenSSL error `err` (ERR_peek_last_error's), for the metrics.
tls_failure classify_tls_error(unsigned long err) noexcept;

}  // namespace tollgate::net::detail
