// Timers, wake-up and drain: the header/idle/linger lists (each FIFO, so sorted by deadline),
// the 100 ms tick, the eventfd server::stop() writes, and the drain that stop begins.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "net/conn.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"

namespace tollgate::net::detail {

// ---- wake (server::stop) -----------------------------------------------------------------

void core::arm_wake() {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_read(sqe, wake_fd_, &wake_buf_, sizeof wake_buf_, 0);
  io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::wake)} << 56);
  wake_armed_ = true;
}

void core::on_wake(const io_uring_cqe& /*cqe*/) {
  wake_armed_ = false;
  take_handoffs();  // another core's handoff (handoff::push) wakes this one too
  if (!draining_ && !stop_.load(std::memory_order_relaxed)) {
    arm_wake();  // spurious: keep listening
  }
  // Otherwise the pass calls begin_drain() once all CQEs are reaped.
}

core::remote_wake::~remote_wake() {
  if (fd >= 0) {
    ::close(fd);
  }
}

std::function<void()> core::waker() {
  if (!remote_wake_) {
    remote_wake_ = std::make_shared<remote_wake>();
    remote_wake_->fd = ::fcntl(wake_fd_, F_DUPFD_CLOEXEC, 0);
    if (remote_wake_->fd < 0) {
      log_error("core {}: no descriptor for a wake-up ({}); parked requests wait for their bound",
                index_, std::strerror(errno));
      remote_wake_.reset();
      return {};
    }
  }
  return [w = remote_wake_] {
    w->flag.store(true, std::memory_order_release);  // seen by the pass the eventfd wakes
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(w->fd, &one, sizeof one);
  };
}

void core::maybe_wake_handler() {
  const bool woken = remote_wake_ && remote_wake_->flag.exchange(false, std::memory_order_acq_rel);
  if (woken || now_mono_ >= handler_wake_at_) {
    handler_wake_at_ = INT64_MAX;
    handler_->on_wake(now_real_);
  }
}

// ---- timers -------------------------------------------------------------------------------

void core::link(uint32_t idx, uint8_t l) {
  unlink(idx);
  conn& c = conns_[idx];
  list& L = lists_[l];
  c.list = l;
  c.ts = now_mono_;
  c.prev = L.tail;
  c.next = kNil;
  if (L.tail != kNil) {
    conns_[L.tail].next = idx;
  } else {
    L.head = idx;
  }
  L.tail = idx;
}

void core::unlink(uint32_t idx) {
  conn& c = conns_[idx];
  if (c.list == kNoList) {
    return;
  }
  list& L = lists_[c.list];
  if (c.prev != kNil) {
    conns_[c.prev].next = c.next;
  } else {
    L.head = c.next;
  }
  if (c.next != kNil) {
    conns_[c.next].prev = c.prev;
  } else {
    L.tail = c.prev;
  }
  c.list = kNoList;
  c.prev = c.next = kNil;
}

void core::tick() {
  handler_->on_tick(now_real_);
  for (uint8_t l = 0; l < 3; ++l) {
    // Each list is appended to with ts = now, so it is sorted by deadline: stop at the first
    // connection that has time left.
    while (lists_[l].head != kNil) {
      const uint32_t idx = lists_[l].head;
      conn& c = conns_[idx];
      if (c.ts + timeout_ns_[l] > now_mono_) {
        break;
      }
      if (l == kListLinger && c.idle_closed) {
        hard_close(c, idx);  // counted at its idle timeout
        continue;
      }
      bump(stats_.timeouts);
      if (l == kListIdle && c.in.empty() && c.out.empty() && !c.send_inflight) {
        // An idle keep-alive connection closes gracefully (RFC 9112 9.5: "SHOULD issue a
        // graceful close"): FIN, then what the client sends is read and dropped until its FIN
        // or the linger timeout. A request that crossed the FIN on the wire then ends in a
        // clean EOF before any response byte, which clients take as a connection closed while
        // idle (and may retry), not in the reset a close with unread input sends.
        c.idle_closed = true;
        graceful_close(c, idx);
      } else {
        hard_close(c, idx);  // output the peer has not read for idle_timeout: a stalled reader
      }
    }
  }
  sweep_idle_upstreams();
  if (draining_ && now_mono_ >= drain_deadline_) {
    for (uint32_t idx = 0; idx < conns_.size(); ++idx) {
      if (conns_[idx].state == conn_state::open || conns_[idx].state == conn_state::lingering) {
        hard_close(conns_[idx], idx);
      }
    }
  }
}

// stop(): no more accepts; idle connections close now; a connection with a request in flight
// closes after that request's response (keep_alive is cleared for it); a deferred request (its
// bytes are in `in`) is answered likewise once resumed, and fetches keep running meanwhile;
// everything left at shutdown_timeout is closed hard.
void core::begin_drain() {
  draining_ = true;
  drain_deadline_ = now_mono_ + int64_t{opts_.shutdown_timeout_ms} * kMs;
  if (accept_armed_ && !accept_cancel_pending_) {
    cancel(uint64_t{static_cast<uint8_t>(op::accept)} << 56);
    accept_cancel_pending_ = true;
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);  // the armed accept keeps the socket until its cancellation completes
    listen_fd_ = -1;
  }
  if (tls_accept_armed_ && !tls_accept_cancel_pending_) {
    cancel(uint64_t{static_cast<uint8_t>(op::accept_tls)} << 56);
    tls_accept_cancel_pending_ = true;
  }
  if (tls_listen_fd_ >= 0) {
    ::close(tls_listen_fd_);
    tls_listen_fd_ = -1;
  }
  if (wake_armed_) {
    cancel(uint64_t{static_cast<uint8_t>(op::wake)} << 56);
  }
  take_handoffs();  // closes any handed here meanwhile
  for (uint32_t idx = 0; idx < conns_.size(); ++idx) {
    conn& c = conns_[idx];
    if (c.state != conn_state::open) {
      continue;
    }
    if (c.in.empty()) {
      if (c.out.empty() && !c.send_inflight) {
        hard_close(c, idx);  // idle keep-alive connection
      } else {
        c.close_after_send = true;  // its last response is on the way
      }
    }
    // else: a partial request; it is answered with Connection: close when it completes.
  }
}

}  // namespace tollgate::net::detail
