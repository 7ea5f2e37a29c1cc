// The per-core io_uring event loop: ring set-up, the loop pass and completion dispatch (see
// core.h for the pass structure). The rest of the core, by concern: core_accept.cc (accept,
// handoff, open and close), core_recv.cc (receive, parse, answer), core_deferred.cc (deferred
// requests), core_send.cc, core_durable.cc (the durable step), core_timers.cc (timers, wake,
// drain), core_files.cc (file writes, peer address) and upstream.cc (fetch).
//
// Kernel features: provided buffer rings (5.19) are required; multishot accept (5.19) and
// multishot recv (6.0) are used when the probe found them, else their single-shot forms are
// re-armed after each completion.
//
// Connection lifecycle:
//   1. accept: a free slot takes the fd, a recv is armed, the slot joins the header timer list.
//   2. open: received bytes are parsed in the provided buffer itself while no partial request
//      is pending; only an unparsed tail is copied to the slot's reassembly buffer `in`.
//      Each complete request is answered into `out`; at the end of the pass the part of `out`
//      the durable step released (`ready`: all of it when the handler writes nothing durable) moves
//      to `sending` and is sent (one send in flight per connection; short sends are resumed).
//      A request the handler defers (engine_io::defer) stays at the front of `in` with what
//      follows it; parsing stops until resume(), and the re-delivered request's answer lets the
//      rest of `in` go on, in order (see core.h and core_deferred.cc).
//   3. close_after_send (Connection: close, HTTP/1.0, parse error, peer EOF, drain): once the
//      last byte is sent the slot goes to lingering: shutdown(SHUT_WR), input is discarded until
//      the peer's FIN or the linger timeout, so the peer reads the final response instead of a
//      reset.
//      An idle keep-alive connection at its idle timeout lingers the same way (FIN first, input
//      dropped), so that a request crossing the close meets an EOF rather than a reset.
//   4. closing (errors, timeouts, drain of idle slots): shutdown(SHUT_RDWR) makes any armed recv
//      or send complete; when none is left, close(fd) and the slot returns to the pool with its
//      buffers' capacity kept, so the steady state allocates nothing.
#include "net/core.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "net/conn.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"

namespace tollgate::net::detail {

core::core(int index, const server_options& opts, const features& feat, int listen_fd,
           std::unique_ptr<http::handler> handler, core_stats& stats, const std::atomic<bool>& stop,
           handoff& hand)
    : index_(index),
      opts_(opts),
      feat_(feat),
      listen_fd_(listen_fd),
      handler_(std::move(handler)),
      stats_(stats),
      stop_(stop),
      handoff_(hand) {
  // Blocking on purpose: io_uring fails a read of an empty O_NONBLOCK file with EAGAIN at once
  // on some kernels, where a blocking one is polled until server::stop() writes to it.
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  TOLLGATE_CHECK(wake_fd_ >= 0);
}

core::~core() {
  for (conn& c : conns_) {
    if (c.fd >= 0) {
      ::close(c.fd);
    }
  }
  for (up_conn& u : up_conns_) {
    if (u.fd >= 0) {
      ::close(u.fd);
    }
  }
  if (ring_ok_) {
    // Exiting the ring cancels whatever is still armed before the buffers below go away.
    io_uring_queue_exit(&ring_);
  }
  if (br_ != nullptr) {
    ::munmap(br_, br_bytes_);
  }
  if (bufs_ != nullptr) {
    ::munmap(bufs_, bufs_bytes_);
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
  }
  if (tls_listen_fd_ >= 0) {
    ::close(tls_listen_fd_);
  }
  ::close(wake_fd_);
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
  }
}

result<void, std::string> core::setup() {
  if (auto r = setup_ring(); !r) {
    return r;
  }
  if (auto r = setup_buffer_ring(); !r) {
    return r;
  }
  setup_slots();
  return {};
}

// The ring with the flags the probe found (a kernel that refuses them gets a plain ring).
result<void, std::string> core::setup_ring() {
  const unsigned entries = opts_.ring_entries;
  io_uring_params p{};
  p.flags = IORING_SETUP_CQSIZE;
  p.cq_entries = entries * 4;
  if (feat_.submit_all) {
    p.flags |= IORING_SETUP_SUBMIT_ALL;
  }
  if (feat_.coop_taskrun) {
    p.flags |= IORING_SETUP_COOP_TASKRUN;
  }
  if (feat_.single_issuer) {
    p.flags |= IORING_SETUP_SINGLE_ISSUER;
  }
  if (feat_.defer_taskrun) {
    p.flags |= IORING_SETUP_DEFER_TASKRUN;
  }
  int rc = io_uring_queue_init_params(entries, &ring_, &p);
  if (rc == -EINVAL && (p.flags & ~IORING_SETUP_CQSIZE) != 0) {
    log_info("core {}: io_uring setup with flags {:#x} refused (EINVAL); using plain setup", index_,
             p.flags);
    p = io_uring_params{};
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 4;
    rc = io_uring_queue_init_params(entries, &ring_, &p);
  }
  if (rc < 0) {
    return unexpected(fmt::format("core {}: io_uring_queue_init({} entries): {}", index_, entries,
                                  std::strerror(-rc)));
  }
  ring_ok_ = true;
  multishot_accept_ = feat_.multishot_accept && !opts_.disable_multishot;
  multishot_recv_ = feat_.multishot_recv && !opts_.disable_multishot;
  return {};
}

// Provided buffer ring, mapped by hand (liburing 2.3 has no io_uring_setup_buf_ring).
result<void, std::string> core::setup_buffer_ring() {
  const unsigned count = opts_.recv_buffer_count;
  br_bytes_ = count * sizeof(io_uring_buf);
  void* m = ::mmap(nullptr, br_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return unexpected(fmt::format("core {}: mmap buffer ring: {}", index_, std::strerror(errno)));
  }
  br_ = static_cast<io_uring_buf_ring*>(m);
  stride_ = (opts_.recv_buffer_size + kPadding + 63) & ~size_t{63};
  bufs_bytes_ = stride_ * count;
  m = ::mmap(nullptr, bufs_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    bufs_ = nullptr;
    return unexpected(
        fmt::format("core {}: mmap {} receive buffers: {}", index_, count, std::strerror(errno)));
  }
  bufs_ = static_cast<char*>(m);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(br_);
  reg.ring_entries = count;
  reg.bgid = 0;
  const int rc = io_uring_register_buf_ring(&ring_, &reg, 0);
  if (rc < 0) {
    return unexpected(fmt::format(
        "core {}: io_uring_register_buf_ring: {} (provided buffer rings need Linux 5.19)", index_,
        std::strerror(-rc)));
  }
  br_registered_ = true;
  io_uring_buf_ring_init(br_);
  br_mask_ = io_uring_buf_ring_mask(count);
  for (unsigned i = 0; i < count; ++i) {
    io_uring_buf_ring_add(br_, bufs_ + i * stride_, opts_.recv_buffer_size,
                          static_cast<unsigned short>(i), br_mask_, static_cast<int>(i));
  }
  io_uring_buf_ring_advance(br_, static_cast<int>(count));
  return {};
}

// The descriptor reserve, the slot pool and every list sized for max_connections, and the
// timeouts, so the steady state allocates nothing.
void core::setup_slots() {
  rlimit nofile{};
  if (opts_.fd_reserve > 0 && ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 &&
      nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < rlim_t{INT32_MAX}) {
    fd_ceiling_ = nofile.rlim_cur > opts_.fd_reserve
                      ? static_cast<int>(nofile.rlim_cur - opts_.fd_reserve)
                      : 0;
    // A multishot burst is at most about a backlog of connections (see place_conn()).
    fd_single_from_ = fd_ceiling_ - opts_.listen_backlog;
    accept_single_ = fd_single_from_ <= 0;
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // for refuse_backlog()
  }
  handed_.reserve(64);
  conns_.resize(opts_.max_connections);
  free_.reserve(opts_.max_connections);
  for (uint32_t i = opts_.max_connections; i > 0; --i) {
    free_.push_back(i - 1);
  }
  dirty_.reserve(opts_.max_connections);
  held_.reserve(opts_.max_connections);
  resumed_.reserve(opts_.max_connections);
  resumed_work_.reserve(opts_.max_connections);
  timeout_ns_[kListHeader] = int64_t{opts_.header_timeout_ms} * kMs;
  timeout_ns_[kListIdle] = int64_t{opts_.idle_timeout_ms} * kMs;
  timeout_ns_[kListLinger] = int64_t{opts_.linger_timeout_ms} * kMs;
  // A partial request never needs more than this (see http::limits); more means a client
  // pipelining without reading while parsing is paused.
  max_in_ = 2 * opts_.limits.max_header_bytes + opts_.limits.max_body_bytes +
            opts_.recv_buffer_size + kOutHighWater;
}

uint64_t core::conn_data(op kind, uint32_t idx) const noexcept {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) |
         (uint64_t{conns_[idx].gen & 0xffffff} << 32) | idx;
}

uint32_t core::conn_gen(uint32_t idx) const noexcept { return conns_[idx].gen; }

int core::conn_fd(uint32_t idx) const noexcept { return conns_[idx].fd; }

size_t core::conn_slots() const noexcept { return conns_.size(); }

io_uring_sqe* core::get_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // SQ full: flush early (the only extra submit a pass can make) and retry.
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
    TOLLGATE_CHECK(sqe != nullptr);
  }
  return sqe;
}

void core::read_clocks() noexcept {
  now_mono_ = clock_ns(CLOCK_MONOTONIC);
  now_real_ = clock_ns(CLOCK_REALTIME);
}

void core::run() {
  read_clocks();
  handler_->attach(*this);
  attached_ = true;
  // Every connection the caps allow, so the pool never grows (or moves) while fetching.
  up_conns_.reserve(upstreams_.size() * kMaxUpstreamConns);
  up_free_.reserve(upstreams_.size() * kMaxUpstreamConns);
  heap_.reserve(upstreams_.size() * kMaxUpstreamConns);
  for (upstream& u : upstreams_) {
    u.idle.reserve(kMaxUpstreamConns);
  }
  read_clocks();
  next_tick_ = now_mono_ + kTickNs;
  arm_wake();
  maybe_arm_accept();
  while (!done()) {
    if (!wait()) {
      break;
    }
    read_clocks();
    run_handshake_queue();  // handshakes that waited for budget go first (core_tls.cc)
    if (draining_ && now_mono_ > drain_deadline_ + 5000 * kMs) {
      // Every connection was shut down at the deadline; completions that still have not come
      // are abandoned (exiting the ring cancels them).
      log_error("core {}: {} connection(s) did not finish closing; exiting anyway", index_, open_);
      break;
    }
    reap();
    deliver_queued_replies();
    expire_fetches();
    if (!draining_ && stop_.load(std::memory_order_relaxed)) {
      begin_drain();
    }
    maybe_wake_handler();  // before the resumes: what it resumes is delivered this pass
    process_resumes();
    if (now_mono_ >= next_tick_) {
      tick();
      next_tick_ = now_mono_ + kTickNs;
    }
    handler_->before_send(now_real_);
    durable_step();
    // Accept is re-armed or cancelled before the sends are queued, so a peer that reacts to a
    // response by connecting cannot be accepted past the cap; and again after, since a send
    // may have closed a connection.
    maybe_arm_accept();
    flush_sends();
    maybe_arm_accept();
    if (br_pending_ > 0) {
      io_uring_buf_ring_advance(br_, br_pending_);
      br_pending_ = 0;
    }
    bump(stats_.loop_passes);
  }
  teardown_upstreams();
  finish_durable();
}

// Loop step 1: this pass's one submit, and the wait for a CQE, the next tick or the earliest
// fetch deadline (no wait while resumes or replies are queued).
bool core::wait() {
  int64_t wake_at = next_tick_;
  if (!heap_.empty() && up_conns_[heap_[0]].deadline < wake_at) {
    wake_at = up_conns_[heap_[0]].deadline;
  }
  if (handler_wake_at_ < wake_at) {
    wake_at = handler_wake_at_;
  }
  if (!resumed_.empty() || !replies_.empty() || !hs_wait_.empty()) {
    wake_at = now_mono_;  // work queued for the next pass: do not sleep
  }
  int64_t wait_ns = wake_at - now_mono_;
  if (wait_ns <= 0) {
    // Nothing to wait for: submit and take what has completed (the completions' deferred task
    // work runs inside this enter) without the kernel's wait path, whose set-up for a zero
    // timeout cost ~10 µs a pass on this VM. A search in slices takes one pass per slice.
    const int rc = io_uring_submit_and_get_events(&ring_);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      log_error("core {}: io_uring enter failed: {}; stopping this core", index_,
                std::strerror(-rc));
      return false;
    }
    return true;
  }
  __kernel_timespec ts{};
  ts.tv_sec = wait_ns / 1000000000;
  ts.tv_nsec = wait_ns % 1000000000;
  io_uring_cqe* first = nullptr;
  const int rc = io_uring_submit_and_wait_timeout(&ring_, &first, 1, &ts, nullptr);
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
    log_error("core {}: io_uring wait failed: {}; stopping this core", index_, std::strerror(-rc));
    return false;
  }
  return true;
}

// Loop step 2: every CQE that has come.
void core::reap() {
  unsigned head = 0;
  unsigned n = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    on_cqe(*cqe);
    ++n;
  }
  io_uring_cq_advance(&ring_, n);
  bump(stats_.completions, n);
}

bool core::done() const noexcept {
  return draining_ && open_ == 0 && !accept_armed_ && !tls_accept_armed_ && !wake_armed_ &&
         !durable_inflight_ && !sync_inflight_ && file_writes_ == 0 && read_aheads_ == 0;
}

void core::on_cqe(const io_uring_cqe& cqe) {
  const uint64_t ud = cqe.user_data;
  const auto kind = static_cast<op>(ud >> 56);
  switch (kind) {
    case op::accept:
      on_accept(cqe);
      return;
    case op::accept_tls:
      on_tls_accept(cqe);
      return;
    case op::wake:
      on_wake(cqe);
      return;
    case op::cancel:
      return;
    case op::durable_write:
      on_durable_write(cqe.res);
      return;
    case op::durable_sync:
      on_durable_sync(cqe.res);
      return;
    case op::up_connect:
    case op::up_send:
    case op::up_recv:
      on_up_cqe(kind, cqe);
      return;
    case op::file_write:
      --file_writes_;
      handler_->on_file_written(static_cast<uint32_t>(ud), cqe.res);
      return;
    case op::read_ahead:
      --read_aheads_;
      handler_->on_read_ahead(static_cast<uint32_t>(ud), cqe.res);
      return;
    case op::recv:
    case op::send: {
      const auto idx = static_cast<uint32_t>(ud);
      const auto gen = static_cast<uint32_t>((ud >> 32) & 0xffffff);
      TOLLGATE_ASSERT(idx < conns_.size());
      conn& c = conns_[idx];
      if ((c.gen & 0xffffff) != gen || c.state == conn_state::free) {
        TOLLGATE_ASSERT(false && "completion for a released slot");
        if (kind == op::recv && (cqe.flags & IORING_CQE_F_BUFFER) != 0) {
          return_buffer(static_cast<uint16_t>(cqe.flags >> IORING_CQE_BUFFER_SHIFT));
        }
        return;
      }
      if (kind == op::recv) {
        on_recv(c, idx, cqe);
      } else {
        on_send(c, idx, cqe.res);
      }
      return;
    }
  }
  TOLLGATE_ASSERT(false && "unknown user_data");
}

}  // namespace tollgate::net::detail
