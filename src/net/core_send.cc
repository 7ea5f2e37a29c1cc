// Sending: one send in flight per connection, of the part of its output the durable step
// released; short sends are resumed, and a drained output lets paused input go on.
#include <sys/socket.h>

#include <utility>

#include "net/conn.h"
#include "net/ktls.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"

namespace tollgate::net::detail {

// ---- send ---------------------------------------------------------------------------------

void core::mark_dirty(conn& c, uint32_t idx) {
  if (!c.dirty) {
    c.dirty = true;
    dirty_.push_back(idx);
  }
}

void core::flush_sends() {
  for (const uint32_t idx : dirty_) {
    conn& c = conns_[idx];
    c.dirty = false;
    if (c.state != conn_state::open || c.send_inflight) {
      continue;  // a send in flight picks up `out` when it completes
    }
    if (c.tls.is_open()) {
      tls_flush(c, idx);  // encrypt what was released, send the records (core_tls.cc)
      continue;
    }
    send_released(c, idx);
  }
  dirty_.clear();
}

// Sends the released prefix of `out` as it is (plain HTTP, or TLS whose records the kernel
// writes); with nothing left to send and close_after_send, closes.
void core::send_released(conn& c, uint32_t idx) {
  if (c.ready == 0) {
    if (c.out.empty() && c.close_after_send) {
      if (c.tls.kernel_tx() && !c.tls.shut()) {
        ktls_send_close_notify(c.fd);  // never waits; skipped when the socket buffer is full
        c.tls.shutdown();
      }
      graceful_close(c, idx);
    }
    return;  // nothing yet, or output still held for a durable write
  }
  if (c.ready == c.out.size()) {
    std::swap(c.out, c.sending);
  } else {
    // Part of `out` is still held: move the released prefix (both keep their capacity).
    c.sending.clear();
    c.sending.append(c.out.data(), c.ready);
    c.out.consume(c.ready);
  }
  c.mark = c.mark > c.ready ? c.mark - c.ready : 0;
  c.ready = 0;
  c.sent = 0;
  submit_send(c, idx);
}

void core::submit_send(conn& c, uint32_t idx) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_send(sqe, c.fd, c.sending.data() + c.sent, c.sending.size() - c.sent, MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, conn_data(op::send, idx));
  c.send_inflight = true;
}

void core::on_send(conn& c, uint32_t idx, int res) {
  c.send_inflight = false;
  if (c.state == conn_state::closing) {
    maybe_release(c, idx);
    return;
  }
  if (res <= 0) {
    hard_close(c, idx);  // EPIPE, ECONNRESET: the peer is gone
    return;
  }
  c.sent += static_cast<size_t>(res);
  if (c.sent < c.sending.size()) {
    submit_send(c, idx);  // short send: these bytes already passed before_send()
    if (c.list == kListIdle) {
      link(idx, kListIdle);  // progress
    }
    return;
  }
  c.sending.clear();
  c.sent = 0;
  if (c.paused && c.out.size() < kOutHighWater) {
    c.paused = false;
    bool completed = false;
    process_in(c, idx, completed);
    after_input(c, idx, completed);
    if (!c.recv_armed && wants_input(c)) {
      arm_recv(c, idx);
    }
  }
  if (c.state != conn_state::open) {
    return;
  }
  if (!c.out.empty() || c.close_after_send || c.tls.pending_output() > 0) {
    mark_dirty(c, idx);  // sent (or closed) at the end of this pass
  } else if (c.in.empty() && c.list != kListHeader) {
    link(idx, kListIdle);
  }
}

}  // namespace tollgate::net::detail
