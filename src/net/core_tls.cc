// HTTPS on the core that owns the connection: the TLS state machine runs over two memory BIOs,
// so the ring does all the socket I/O and OpenSSL never touches a descriptor or blocks.
//
// A TLS connection's lifecycle:
//   1. Accepted on the core's HTTPS listener (op::accept_tls); the slot opens as for plain HTTP
//      (header timer started: the handshake and the first request head must both arrive within
//      header_timeout_ms, so a client that stalls mid-handshake is reaped like a slow head).
//   2. Each receive's ciphertext is appended to the read BIO (tls_input), then tls_drive():
//      while the handshake runs, one SSL_do_handshake() step per receive, within the pass's
//      handshake budget (below); its output (ServerHello..., alerts) lands in the write BIO.
//   3. After the handshake, SSL_read() hands plaintext to on_data(): the plain HTTP path, parsed
//      in place in tls_plain_ (with kPadding spare bytes), answered into the slot's `out`.
//   4. flush_sends() (loop step 6) calls tls_flush(): the released prefix of `out` goes through
//      SSL_write() into the write BIO, and the write BIO's bytes become the slot's `sending`
//      for the ring's send. With close_after_send, a close_notify follows the last answer.
//   5. A failed handshake is counted by reason; its alert (if any) is sent, then the slot
//      closes. A slot released mid-handshake counts as `incomplete` (peer left, or timed out).
//
// Flood protection: a full handshake costs the core an ECDHE and a signature (~0.1-0.2 ms);
// established connections' records cost microseconds. At most kHandshakeBudget handshake steps
// run per loop pass; a connection whose step would exceed it waits in hs_wait_ (FIFO, its
// ciphertext kept in its read BIO) and runs first in the next pass, which does not sleep while
// any wait. So however many handshakes arrive, a pass spends at most about
// kHandshakeBudget x 0.2 ms on them before it serves established connections' input and sends
// their output; the flood's own connections queue (and, if they queue past header_timeout_ms,
// are reaped). A read BIO that grows past kMaxHandshakeBytes before the handshake ends (no real
// ClientHello is that large) is closed as not TLS.
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>

#include "net/conn.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"
#include "tollgate/net/tls.h"

namespace tollgate::net::detail {

namespace {

constexpr int kHandshakeBudget = 32;
constexpr size_t kMaxHandshakeBytes = 64 * 1024;

tls_failure classify(unsigned long err) {
  if (ERR_GET_LIB(err) != ERR_LIB_SSL) {
    return tls_failure::other;
  }
  switch (ERR_GET_REASON(err)) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_WRONG_SSL_VERSION:
      return tls_failure::protocol_version;
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SUITABLE_KEY_SHARE:
      return tls_failure::no_shared_cipher;
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_RECORD_LENGTH_MISMATCH:
      return tls_failure::not_tls;
    default:
      return tls_failure::other;
  }
}

void count_failure(tls_stats& s, tls_failure f) {
  s.failed[static_cast<int>(f)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void core::arm_tls_accept() {
  io_uring_sqe* sqe = get_sqe();
  if (multishot_accept_) {
    io_uring_prep_multishot_accept(sqe, tls_listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  } else {
    io_uring_prep_accept(sqe, tls_listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  }
  io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::accept_tls)} << 56);
  tls_accept_armed_ = true;
}

void core::on_tls_accept(const io_uring_cqe& cqe) {
  if ((cqe.flags & IORING_CQE_F_MORE) == 0) {
    tls_accept_armed_ = false;
    tls_accept_cancel_pending_ = false;
  }
  const int res = cqe.res;
  if (res >= 0) {
    place_conn(res, true);
    return;
  }
  if (res == -ECANCELED || res == -ECONNABORTED || res == -EINTR || res == -EAGAIN) {
    return;
  }
  bump(stats_.accept_errors);
  if (accept_backoff_ns_ == 0) {
    log_error("core {}: HTTPS accept failed: {}; retrying with back-off", index_,
              std::strerror(-res));
    accept_backoff_ns_ = kBackoffMinNs;
  }
  accept_resume_at_ = now_mono_ + accept_backoff_ns_;
}

// A fresh slot's TLS state; false: no memory (the caller closes the connection).
bool core::tls_open(conn& c) {
  SSL* ssl = SSL_new(opts_.tls->current());
  BIO* rb = BIO_new(BIO_s_mem());
  BIO* wb = BIO_new(BIO_s_mem());
  if (ssl == nullptr || rb == nullptr || wb == nullptr) {
    SSL_free(ssl);
    BIO_free(rb);
    BIO_free(wb);
    return false;
  }
  BIO_set_mem_eof_return(rb, -1);  // empty = "want more", not end of stream
  BIO_set_mem_eof_return(wb, -1);
  SSL_set_bio(ssl, rb, wb);
  SSL_set_accept_state(ssl);
  c.ssl = ssl;
  c.tls_up = c.tls_failed = c.tls_shut = c.hs_queued = false;
  opts_.tls->stats().open.fetch_add(1, std::memory_order_relaxed);
  if (tls_plain_.empty()) {
    tls_plain_.resize(16384 + kPadding);
  }
  return true;
}

void core::tls_release(conn& c) {
  if (c.ssl == nullptr) {
    return;
  }
  tls_stats& s = opts_.tls->stats();
  if (!c.tls_up && !c.tls_failed) {
    count_failure(s, tls_failure::incomplete);
  }
  SSL_free(c.ssl);  // frees both BIOs
  c.ssl = nullptr;
  c.tls_up = c.tls_failed = c.tls_shut = c.hs_queued = false;
  s.open.fetch_sub(1, std::memory_order_relaxed);
}

void core::tls_input(conn& c, uint32_t idx, const char* data, size_t n) {
  BIO* rb = SSL_get_rbio(c.ssl);
  if (!c.tls_up && BIO_ctrl_pending(rb) + n > kMaxHandshakeBytes) {
    c.tls_failed = true;
    count_failure(opts_.tls->stats(), tls_failure::not_tls);
    hard_close(c, idx);
    return;
  }
  if (BIO_write(rb, data, static_cast<int>(n)) != static_cast<int>(n)) {
    hard_close(c, idx);  // out of memory
    return;
  }
  if (!c.hs_queued) {
    tls_drive(c, idx);
  }
}

// The handshake step (within the budget), then every plaintext byte available to on_data().
void core::tls_drive(conn& c, uint32_t idx) {
  SSL* ssl = c.ssl;
  if (!c.tls_up) {
    if (hs_budget_ <= 0) {
      c.hs_queued = true;
      hs_wait_.push_back({idx, c.gen});
      opts_.tls->stats().handshakes_deferred.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    --hs_budget_;
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl);
    if (r != 1) {
      const int e = SSL_get_error(ssl, r);
      if (e == SSL_ERROR_WANT_READ) {
        if (tls_has_output(c)) {
          mark_dirty(c, idx);
        }
        return;
      }
      tls_fail(c, idx);
      return;
    }
    c.tls_up = true;
    tls_stats& s = opts_.tls->stats();
    (SSL_session_reused(ssl) ? s.handshakes_resumed : s.handshakes_full)
        .fetch_add(1, std::memory_order_relaxed);
    (SSL_version(ssl) == TLS1_3_VERSION ? s.tls13 : s.tls12)
        .fetch_add(1, std::memory_order_relaxed);
  }
  const size_t cap = tls_plain_.size() - kPadding;
  for (;;) {
    size_t got = 0;
    ERR_clear_error();
    const int r = SSL_read_ex(ssl, tls_plain_.data(), cap, &got);
    if (r == 1) {
      on_data(c, idx, tls_plain_.data(), got);
      if (c.state != conn_state::open) {
        return;
      }
      continue;
    }
    const int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
      break;
    }
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN) {  // close_notify: a half-close, like the TCP FIN
      c.peer_fin = true;
      finish_after_fin(c, idx);
      return;
    }
    hard_close(c, idx);  // a bad record (MAC, length): the stream cannot go on
    return;
  }
  if (tls_has_output(c)) {
    mark_dirty(c, idx);  // tickets, key updates
  }
}

// The handshake failed: counted by reason; an alert OpenSSL wrote is sent before the close.
void core::tls_fail(conn& c, uint32_t idx) {
  const unsigned long err = ERR_peek_last_error();
  ERR_clear_error();
  c.tls_failed = true;
  count_failure(opts_.tls->stats(), classify(err));
  if (tls_has_output(c) && c.state == conn_state::open) {
    c.close_after_send = true;
    c.in.clear();
    mark_dirty(c, idx);
    return;
  }
  hard_close(c, idx);
}

bool core::tls_has_output(const conn& c) const noexcept {
  return c.ssl != nullptr && BIO_ctrl_pending(SSL_get_wbio(c.ssl)) > 0;
}

// Loop step 6 for a TLS slot (no send in flight): encrypt the released output, then send the
// write BIO's bytes.
void core::tls_flush(conn& c, uint32_t idx) {
  if (c.ready > 0 && c.tls_up) {
    size_t w = 0;
    ERR_clear_error();
    if (SSL_write_ex(c.ssl, c.out.data(), c.ready, &w) != 1 || w != c.ready) {
      ERR_clear_error();
      hard_close(c, idx);
      return;
    }
    c.out.consume(c.ready);
    c.mark = c.mark > c.ready ? c.mark - c.ready : 0;
    c.ready = 0;
  }
  if (c.close_after_send && c.out.empty() && c.tls_up && !c.tls_shut) {
    SSL_shutdown(c.ssl);  // close_notify after the last answer (never waits for the peer's)
    c.tls_shut = true;
  }
  BIO* wb = SSL_get_wbio(c.ssl);
  const size_t pend = BIO_ctrl_pending(wb);
  if (pend == 0) {
    if (c.out.empty() && c.close_after_send) {
      graceful_close(c, idx);
    }
    return;
  }
  c.sending.clear();
  const int n = BIO_read(wb, c.sending.prepare(pend), static_cast<int>(pend));
  c.sending.commit(n > 0 ? static_cast<size_t>(n) : 0);
  c.sent = 0;
  submit_send(c, idx);
}

// Loop step (before the reap): the handshakes that waited for budget, oldest first.
void core::run_handshake_queue() {
  hs_budget_ = kHandshakeBudget;
  if (hs_wait_.empty()) {
    return;
  }
  hs_work_.swap(hs_wait_);
  size_t i = 0;
  for (; i < hs_work_.size() && hs_budget_ > 0; ++i) {
    const hs_entry e = hs_work_[i];
    conn& c = conns_[e.idx];
    if (c.gen != e.gen || c.state != conn_state::open || c.ssl == nullptr || !c.hs_queued) {
      continue;
    }
    c.hs_queued = false;
    tls_drive(c, e.idx);
  }
  // Budget spent: the rest keep their place ahead of anything queued during this pass.
  hs_wait_.insert(hs_wait_.begin(), hs_work_.begin() + static_cast<std::ptrdiff_t>(i),
                  hs_work_.end());
  hs_work_.clear();
}

std::string_view core::tls_version() {
  if (cur_idx_ == kNil || conns_[cur_idx_].ssl == nullptr) {
    return {};
  }
  return SSL_get_version(conns_[cur_idx_].ssl);
}

}  // namespace tollgate::net::detail
