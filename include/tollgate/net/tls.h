// TLS for the engine's second listener: one OpenSSL 3 server context per process, shared by
// every core, and the counters /metrics reads.
//
// What the context allows: TLS 1.2 with ECDHE key exchange and AEAD ciphers only, and TLS 1.3;
// ALPN "http/1.1"; no renegotiation, no compression, no early data (0-RTT). Sessions resume by
// tickets only (no server-side session cache), whose keys are derived from a random per-process
// secret and the current 12-hour window: every core (and every context a reload makes) computes
// the same keys without sharing mutable state, a ticket is accepted for two windows (and renewed
// in the second), and a key is never used past 24 hours.
//
// The record layer runs over memory BIOs on the core that owns the connection (see
// src/net/core_tls.cc). kTLS is probed at create() and reported by ktls_status(): where the
// kernel has the tls ULP, a TLS 1.3 session hands its transmit side to the kernel after the
// handshake (src/net/ktls.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tollgate/common/result.h"

struct ssl_ctx_st;

namespace tollgate::net {

class tls_context;
namespace detail {
/// Makes `t`'s new sessions attempt the kTLS handover whatever the probe found: the engine's
/// handover path, tested where the kernel refuses it (src/net/tls.cc).
void attempt_kernel_tx(tls_context& t);
}  // namespace detail

/// Why a handshake failed (the `reason` label of tollgate_tls_handshakes_failed_total).
enum class tls_failure : uint8_t {
  protocol_version,  ///< the client offered only versions below min_version (1.0/1.1)
  no_shared_cipher,  ///< nothing the client offered is allowed here
  not_tls,           ///< the bytes were not a TLS handshake (plain HTTP, garbage)
  incomplete,        ///< the peer left, or the header timeout reaped it, mid-handshake
  other,             ///< any other handshake error (bad record, bad ALPN, ...)
};
inline constexpr int tls_failure_count = 5;
/// The label text of a failure reason.
std::string_view tls_failure_name(tls_failure f) noexcept;

/// Process-wide TLS counters. Thread-safe: written by every core with relaxed atomic adds (a
/// handshake costs far more than a locked add), read by /metrics.
struct tls_stats {
  std::atomic<uint64_t> handshakes_full{0};
  std::atomic<uint64_t> handshakes_resumed{0};
  std::atomic<uint64_t> failed[tls_failure_count] = {};
  std::atomic<int64_t> open{0};    ///< gauge: TLS connections open (any state)
  std::atomic<uint64_t> tls12{0};  ///< completed handshakes by protocol
  std::atomic<uint64_t> tls13{0};
  std::atomic<uint64_t> handshakes_deferred{0};   ///< handshake steps pushed to a later pass
  std::atomic<uint64_t> reloads{0};               ///< certificate pairs loaded after the first
  std::atomic<uint64_t> kernel_tx{0};             ///< sessions whose transmit side the kernel took
  std::atomic<uint64_t> kernel_tx_refused{0};     ///< handovers the kernel refused (user space)
  std::atomic<uint64_t> kernel_tx_key_update{0};  ///< closed: the peer asked for a KeyUpdate
};

/// The TLS server context. Thread-safe: cores call current() on every new connection while a
/// reload thread may call reload(). Contexts replaced by reload() stay alive until this object
/// is destroyed (a core may still hold the pointer it read; a reload is rare and costs a few KB),
/// so current() needs no reference count and no lock.
class tls_context {
 public:
  /// Loads `cert` (PEM chain) and `key` (PEM), checks that they match and that the leaf is not
  /// expired or not yet valid, and builds the context. `min_version` is "1.2" or "1.3". With
  /// `ktls`, sessions hand their transmit side to the kernel where the probe finds the tls ULP.
  /// The error names the file at fault.
  static result<std::shared_ptr<tls_context>, std::string> create(const std::string& cert,
                                                                  const std::string& key,
                                                                  std::string_view min_version,
                                                                  bool ktls = true);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;

  /// Re-reads the pair (paths given, or the ones in use when empty). New handshakes use it; an
  /// established connection keeps the context it started with. On error nothing changes and
  /// the message says why (naming the file).
  result<void, std::string> reload(const std::string& cert = {}, const std::string& key = {});

  /// The context new connections start with. Never null. Thread-safe, lock-free.
  ssl_ctx_st* current() const noexcept { return current_.load(std::memory_order_acquire); }

  tls_stats& stats() noexcept { return stats_; }
  const tls_stats& stats() const noexcept { return stats_; }

  /// What the kTLS probe found at start, for the log ("user-space record layer: ...").
  const std::string& ktls_status() const noexcept { return ktls_status_; }
  /// Whether new sessions may hand their transmit side to the kernel (asked for, and the kernel
  /// has the tls ULP).
  bool kernel_tx() const noexcept { return kernel_tx_.load(std::memory_order_relaxed); }
  /// The certificate file in use (for messages).
  std::string cert_path() const;

 private:
  tls_context() = default;
  friend void detail::attempt_kernel_tx(tls_context& t);
  struct state;
  std::unique_ptr<state> st_;
  // acquire/release: a core that reads the pointer sees the context fully built.
  std::atomic<ssl_ctx_st*> current_{nullptr};
  tls_stats stats_;
  std::string ktls_status_;
  std::atomic<bool> kernel_tx_{false};  // relaxed: set at create (or by attempt_kernel_tx)
};

/// Checks a certificate/key pair without building a server (for `config check`): "" when it
/// loads, matches and is within its validity period, else the message naming the file.
std::string check_tls_pair(const std::string& cert, const std::string& key);

}  // namespace tollgate::net
