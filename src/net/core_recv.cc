// Receiving and parsing: provided-buffer receives, in-place parsing of complete requests (a
// partial one is reassembled in the slot's `in`), the handler call for each, 100-continue,
// back-pressure, the peer's half-close and the header/idle timer choice after input.
#include <cerrno>

#include "net/conn.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"
#include "tollgate/http/parser.h"
#include "tollgate/http/response.h"

namespace tollgate::net::detail {

// ---- receive ------------------------------------------------------------------------------

void core::arm_recv(conn& c, uint32_t idx) {
  io_uring_sqe* sqe = get_sqe();
  if (multishot_recv_) {
    io_uring_prep_recv_multishot(sqe, c.fd, nullptr, 0, 0);
  } else {
    io_uring_prep_recv(sqe, c.fd, nullptr, opts_.recv_buffer_size, 0);
  }
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = 0;
  io_uring_sqe_set_data64(sqe, conn_data(op::recv, idx));
  c.recv_armed = true;
}

void core::return_buffer(uint16_t bid) {
  io_uring_buf_ring_add(br_, bufs_ + size_t{bid} * stride_, opts_.recv_buffer_size, bid, br_mask_,
                        br_pending_++);
}

void core::on_recv(conn& c, uint32_t idx, const io_uring_cqe& cqe) {
  bool ended_by_pause = false;
  if ((cqe.flags & IORING_CQE_F_MORE) == 0) {
    c.recv_armed = false;
    ended_by_pause = c.recv_cancelled;
    c.recv_cancelled = false;
  }
  const int res = cqe.res;
  if (res > 0) {
    TOLLGATE_ASSERT((cqe.flags & IORING_CQE_F_BUFFER) != 0);
    const auto bid = static_cast<uint16_t>(cqe.flags >> IORING_CQE_BUFFER_SHIFT);
    if (c.state == conn_state::open) {
      if (c.tls.is_open()) {
        tls_input(c, idx, bufs_ + size_t{bid} * stride_, static_cast<size_t>(res));
      } else {
        on_data(c, idx, bufs_ + size_t{bid} * stride_, static_cast<size_t>(res));
      }
    }
    // lingering: input after the final response is read and dropped.
    return_buffer(bid);
    if (c.state == conn_state::closing) {
      maybe_release(c, idx);
    } else if (!c.recv_armed && wants_input(c)) {
      arm_recv(c, idx);
    }
    return;
  }
  if ((cqe.flags & IORING_CQE_F_BUFFER) != 0) {
    return_buffer(static_cast<uint16_t>(cqe.flags >> IORING_CQE_BUFFER_SHIFT));
  }
  if (res == -ENOBUFS) {
    bump(stats_.recv_no_buffer);
  }
  if (res == -ENOBUFS && c.state != conn_state::closing) {
    // Every buffer was in use this pass; they are all handed back before the next submit.
    if (!c.recv_armed && wants_input(c)) {
      arm_recv(c, idx);
    }
    return;
  }
  if (c.recv_armed) {
    return;  // a transient error on a multishot recv that goes on
  }
  if (res == -ECANCELED && ended_by_pause && c.state == conn_state::open) {
    if (wants_input(c)) {
      arm_recv(c, idx);  // output drained before the cancellation landed
    }
    return;
  }
  if (c.state == conn_state::open && res == 0) {
    c.peer_fin = true;  // a half-close: what came before it is still answered
    finish_after_fin(c, idx);
    return;
  }
  // Reset or cancellation.
  if (c.state == conn_state::open && c.deferred) {
    if (c.resume_queued) {
      // resume() already said yes: the request is delivered this pass, then the slot closes.
      c.close_after_send = true;
      return;
    }
    hard_close(c, idx);  // the client left while its request was deferred: resume() says no
    return;
  }
  if (c.state == conn_state::closing) {
    maybe_release(c, idx);
  } else {
    hard_close(c, idx);
  }
}

// Back-pressure: a client that pipelines faster than it reads has its receive cancelled until
// its output drains, so its unread requests wait in the kernel's socket buffer, not in ours.
void core::pause_input(conn& c, uint32_t idx) {
  c.paused = true;
  if (c.recv_armed && multishot_recv_ && !c.recv_cancelled) {
    cancel(conn_data(op::recv, idx));
    c.recv_cancelled = true;
  }
  // A single-shot recv is simply not re-armed while paused (see wants_input()).
}

bool core::wants_input(const conn& c) const noexcept {
  return c.state == conn_state::lingering ||
         (c.state == conn_state::open && !c.paused && !c.peer_fin);
}

// After the peer's FIN (a half-close, RFC 9112 §9.6: the client may still read): every complete
// request received before it is answered, in order, then the connection closes. Called at the
// FIN and again whenever a request that was waiting gets answered; while a deferred request or
// input paused behind unsent output is still to be answered, the slot stays open (no receive is
// armed). What is left in `in` then is at most a partial request, which can never complete.
void core::finish_after_fin(conn& c, uint32_t idx) {
  if (!c.peer_fin || c.state != conn_state::open || c.deferred || c.paused) {
    return;
  }
  c.close_after_send = true;
  c.in.clear();
  c.need = 0;
  if (c.send_inflight || !c.out.empty()) {
    mark_dirty(c, idx);  // sent, then the close (flush_sends / on_send)
    return;
  }
  hard_close(c, idx);  // nothing to send: the FIN came after the last answer went out
}

void core::append_in(conn& c, const char* p, size_t n) {
  // Keep kPadding spare bytes after the data so a body in `in` can be parsed in place; when the
  // pending request's size is known, grow once to hold all of it.
  const size_t want = c.in.size() + n > c.need ? c.in.size() + n : c.need;
  c.in.reserve(want + kPadding);
  c.in.append(p, n);
}

void core::on_data(conn& c, uint32_t idx, char* data, size_t n) {
  if (c.close_after_send) {
    return;  // nothing after a final response is read
  }
  bool completed = false;
  if (c.in.empty()) {
    // Fast path: parse in the provided buffer; copy only an unparsed tail.
    const size_t used = (c.paused || c.deferred) ? 0 : process(c, idx, data, n, completed);
    if (used < n && !c.close_after_send) {
      append_in(c, data + used, n - used);
    }
  } else {
    append_in(c, data, n);
    // Else the known-length body is still arriving, or a deferred request blocks the rest.
    if (!c.paused && !c.deferred && c.in.size() >= c.need) {
      process_in(c, idx, completed);
    }
  }
  if (c.close_after_send) {
    c.in.clear();
  } else if (c.in.size() > max_in_ && !c.resume_queued) {  // (a queued resume goes first)
    hard_close(c, idx);  // pipelining far ahead without reading the answers
    return;
  }
  update_timer(c, idx, completed);
}

// Parses and answers complete requests in buf[0, len); returns the bytes consumed.
size_t core::process(conn& c, uint32_t idx, char* buf, size_t len, bool& completed) {
  size_t off = 0;
  while (off < len) {
    const http::parse_result r = http::parse_request(buf + off, len - off, opts_.limits, req_);
    if (r.status == http::parse_status::complete) {
      completed = true;
      c.head_done = false;
      c.continue_sent = false;
      c.need = 0;
      if (draining_) {
        req_.keep_alive = false;  // lets the handler write "Connection: close"
      }
      c.req_id = next_req_id_++;
      if (next_req_id_ == 0) {
        next_req_id_ = 1;  // 0 never names a request
      }
      const http::response_info info = call_handler(c, idx, req_);
      bump(stats_.requests);
      if (info.deferred) {
        save_deferred(c, buf + off, r.consumed);
        break;  // the request and everything after it stay (the caller keeps buf[off, len))
      }
      off += r.consumed;
      mark_dirty(c, idx);
      if (info.close || !req_.keep_alive) {
        c.close_after_send = true;
        break;
      }
      if (c.out.size() >= kOutHighWater) {
        pause_input(c, idx);
        break;
      }
      continue;
    }
    if (r.status == http::parse_status::incomplete) {
      c.head_done = r.head_complete;
      c.need = (r.head_complete && !req_.chunked) ? r.head_bytes + req_.content_length : 0;
      if (r.head_complete && req_.expect_continue && !c.continue_sent) {
        if (answer_before_body(c, idx)) {
          break;  // answered from its head: the body is never invited
        }
        c.out.append(http::continue_response);
        c.continue_sent = true;
        mark_dirty(c, idx);
      }
      break;
    }
    bump(stats_.parse_errors);
    // A body too large has a complete head: the route may answer in its own format.
    if (r.error != http::errc::body_too_large || !handler_->answer_refused(req_, r.error, c.out)) {
      http::write_error_response(c.out, r.error);  // status_of(error) + Connection: close
    }
    c.close_after_send = true;
    mark_dirty(c, idx);
    break;
  }
  return off;
}

// Parses and answers the complete requests at the front of `in` and drops them from it.
void core::process_in(conn& c, uint32_t idx, bool& completed) {
  const size_t used = process(c, idx, c.in.data(), c.in.size(), completed);
  c.in.consume(used);
}

// After requests in `in` were answered outside a receive (a re-delivery, drained output): a
// final answer drops the rest of `in`, a FIN seen earlier may now close, the timer is chosen
// again. The caller re-arms the receive.
void core::after_input(conn& c, uint32_t idx, bool completed) {
  if (c.close_after_send) {
    c.in.clear();
  }
  finish_after_fin(c, idx);
  update_timer(c, idx, completed);
}

// `Expect: 100-continue` with the body still to come: the handler may answer from the head
// alone (handler::answer_before_body); the connection then closes after that answer, and the
// body, if the client sends it anyway, is read and dropped while lingering.
bool core::answer_before_body(conn& c, uint32_t idx) {
  const bool keep_alive = req_.keep_alive;
  req_.body = {};
  req_.keep_alive = false;  // the answer says "Connection: close"
  const size_t before = c.out.size();
  const http::response_info info = handler_->answer_before_body(req_, c.out, now_real_);
  if (info.status == 0) {
    c.out.resize(before);
    req_.keep_alive = keep_alive;
    return false;
  }
  TOLLGATE_ASSERT(!info.deferred && "answer_before_body() deferred");
  bump(stats_.requests);
  c.close_after_send = true;
  c.need = 0;
  mark_dirty(c, idx);
  return true;
}

// Chooses the timer after input: a partial head keeps the deadline set when it began (a trickle
// does not extend it); a partial body restarts header_timeout on each read; otherwise idle.
void core::update_timer(conn& c, uint32_t idx, bool completed) {
  if (c.state != conn_state::open) {
    return;
  }
  if (c.deferred) {
    unlink(idx);  // the handler resumes it within its own deadline
    c.head_timer = false;
    return;
  }
  if (c.in.empty() || c.paused || c.close_after_send) {
    link(idx, kListIdle);
    c.head_timer = false;
  } else if (!c.head_done) {
    if (completed || !c.head_timer || c.list != kListHeader) {
      link(idx, kListHeader);
      c.head_timer = true;
    }
  } else {
    link(idx, kListHeader);
    c.head_timer = false;
  }
}

}  // namespace tollgate::net::detail
