// One TLS connection's state over two memory BIOs: ciphertext in, plaintext out and the reverse,
// with no descriptor and no blocking call. The core owns the socket I/O (src/net/core_tls.cc:
// the ring receives into feed() and sends what take_output() hands over); this type owns only
// OpenSSL's state machine, so it is tested and fuzzed without a ring (tests/net,
// tests/fuzz/fuzz_tls.cc).
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

class tls_session {
 public:
  /// A ClientHello is far below this: a read buffer that grows past it before the handshake
  /// ends is not TLS.
  static constexpr size_t kMaxHandshakeBytes = 64 * 1024;

  tls_session() = default;
  ~tls_session() { close(); }
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;
  tls_session(tls_session&& o) noexcept
      : ssl_(o.ssl_), established_(o.established_), shut_(o.shut_) {
    o.ssl_ = nullptr;
  }
  tls_session& operator=(tls_session&& o) noexcept {
    if (this != &o) {
      close();
      ssl_ = o.ssl_;
      established_ = o.established_;
      shut_ = o.shut_;
      o.ssl_ = nullptr;
    }
    return *this;
  }

  /// Starts a server-side session on `ctx`. False: no memory (nothing is held then).
  bool open(ssl_ctx_st* ctx);
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

 private:
  ssl_st* ssl_ = nullptr;
  bool established_ = false;
  bool shut_ = false;
};

/// The failure reason of OpenSSL error `err` (ERR_peek_last_error's), for the metrics.
tls_failure classify_tls_error(unsigned long err) noexcept;

}  // namespace tollgate::net::detail
