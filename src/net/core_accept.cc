// The connection lifecycle's ends: accept (with the cross-core handoff and the 503 refusals at
// the caps and the descriptor reserve), opening a slot, and closing it (see core.cc's numbered
// connection lifecycle).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "net/conn.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"

namespace tollgate::net::detail {

// ---- accept -------------------------------------------------------------------------------

void core::arm_accept() {
  io_uring_sqe* sqe = get_sqe();
  if (multishot_accept_ && !accept_single_) {
    io_uring_prep_multishot_accept(sqe, listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  } else {
    io_uring_prep_accept(sqe, listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  }
  io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::accept)} << 56);
  accept_armed_ = true;
}

void core::cancel(uint64_t user_data) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_cancel64(sqe, user_data, 0);
  io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::cancel)} << 56);
}

// Accept runs while the core is not draining and not backing off after an accept error (then a
// multishot accept is cancelled and pending connections wait in the listener's backlog until
// the back-off ends). It runs at the cap too: place_conn() hands a connection this core has no
// slot for to another core, or refuses it with a 503, rather than leave it in the backlog.
void core::maybe_arm_accept() {
  const bool want = !draining_ && now_mono_ >= accept_resume_at_;
  if (want && !accept_armed_) {
    arm_accept();
  } else if (!want && accept_armed_ && !accept_cancel_pending_ && listen_fd_ >= 0) {
    cancel(uint64_t{static_cast<uint8_t>(op::accept)} << 56);
    accept_cancel_pending_ = true;
  }
  if (tls_listen_fd_ < 0) {
    return;
  }
  if (want && !tls_accept_armed_) {
    arm_tls_accept();
  } else if (!want && tls_accept_armed_ && !tls_accept_cancel_pending_) {
    cancel(uint64_t{static_cast<uint8_t>(op::accept_tls)} << 56);
    tls_accept_cancel_pending_ = true;
  }
}

void core::on_accept(const io_uring_cqe& cqe) {
  if ((cqe.flags & IORING_CQE_F_MORE) == 0) {
    accept_armed_ = false;
    accept_cancel_pending_ = false;
  }
  const int res = cqe.res;
  if (res >= 0) {
    accept_backoff_ns_ = 0;
    place_conn(res);
    return;
  }
  if (res == -ECANCELED || res == -ECONNABORTED || res == -EINTR || res == -EAGAIN) {
    return;
  }
  // EMFILE, ENFILE, ENOBUFS, ENOMEM and anything unexpected: retry on a timer, never in a loop.
  bump(stats_.accept_errors);
  if (res == -EMFILE || res == -ENFILE) {
    refuse_backlog();
  }
  if (accept_backoff_ns_ == 0) {
    log_error("core {}: accept failed: {}; retrying with back-off", index_, std::strerror(-res));
    accept_backoff_ns_ = kBackoffMinNs;
  } else if (accept_backoff_ns_ < kBackoffMaxNs) {
    accept_backoff_ns_ *= 2;
  }
  accept_resume_at_ = now_mono_ + accept_backoff_ns_;
}

// A connection this core accepted: kept when it has a free slot, else handed to the core with
// the most room (handoff.h), else refused. One inside the descriptor reserve is refused first:
// the descriptors above fd_ceiling_ belong to the rest of the process.
// A TLS connection travels through the handoff with kTlsFdBit set in its descriptor number.
constexpr int kTlsFdBit = 1 << 30;

void core::place_conn(int fd, bool tls) {
  if (draining_) {
    ::close(fd);  // accepted in the same burst as the stop
    return;
  }
  if (fd >= fd_single_from_ && !accept_single_) {
    // A multishot accept takes a descriptor for every connection waiting in the backlog before
    // this loop sees (and closes) any of them, so near the ceiling a burst would run through
    // the reserve: accept one at a time while the table is this full.
    accept_single_ = true;
    if (accept_armed_ && multishot_accept_ && !accept_cancel_pending_) {
      cancel(uint64_t{static_cast<uint8_t>(op::accept)} << 56);
      accept_cancel_pending_ = true;
    }
  } else if (accept_single_ && fd < fd_single_from_ - opts_.listen_backlog) {
    accept_single_ = false;  // room again: the next accept armed is multishot
  }
  if (fd >= fd_ceiling_) {
    bump(stats_.rejected_no_fd);                // (counted first: the client may look right after)
    tls ? (void)::close(fd) : refuse_conn(fd);  // (a TLS client could not read a plain 503)
    return;
  }
  if (handoff_.reserve(index_)) {
    if (!free_.empty()) {
      open_conn(fd, tls);
      return;
    }
    handoff_.release(index_);  // (cannot happen: load counts every slot in use)
  }
  const int to = handoff_.reserve_elsewhere(index_);
  if (to >= 0) {
    bump(stats_.handed_off);
    handoff_.push(to, tls ? fd | kTlsFdBit : fd);
    return;
  }
  bump(stats_.rejected);
  tls ? (void)::close(fd) : refuse_conn(fd);
}

// No core can take the connection: a 503 the client can read, then the close. The socket is
// fresh, so the send fits its buffer; the request bytes that already came are read first so
// the close is a FIN rather than a reset that could discard the 503 on the client's side.
void core::refuse_conn(int fd) {
  static constexpr std::string_view k503 =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Retry-After: 1\r\nConnection: close\r\nContent-Length: 96\r\n\r\n"
      "{\"code\":\"unavailable\",\"message\":\"The server has no room for another connection; "
      "retry shortly.\"}";
  static_assert(k503.size() - k503.find("\r\n\r\n") - 4 == 96, "Content-Length");
  [[maybe_unused]] const ssize_t w =
      ::send(fd, k503.data(), k503.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  char sink[2048];
  for (int i = 0; i < 8 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
  ::close(fd);
}

// The descriptor table is full (fd_reserve set): the connections waiting in this core's
// backlog cannot be served, but each can be told so rather than left waiting out the back-off.
// The spare descriptor the core keeps for this is closed so that one accept4() can take a
// connection, which is answered 503 and closed, and the spare is taken back; a bounded number
// per accept error, so a table that stays full never makes the loop spin. poll() first: the
// listener is blocking, and only this core accepts from it.
void core::refuse_backlog() {
  for (int i = 0; i < 64 && spare_fd_ >= 0 && listen_fd_ >= 0; ++i) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) {
      return;
    }
    ::close(spare_fd_);
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      bump(stats_.rejected_no_fd);
      refuse_conn(fd);
    }
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return;  // another thread took the descriptor first
    }
  }
}

// Connections other cores accepted at their caps and handed here (their slots are reserved).
void core::take_handoffs() {
  handoff_.take(index_, handed_);
  for (const int handed : handed_) {
    const bool tls = (handed & kTlsFdBit) != 0;
    const int fd = handed & ~kTlsFdBit;
    if (draining_ || free_.empty()) {
      handoff_.release(index_);
      if (draining_ || tls) {
        ::close(fd);
      } else {
        bump(stats_.rejected);
        refuse_conn(fd);
      }
      continue;
    }
    open_conn(fd, tls);
  }
  handed_.clear();
}

void core::open_conn(int fd, bool tls) {
  const uint32_t idx = free_.back();
  free_.pop_back();
  conn& c = conns_[idx];
  TOLLGATE_ASSERT(c.state == conn_state::free);
  c.fd = fd;
  c.state = conn_state::open;
  c.recv_armed = c.send_inflight = c.close_after_send = false;
  c.head_done = c.continue_sent = c.paused = c.recv_cancelled = false;  // `dirty`: dirty_ member
  c.deferred = c.resume_queued = c.peer_fin = c.idle_closed = false;
  c.sent = 0;
  c.need = 0;
  c.ready = c.mark = 0;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c.tls.close();
  if (tls && !tls_open(c)) {
    ::close(fd);  // no memory for the TLS state
    c.fd = -1;
    c.state = conn_state::free;
    free_.push_back(idx);
    handoff_.release(index_);
    return;
  }
  ++open_;
  bump(stats_.accepted);
  stats_.open_connections.store(open_, std::memory_order_relaxed);
  arm_recv(c, idx);
  // The first request head must arrive within header_timeout (nginx client_header_timeout).
  link(idx, kListHeader);
  c.head_timer = true;
}

// ---- close --------------------------------------------------------------------------------

void core::hard_close(conn& c, uint32_t idx) {
  if (c.state == conn_state::closing || c.state == conn_state::free) {
    return;
  }
  unlink(idx);
  c.state = conn_state::closing;
  if (c.recv_armed || c.send_inflight) {
    // Completes the armed recv (EOF) and send (EPIPE); the slot is released after both.
    ::shutdown(c.fd, SHUT_RDWR);
  }
  maybe_release(c, idx);
}

void core::graceful_close(conn& c, uint32_t idx) {
  TOLLGATE_ASSERT(!c.send_inflight && c.out.empty());
  if (!c.recv_armed) {  // the peer already closed its side
    hard_close(c, idx);
    return;
  }
  c.state = conn_state::lingering;
  c.in.clear();
  ::shutdown(c.fd, SHUT_WR);  // FIN after the last response byte
  link(idx, kListLinger);
}

void core::maybe_release(conn& c, uint32_t idx) {
  if (c.state != conn_state::closing || c.recv_armed || c.send_inflight) {
    return;
  }
  tls_release(c);
  ::close(c.fd);
  c.fd = -1;
  c.state = conn_state::free;
  ++c.gen;
  c.in.clear();
  c.out.clear();
  c.sending.clear();
  c.ready = c.mark = 0;
  c.durable_wait = false;
  free_saved(c);
  c.deferred = c.resume_queued = false;
  if (c.in.capacity() > kKeepInCapacity) {
    c.in = out_buffer();
  }
  if (c.out.capacity() > kKeepOutCapacity) {
    c.out = out_buffer();
  }
  if (c.sending.capacity() > kKeepOutCapacity) {
    c.sending = out_buffer();
  }
  free_.push_back(idx);
  handoff_.release(index_);
  --open_;
  bump(stats_.closed);
  stats_.open_connections.store(open_, std::memory_order_relaxed);
}

}  // namespace tollgate::net::detail
