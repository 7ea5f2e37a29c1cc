// The durable step (core.h, loop step 6): the handler's durable batch (the app's usage journal)
// is written before the responses that depend on it are sent; those are held until it completes.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "net/conn.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"

namespace tollgate::net::detail {

// ---- durable write ------------------------------------------------------------------------
//
// Why the pass's sends are held rather than linked to the durable write: IOSQE_IO_LINK runs a
// chain strictly in order, and one failed or short member cancels every later link. A chain
// write -> send(A) -> send(B) ... would let a peer that reset (EPIPE on A) cancel B's and C's
// sends (each would need resubmitting, out of order with anything queued behind them), and a
// send that waits for socket space would stall every other connection's response behind it.
// Holding the responses until the write's CQE needs no chain: the write goes out in this pass's
// one submit, and the responses it covers are sent in the submit of the pass that reaps its
// CQE (a linked NOP would release them no sooner: its CQE comes with or after the write's).
// A short write releases nothing; the rest is asked for again at once. A failed write (-errno,
// e.g. ENOSPC, EBADF, EIO) releases nothing either: the handler keeps the bytes, the error is
// logged and counted, and the write is retried after a back-off (100 ms doubling to 1 s), so
// unbilled responses are never sent; if the file stays broken, held connections end by
// their idle timeout or at drain. The fdatasync every fsync_ms is its own IORING_OP_FSYNC, not
// linked: nothing waits for it.

void core::hold(conn& c, uint32_t idx) {
  if (!c.held_listed) {
    c.held_listed = true;
    held_.push_back(idx);  // capacity max_connections: every slot is listed at most once
    c.mark = c.ready;      // covers nothing beyond what is already released
  }
}

void core::release_all_held() {
  for (const uint32_t idx : dirty_) {
    conn& c = conns_[idx];
    c.ready = c.out.size();
    c.durable_wait = false;
  }
  for (const uint32_t idx : held_) {
    conn& c = conns_[idx];
    c.held_listed = false;
    if (c.state == conn_state::open) {
      c.ready = c.out.size();
      c.durable_wait = false;
      mark_dirty(c, idx);
    }
  }
  held_.clear();
  stats_.journal_held.store(0, std::memory_order_relaxed);
}

// The handler dropped the records that held answers wait for (durable_batch::dropped): none of
// them may go out as billed. A connection's held bytes may also hold answers pipelined behind a
// billed one; their boundaries are the handler's, so the whole held output becomes one 503 and
// the connection closes (the client retries what was not answered).
void core::refuse_held() {
  static constexpr std::string_view kBody =
      "{\"code\":\"unavailable\",\"message\":\"Usage cannot be recorded right now; the call was "
      "not billed.\"}";
  const fmt::format_int body_len(kBody.size());
  for (const uint32_t idx : dirty_) {
    hold_if_durable(conns_[idx], idx);
  }
  for (const uint32_t idx : held_) {
    conn& c = conns_[idx];
    c.held_listed = false;
    if (c.state != conn_state::open) {
      continue;
    }
    c.out.resize(c.ready);
    c.out.append(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
        "1\r\nConnection: close\r\nContent-Length: ");
    c.out.append(body_len.data(), body_len.size());
    c.out.append("\r\n\r\n");
    c.out.append(kBody);
    c.ready = c.mark = c.out.size();
    c.durable_wait = false;
    c.close_after_send = true;
    c.in.clear();
    mark_dirty(c, idx);
  }
  held_.clear();
  durable_partial_ = false;  // what is left of the batch covers none of them
  stats_.journal_held.store(0, std::memory_order_relaxed);
}

bool core::hold_if_durable(conn& c, uint32_t idx) {
  if (c.out.size() <= c.ready) {
    return false;
  }
  if (c.durable_wait || c.held_listed) {
    hold(c, idx);
    return true;
  }
  c.ready = c.out.size();  // no billed answer in it: it never waits for a durable write
  return false;
}

void core::durable_step() {
  // An inline write that was short but made progress has its rest written at once (a short
  // write to a regular file is rare: a full disk's last blocks, a signal).
  for (int i = 0; i < 8 && durable_step_once(); ++i) {
  }
}

bool core::durable_step_once() {
  if (!durable_inflight_ && now_mono_ >= durable_retry_at_) {
    const http::durable_batch b = handler_->durable_pending();
    if (b.dropped) {
      refuse_held();
    }
    if (b.sync_due && b.fd >= 0 && !sync_inflight_) {
      io_uring_sqe* sqe = get_sqe();
      io_uring_prep_fsync(sqe, b.fd, IORING_FSYNC_DATASYNC);
      io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::durable_sync)} << 56);
      sync_inflight_ = true;
    } else if (b.sync_due) {
      handler_->durable_synced(b.fd < 0 ? -EBADF : -EBUSY);  // not done: ask again later
    }
    if (b.size == 0) {
      release_all_held();  // every billed record is on disk: all answered output may go
      return false;
    }
    for (const uint32_t idx : dirty_) {
      hold_if_durable(conns_[idx], idx);
    }
    stats_.journal_held.store(held_.size(), std::memory_order_relaxed);
    if (b.fd < 0) {
      durable_size_ = b.size;
      durable_inflight_ = true;
      on_durable_write(-EBADF);  // the handler's file could not be opened: same as a failed write
      return false;
    }
    if (!durable_partial_) {
      for (const uint32_t idx : held_) {
        conn& c = conns_[idx];
        c.mark = c.out.size();  // this write covers everything answered so far
      }
    }
    // else: the rest of a short or failed write; it covers only the marks set when that
    // batch was first taken (the handler returns a batch's rest before any newer record).
    durable_inflight_ = true;
    durable_size_ = b.size;
    if (opts_.journal_inline) {
      // The completion is handled at once: on success the held bytes are released and this
      // pass's flush_sends() sends them.
      ssize_t n = 0;
      do {
        n = ::write(b.fd, b.data, b.size);  // O_APPEND: at the end
      } while (n < 0 && errno == EINTR);
      on_durable_write(n < 0 ? -errno : static_cast<int>(n));
      return n > 0 && durable_partial_;
    }
    io_uring_sqe* sqe = get_sqe();
    // Offset -1: the file position (the file is O_APPEND, so the end).
    io_uring_prep_write(sqe, b.fd, b.data, static_cast<unsigned>(b.size), ~uint64_t{0});
    io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::durable_write)} << 56);
    return false;
  }
  for (const uint32_t idx : dirty_) {  // answered after the write in flight: wait for the next
    hold_if_durable(conns_[idx], idx);
  }
  stats_.journal_held.store(held_.size(), std::memory_order_relaxed);
  return false;
}

void core::on_durable_write(int res) {
  durable_inflight_ = false;
  handler_->durable_written(res);
  if (res < 0 || static_cast<size_t>(res) < durable_size_) {
    durable_partial_ = true;
    bump(stats_.journal_errors);
    if (res < 0) {
      log_error("core {}: usage journal write failed: {}; {} response(s) held, retrying", index_,
                std::strerror(-res), held_.size());
      durable_backoff_ns_ = durable_backoff_ns_ == 0              ? kBackoffMinNs
                            : durable_backoff_ns_ < kBackoffMaxNs ? durable_backoff_ns_ * 2
                                                                  : kBackoffMaxNs;
      durable_retry_at_ = now_mono_ + durable_backoff_ns_;
    } else if (res == 0) {
      durable_retry_at_ = now_mono_ + kBackoffMinNs;  // no progress: do not spin
    }
    // A short write: the handler hands its rest out again in this pass's durable step.
    return;
  }
  bump(stats_.journal_writes);
  durable_backoff_ns_ = 0;
  durable_partial_ = false;
  size_t kept = 0;
  for (const uint32_t idx : held_) {
    conn& c = conns_[idx];
    if (c.state != conn_state::open) {
      c.held_listed = false;  // closed (maybe reused): nothing of it is waiting
      continue;
    }
    if (c.mark > c.ready) {
      c.ready = c.mark;
      mark_dirty(c, idx);
    }
    if (c.out.size() > c.ready) {
      held_[kept++] = idx;  // answered while the write was in flight: the next write covers it
    } else {
      c.held_listed = false;
      c.durable_wait = false;
    }
  }
  held_.resize(kept);  // shrinking: no allocation
  stats_.journal_held.store(kept, std::memory_order_relaxed);
}

void core::on_durable_sync(int res) {
  sync_inflight_ = false;
  if (res < 0) {
    bump(stats_.journal_errors);
  } else {
    bump(stats_.journal_syncs);
  }
  handler_->durable_synced(res);
}

// At exit: the handler's bytes must not stay "in flight" for ever (its shutdown path writes
// what is left with write(2)), so wait a bounded time for the last write and sync, and for the
// cancelled operations of upstream connections (their buffers are ours).
void core::finish_durable() {
  for (int i = 0; i < 50 && (durable_inflight_ || sync_inflight_ || up_ops_ > 0 ||
                             file_writes_ > 0 || read_aheads_ > 0);
       ++i) {
    __kernel_timespec ts{};
    ts.tv_nsec = 100 * kMs;
    io_uring_cqe* first = nullptr;
    io_uring_submit_and_wait_timeout(&ring_, &first, 1, &ts, nullptr);
    unsigned head = 0;
    unsigned n = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      const auto kind = static_cast<op>(cqe->user_data >> 56);
      if (kind == op::durable_write) {
        on_durable_write(cqe->res);
      } else if (kind == op::durable_sync) {
        on_durable_sync(cqe->res);
      } else if (kind == op::file_write) {
        --file_writes_;
        handler_->on_file_written(static_cast<uint32_t>(cqe->user_data), cqe->res);
      } else if (kind == op::read_ahead) {
        --read_aheads_;  // (the request that waited for it is closed with its connection)
      } else if (kind == op::up_connect || kind == op::up_send || kind == op::up_recv) {
        on_up_cqe(kind, *cqe);  // closing (teardown): releases the connection
      } else if (kind == op::recv && (cqe->flags & IORING_CQE_F_BUFFER) != 0) {
        return_buffer(static_cast<uint16_t>(cqe->flags >> IORING_CQE_BUFFER_SHIFT));
      }
      ++n;
    }
    io_uring_cq_advance(&ring_, n);
  }
  if (durable_inflight_ || sync_inflight_) {
    log_error("core {}: usage journal write did not complete at exit", index_);
  }
}

}  // namespace tollgate::net::detail
