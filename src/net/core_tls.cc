// HTTPS on the core that owns the connection: the TLS state machine runs over two memory BIOs,
// so the ring does all the socket I/O and OpenSSL never touches a descriptor or blocks.
//
// A TLS connection's lifecycle:
//   1. Accepted on the core's HTTPS listener (op::accept_tls); the slot opens as for plain HTTP
//      (header timer started: the handshake and the first request head must both arrive within
//      header_timeout_ms, so a client that stalls mid-handshake is reaped like a slow head).
//   2. Each receive's ciphertext is fed to the slot's tls_session (net/tls_session.h: OpenSSL
//      over two memory BIOs), then tls_drive(): while the handshake runs, one step per receive,
//      within the pass's handshake budget (below); its output (ServerHello..., alerts) waits in
//      the session.
//   3. After the handshake, the session's plaintext goes to on_data(): the plain HTTP path, parsed
//      in place in tls_plain_ (with kPadding spare bytes), answered into the slot's `out`.
//   4. flush_sends() (loop step 6) calls tls_flush(): the released prefix of `out` is encrypted
//      by the session, and its pending records become the slot's `sending` for the ring's
//      send. With close_after_send, a close_notify follows the last answer.
//   5. A failed handshake is counted by reason; its alert (if any) is sent, then the slot
//      closes. A slot released mid-handshake counts as `incomplete` (peer left, or timed out).
//   6. kTLS (where the context's kernel_tx() is on): at the first tls_flush after a TLS 1.3
//      handshake with no ciphertext pending and no send in flight (so every record OpenSSL
//      wrote has reached the socket), hand_tx_to_kernel() installs the session's write key,
//      IV and next sequence number on the socket (net/ktls.h). From then on `out` is sent as
//      plaintext by send_released(), as for plain HTTP, and the kernel writes the records;
//      input still goes through the session. A session that cannot hand over (TLS 1.2) or
//      whose handover the kernel refuses stays in user space. A peer's KeyUpdate that asks for
//      ours closes the connection: only OpenSSL could write it, under keys the kernel now has.
//
// Flood protection: a full handshake costs the core an ECDHE and a signature (~0.1-0.2 ms);
// established connections' records cost microseconds. At most kHandshakeBudget handshake steps
// run per loop pass; a connection whose step would exceed it waits in hs_wait_ (FIFO, its
// ciphertext kept in its session) and runs first in the next pass, which does not sleep while
// any wait. So however many handshakes arrive, a pass spends at most about
// kHandshakeBudget x 0.2 ms on them before it serves established connections' input and sends
// their output; the flood's own connections queue (and, if they queue past header_timeout_ms,
// are reaped). A session whose unread input grows past kMaxHandshakeBytes before the handshake
// ends (no real ClientHello is that large) is closed as not TLS.
#include <cerrno>
#include <cstring>

#include "net/conn.h"
#include "net/ktls.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"
#include "tollgate/net/tls.h"

namespace tollgate::net::detail {

namespace {

constexpr int kHandshakeBudget = 32;
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
  if (!c.tls.open(opts_.tls->current(), opts_.tls->kernel_tx())) {
    return false;
  }
  c.tls_failed = c.hs_queued = false;
  opts_.tls->stats().open.fetch_add(1, std::memory_order_relaxed);
  if (tls_plain_.empty()) {
    tls_plain_.resize(16384 + kPadding);
  }
  return true;
}

void core::tls_release(conn& c) {
  if (!c.tls.is_open()) {
    return;
  }
  tls_stats& s = opts_.tls->stats();
  if (!c.tls.established() && !c.tls_failed) {
    count_failure(s, tls_failure::incomplete);
  }
  c.tls.close();
  c.tls_failed = c.hs_queued = false;
  s.open.fetch_sub(1, std::memory_order_relaxed);
}

void core::tls_input(conn& c, uint32_t idx, const char* data, size_t n) {
  if (!c.tls.feed(data, n)) {
    if (!c.tls.established()) {  // past kMaxHandshakeBytes (or no memory) mid-handshake
      c.tls_failed = true;
      count_failure(opts_.tls->stats(), tls_failure::not_tls);
    }
    hard_close(c, idx);
    return;
  }
  if (!c.hs_queued) {
    tls_drive(c, idx);
  }
}

// The handshake step (within the budget), then every plaintext byte available to on_data().
void core::tls_drive(conn& c, uint32_t idx) {
  if (!c.tls.established()) {
    if (hs_budget_ <= 0) {
      c.hs_queued = true;
      hs_wait_.push_back({idx, c.gen});
      opts_.tls->stats().handshakes_deferred.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    --hs_budget_;
    tls_failure why = tls_failure::other;
    const tls_session::step st = c.tls.handshake(why);
    if (st == tls_session::step::more) {
      if (c.tls.pending_output() > 0) {
        mark_dirty(c, idx);
      }
      return;
    }
    if (st == tls_session::step::failed) {
      tls_fail(c, idx, why);
      return;
    }
    tls_stats& s = opts_.tls->stats();
    (c.tls.resumed() ? s.handshakes_resumed : s.handshakes_full)
        .fetch_add(1, std::memory_order_relaxed);
    (c.tls.tls13() ? s.tls13 : s.tls12).fetch_add(1, std::memory_order_relaxed);
  }
  const size_t cap = tls_plain_.size() - kPadding;
  for (;;) {
    size_t got = 0;
    const tls_session::read_result r = c.tls.read(tls_plain_.data(), cap, got);
    if (r == tls_session::read_result::data) {
      on_data(c, idx, tls_plain_.data(), got);
      if (c.state != conn_state::open) {
        return;
      }
      continue;
    }
    if (r == tls_session::read_result::more) {
      break;
    }
    if (r == tls_session::read_result::peer_closed) {  // close_notify: a half-close, like FIN
      c.peer_fin = true;
      finish_after_fin(c, idx);
      return;
    }
    hard_close(c, idx);  // a bad record (MAC, length): the stream cannot go on
    return;
  }
  if (c.tls.kernel_tx_stuck()) {
    opts_.tls->stats().kernel_tx_key_update.fetch_add(1, std::memory_order_relaxed);
    hard_close(c, idx);  // OpenSSL owes the peer a record the kernel's keys would have to write
    return;
  }
  if (c.tls.pending_output() > 0) {
    mark_dirty(c, idx);  // tickets, key updates
  }
}

// The handshake failed: counted by reason; an alert OpenSSL wrote is sent before the close.
void core::tls_fail(conn& c, uint32_t idx, tls_failure why) {
  c.tls_failed = true;
  count_failure(opts_.tls->stats(), why);
  if (c.tls.pending_output() > 0 && c.state == conn_state::open) {
    c.close_after_send = true;
    c.in.clear();
    mark_dirty(c, idx);
    return;
  }
  hard_close(c, idx);
}

// Loop step 6 for a TLS slot (no send in flight): encrypt the released output, then send the
// session's pending records.
void core::tls_flush(conn& c, uint32_t idx) {
  if (c.tls.kernel_tx_pending() && c.tls.established()) {
    hand_tx_to_kernel(c);
  }
  if (c.tls.kernel_tx()) {
    if (c.tls.kernel_tx_stuck()) {
      hard_close(c, idx);
      return;
    }
    send_released(c, idx);  // plaintext: the kernel writes the records
    return;
  }
  if (c.ready > 0 && c.tls.established()) {
    if (!c.tls.write(c.out.data(), c.ready)) {
      hard_close(c, idx);
      return;
    }
    c.out.consume(c.ready);
    c.mark = c.mark > c.ready ? c.mark - c.ready : 0;
    c.ready = 0;
  }
  if (c.close_after_send && c.out.empty()) {
    c.tls.shutdown();  // close_notify after the last answer (never waits for the peer's)
  }
  const size_t pend = c.tls.pending_output();
  if (pend == 0) {
    if (c.out.empty() && c.close_after_send) {
      graceful_close(c, idx);
    }
    return;
  }
  c.sending.clear();
  c.sending.commit(c.tls.take_output(c.sending.prepare(pend), pend));
  c.sent = 0;
  submit_send(c, idx);
}

// kTLS: the session's transmit side to the kernel, when it can go now (see step 6 above).
void core::hand_tx_to_kernel(conn& c) {
  ktls_keys keys;
  switch (c.tls.kernel_tx_keys(keys)) {
    case tls_session::handover::later:
      return;
    case tls_session::handover::never:
      c.tls.kernel_tx_dropped();
      return;
    case tls_session::handover::ready:
      break;
  }
  tls_stats& s = opts_.tls->stats();
  if (const int err = ktls_attach_tx(c.fd, keys); err != 0) {
    c.tls.kernel_tx_dropped();
    s.kernel_tx_refused.fetch_add(1, std::memory_order_relaxed);
    if (!ktls_refusal_logged_) {
      ktls_refusal_logged_ = true;
      log_error(
          "core {}: the kernel refused a TLS transmit handover ({}); such sessions keep the "
          "user-space record layer (tollgate_tls_kernel_tx_total{{event=\"refused\"}} counts "
          "them)",
          index_, std::strerror(err));
    }
    return;
  }
  c.tls.kernel_tx_taken();
  s.kernel_tx.fetch_add(1, std::memory_order_relaxed);
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
    if (c.gen != e.gen || c.state != conn_state::open || !c.tls.is_open() || !c.hs_queued) {
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
  if (cur_idx_ == kNil) {
    return {};
  }
  return conns_[cur_idx_].tls.version();
}

}  // namespace tollgate::net::detail
