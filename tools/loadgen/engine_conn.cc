// The runner's connections (connect, close, back off, reopen) and requests (issue on a
// connection, flush the queued ones with one send each) (engine_runner.h).
#include <liburing.h>
#include <linux/tcp.h>  // struct tcp_info with tcpi_segs_out (glibc's lacks it), TCP_* options
#include <netinet/in.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "engine_runner.h"

namespace tollgate::loadgen::detail {

void runner::start_due_connects(std::uint64_t now) {
  std::size_t keep = 0;
  for (std::size_t i = 0; i < down_.size(); i++) {
    connection& c = conns_[down_[i]];
    if (c.retry_at <= now && !start_connect(down_[i], now)) {
      down_[keep++] = down_[i];
    } else if (c.retry_at > now) {
      down_[keep++] = down_[i];
    }
  }
  down_.resize(keep);
}

bool runner::start_connect(std::uint32_t i, std::uint64_t now) {
  connection& c = conns_[i];
  int fd = ::socket(cfg_.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    count_transport(errno_name(errno), now, 1);
    c.retry_at = now + 100'000'000;
    return false;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (!cfg_.congestion.empty() && !congestion_refused_ &&
      ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cfg_.congestion.data(),
                   static_cast<socklen_t>(cfg_.congestion.size())) != 0) {
    congestion_refused_ = true;
    note("TCP_CONGESTION " + cfg_.congestion + " refused (" + std::strerror(errno) +
         "): the system default");
  }
  if (fixed_) {
    int r = io_uring_register_files_update(&ring_, i, &fd, 1);
    if (r < 0) {
      ::close(fd);
      count_transport("io_uring_register_files_update failed", now, 1);
      c.retry_at = now + 100'000'000;
      return false;
    }
  }
  c.fd = fd;
  c.st = connection::state::connecting;
  c.in_len = 0;
  c.parser.reset();
  c.fifo_head = 0;
  c.fifo_count = 0;
  c.out_q.clear();
  c.out_fly.clear();
  c.fly_off = 0;
  c.send_busy = false;
  io_uring_sqe* s = sqe();
  io_uring_prep_connect(s, fd, reinterpret_cast<const sockaddr*>(&cfg_.addr), cfg_.addr_len);
  target(s, i);
  io_uring_sqe_set_data64(s, pack(i, op_connect));
  c.sqes++;
  return true;
}

void runner::arm_recv(std::uint32_t i) {
  connection& c = conns_[i];
  io_uring_sqe* s = sqe();
  if (br_ != nullptr) {
    // One SQE keeps reading until it fails, the peer closes or the buffers run out.
    io_uring_prep_recv_multishot(s, c.fd, nullptr, 0, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = buf_group;
  } else if (c.ssl != nullptr) {
    io_uring_prep_recv(s, c.fd, c.tls_in.data(), c.tls_in.size(), 0);  // ciphertext
  } else {
    if (c.in.size() - c.in_len < 4096) {
      c.in.resize(c.in.size() * 2);
    }
    io_uring_prep_recv(s, c.fd, c.in.data() + c.in_len, c.in.size() - c.in_len, 0);
  }
  target(s, i);
  io_uring_sqe_set_data64(s, pack(i, op_recv));
  c.sqes++;
}

void runner::begin_close(std::uint32_t i, const char* why, std::uint64_t now, bool backoff) {
  connection& c = conns_[i];
  if (c.st == connection::state::closing || c.st == connection::state::down) {
    return;
  }
  if (c.fifo_count > 0) {
    count_transport(why != nullptr ? why : "closed with requests outstanding", now, c.fifo_count);
  }
  inflight_ -= c.fifo_count;
  c.fifo_count = 0;
  c.st = connection::state::closing;
  c.retry_later = backoff;
  ::shutdown(c.fd, SHUT_RDWR);
  maybe_finish_close(i, now);
}

void runner::maybe_finish_close(std::uint32_t i, std::uint64_t now) {
  connection& c = conns_[i];
  if (c.st != connection::state::closing || c.sqes > 0) {
    return;
  }
  if (fixed_) {
    int none = -1;
    io_uring_register_files_update(&ring_, i, &none, 1);
  }
  if (tcp_window_started_) {
    add_tcp_counts(c.fd, +1);
  }
  ::close(c.fd);
  tls_end(c);
  c.fd = -1;
  c.st = connection::state::down;
  c.retry_at = c.retry_later ? now + 50'000'000 : now;
  down_.push_back(i);
}

void runner::issue(std::uint32_t i, std::uint64_t t0) {
  connection& c = conns_[i];
  std::size_t spec = pick_.spec();
  std::size_t key = w_.key_count() > 1 ? pick_.key() : 0;
  std::size_t query = pick_.query();
  std::int64_t id = w_.fixed_id() ? 1 : ++next_id_;
  w_.render(c.out_q, body_tmp_, spec, key, query, id);
  std::size_t slot = (c.fifo_head + c.fifo_count) % c.fifo.size();
  c.fifo[slot] = pending_req{t0, id, static_cast<std::uint32_t>(spec)};
  c.fifo_count++;
  inflight_++;
  if (!c.dirty) {
    c.dirty = true;
    dirty_.push_back(i);
  }
}

void runner::issue_due(std::uint64_t now) {
  while (next_due_ <= static_cast<double>(now) && next_due_ < static_cast<double>(t_.end)) {
    std::uint32_t i = 0;
    if (!pop_free(i)) {
      return;  // every connection is full: the request waits, its latency keeps counting
    }
    issue(i, static_cast<std::uint64_t>(next_due_));
    next_due_ += interval_ns_;
    connection& c = conns_[i];
    if (c.fifo_count < c.fifo.size()) {
      push_free(i);
    }
  }
}

bool runner::pop_free(std::uint32_t& out) {
  while (!free_.empty()) {
    std::uint32_t i = free_.back();
    free_.pop_back();
    connection& c = conns_[i];
    c.in_free = false;
    if (c.st == connection::state::open && c.fifo_count < c.fifo.size()) {
      out = i;
      return true;
    }
  }
  return false;
}

void runner::push_free(std::uint32_t i) {
  connection& c = conns_[i];
  if (!c.in_free) {
    c.in_free = true;
    free_.push_back(i);
  }
}

void runner::flush() {
  for (std::uint32_t i : dirty_) {
    connection& c = conns_[i];
    c.dirty = false;
    if (c.st != connection::state::open || c.send_busy) {
      continue;
    }
    if (c.ssl != nullptr) {
      tls_flush(i);
      continue;
    }
    if (c.out_q.empty()) {
      continue;
    }
    std::swap(c.out_q, c.out_fly);
    c.out_q.clear();
    c.fly_off = 0;
    submit_send(i);
  }
  dirty_.clear();
}

void runner::submit_send(std::uint32_t i) {
  connection& c = conns_[i];
  io_uring_sqe* s = sqe();
  io_uring_prep_send(s, c.fd, c.out_fly.data() + c.fly_off, c.out_fly.size() - c.fly_off,
                     MSG_NOSIGNAL);
  target(s, i);
  io_uring_sqe_set_data64(s, pack(i, op_send));
  c.sqes++;
  c.send_busy = true;
  sends_unsubmitted_++;
}

}  // namespace tollgate::loadgen::detail
