// The per-core io_uring event loop (see core.h for the pass structure).
//
// Kernel features: provided buffer rings (5.19) are required; multishot accept (5.19) and
// multishot recv (6.0) are used when the probe found them, else their single-shot forms are
// re-armed after each completion. The outbound client (fetch) is in upstream.cc.
//
// Connection lifecycle:
//   1. accept: a free slot takes the fd, a recv is armed, the slot joins the header timer list.
//   2. open: received bytes are parsed in the provided buffer itself while no partial request
//      is pending; only an unparsed tail is copied to the slot's reassembly buffer `in`.
//      Each complete request is answered into `out`; at the end of the pass the part of `out`
//      the journal step released (`ready`: all of it when the handler journals nothing) moves
//      to `sending` and is sent (one send in flight per connection; short sends are resumed).
//      A request the handler defers (engine_io::defer) stays at the front of `in` with what
//      follows it; parsing stops until resume(), and the re-delivered request's answer lets the
//      rest of `in` go on, in order (see core.h; "deferred requests" below).
//   3. close_after_send (Connection: close, HTTP/1.0, parse error, peer EOF, drain): once the
//      last byte is sent the slot goes to lingering: shutdown(SHUT_WR), input is discarded until
//      the peer's FIN or the linger timeout, so the peer reads the final response instead of a
//      reset.
//   4. closing (errors, timeouts, drain of idle slots): shutdown(SHUT_RDWR) makes any armed recv
//      or send complete; when none is left, close(fd) and the slot returns to the pool with its
//      buffers' capacity kept, so the steady state allocates nothing.
#include "net/core.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include <fmt/core.h>
#include <fmt/format.h>

#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"
#include "tollgate/http/parser.h"
#include "tollgate/http/response.h"

namespace tollgate::net::detail {
namespace {

constexpr int64_t kMs = 1000000;
constexpr int64_t kTickNs = 100 * kMs;
constexpr int64_t kBackoffMinNs = 100 * kMs;
constexpr int64_t kBackoffMaxNs = 1000 * kMs;
/// Parsing pauses while a connection has this much unsent output (a client that pipelines
/// without reading); it resumes when the output has drained.
constexpr size_t kOutHighWater = 1 << 20;
/// Reassembly and output buffers above these capacities are freed when their slot is released.
constexpr size_t kKeepInCapacity = 64 * 1024;
constexpr size_t kKeepOutCapacity = 256 * 1024;

enum : uint8_t { kListHeader = 0, kListIdle = 1, kListLinger = 2, kNoList = 255 };

enum class conn_state : uint8_t { free, open, lingering, closing };

int64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void bump(std::atomic<uint64_t>& a, uint64_t n = 1) noexcept {
  // Single writer (this core): a plain load+store avoids a locked instruction; relaxed because
  // readers only want an eventually-current figure.
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace

/// One connection slot. Shard-local.
struct conn {
  int fd = -1;
  uint32_t gen = 0;  // bumped on release; carried in user_data to catch stale completions
  conn_state state = conn_state::free;
  bool recv_armed = false;
  bool send_inflight = false;
  bool close_after_send = false;  // no more requests: close once the output is sent
  bool head_done = false;         // the pending partial request has its whole head
  bool head_timer = false;        // in the header list timing a head (not refreshed by bytes)
  bool continue_sent = false;     // "100 Continue" already sent for the pending request
  bool dirty = false;             // in core::dirty_
  bool paused = false;            // parsing paused: too much unsent output
  bool recv_cancelled = false;    // the armed recv was cancelled because input paused
  bool held_listed = false;       // in core::held_ (kept across a slot's reuse until swept)
  bool journal_wait = false;      // `out` past `ready` holds a journaled (billed) response
  bool deferred = false;          // a deferred request waits at the front of `in`
  bool resume_queued = false;     // in core::resumed_ (resume() accepted, not delivered yet)
  bool peer_fin = false;          // the peer half-closed: answer what came before, then close
  uint32_t saved = UINT32_MAX;    // the deferred request's parsed form (core::saved_)
  uint32_t req_id = 0;            // the request being handled or deferred (deferral_token::gen)
  size_t need = 0;  // bytes the pending request needs in `in` before parsing again (0: unknown)
  uint8_t list = kNoList;
  uint32_t prev = UINT32_MAX;
  uint32_t next = UINT32_MAX;
  int64_t ts = 0;      // when the current timer started (monotonic ns)
  size_t sent = 0;     // bytes of `sending` already sent
  size_t ready = 0;    // bytes at the front of `out` the journal released (may be sent)
  size_t mark = 0;     // bytes at the front of `out` the in-flight journal write covers
  out_buffer in;       // unparsed bytes of a request that spans receives (+ kPadding spare)
  out_buffer out;      // responses written this pass (or while a send was in flight)
  out_buffer sending;  // the bytes of the send in flight
};

core::core(int index, const server_options& opts, const features& feat, int listen_fd,
           std::unique_ptr<http::handler> handler, core_stats& stats,
           const std::atomic<bool>& stop, handoff& hand)
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
  ::close(wake_fd_);
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
  }
}

result<void, std::string> core::setup() {
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
    log_info("core {}: io_uring setup with flags {:#x} refused (EINVAL); using plain setup",
             index_, p.flags);
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

  // Provided buffer ring, mapped by hand (liburing 2.3 has no io_uring_setup_buf_ring).
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
    return unexpected(fmt::format("core {}: mmap {} receive buffers: {}", index_, count,
                                  std::strerror(errno)));
  }
  bufs_ = static_cast<char*>(m);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(br_);
  reg.ring_entries = count;
  reg.bgid = 0;
  rc = io_uring_register_buf_ring(&ring_, &reg, 0);
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
  return {};
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
    int64_t wake_at = next_tick_;
    if (!heap_.empty() && up_conns_[heap_[0]].deadline < wake_at) {
      wake_at = up_conns_[heap_[0]].deadline;
    }
    if (!resumed_.empty() || !replies_.empty()) {
      wake_at = now_mono_;  // work queued for the next pass: do not sleep
    }
    int64_t wait_ns = wake_at - now_mono_;
    if (wait_ns < 0) {
      wait_ns = 0;
    }
    __kernel_timespec ts{};
    ts.tv_sec = wait_ns / 1000000000;
    ts.tv_nsec = wait_ns % 1000000000;
    io_uring_cqe* first = nullptr;
    const int rc = io_uring_submit_and_wait_timeout(&ring_, &first, 1, &ts, nullptr);
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      log_error("core {}: io_uring wait failed: {}; stopping this core", index_,
                std::strerror(-rc));
      break;
    }
    read_clocks();
    if (draining_ && now_mono_ > drain_deadline_ + 5000 * kMs) {
      // Every connection was shut down at the deadline; completions that still have not come
      // are abandoned (exiting the ring cancels them).
      log_error("core {}: {} connection(s) did not finish closing; exiting anyway", index_, open_);
      break;
    }

    unsigned head = 0;
    unsigned n = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      on_cqe(*cqe);
      ++n;
    }
    io_uring_cq_advance(&ring_, n);
    bump(stats_.completions, n);

    deliver_queued_replies();
    expire_fetches();
    if (!draining_ && stop_.load(std::memory_order_relaxed)) {
      begin_drain();
    }
    process_resumes();
    if (now_mono_ >= next_tick_) {
      tick();
      next_tick_ = now_mono_ + kTickNs;
    }
    handler_->before_send(now_real_);
    journal_step();
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
  finish_journal();
}

bool core::done() const noexcept {
  return draining_ && open_ == 0 && !accept_armed_ && !wake_armed_ && !journal_inflight_ &&
         !sync_inflight_ && file_writes_ == 0;
}

void core::on_cqe(const io_uring_cqe& cqe) {
  const uint64_t ud = cqe.user_data;
  const auto kind = static_cast<op>(ud >> 56);
  switch (kind) {
    case op::accept:
      on_accept(cqe);
      return;
    case op::wake:
      on_wake(cqe);
      return;
    case op::cancel:
      return;
    case op::journal_write:
      on_journal_write(cqe.res);
      return;
    case op::journal_sync:
      on_journal_sync(cqe.res);
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
void core::place_conn(int fd) {
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
    bump(stats_.rejected_no_fd);  // (counted first: the client may look right after)
    refuse_conn(fd);
    return;
  }
  if (handoff_.reserve(index_)) {
    if (!free_.empty()) {
      open_conn(fd);
      return;
    }
    handoff_.release(index_);  // (cannot happen: load counts every slot in use)
  }
  const int to = handoff_.reserve_elsewhere(index_);
  if (to >= 0) {
    bump(stats_.handed_off);
    handoff_.push(to, fd);
    return;
  }
  bump(stats_.rejected);
  refuse_conn(fd);
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
  for (const int fd : handed_) {
    if (draining_ || free_.empty()) {
      handoff_.release(index_);
      if (draining_) {
        ::close(fd);
      } else {
        bump(stats_.rejected);
        refuse_conn(fd);
      }
      continue;
    }
    open_conn(fd);
  }
  handed_.clear();
}

void core::open_conn(int fd) {
  const uint32_t idx = free_.back();
  free_.pop_back();
  conn& c = conns_[idx];
  TOLLGATE_ASSERT(c.state == conn_state::free);
  c.fd = fd;
  c.state = conn_state::open;
  c.recv_armed = c.send_inflight = c.close_after_send = false;
  c.head_done = c.continue_sent = c.paused = c.recv_cancelled = false;  // `dirty`: dirty_ member
  c.deferred = c.resume_queued = c.peer_fin = false;
  c.sent = 0;
  c.need = 0;
  c.ready = c.mark = 0;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ++open_;
  bump(stats_.accepted);
  stats_.open_connections.store(open_, std::memory_order_relaxed);
  arm_recv(c, idx);
  // The first request head must arrive within header_timeout (nginx client_header_timeout).
  link(idx, kListHeader);
  c.head_timer = true;
}

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
      on_data(c, idx, bufs_ + size_t{bid} * stride_, static_cast<size_t>(res));
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
      const size_t used = process(c, idx, c.in.data(), c.in.size(), completed);
      c.in.consume(used);
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
    http::write_error_response(c.out, r.error);  // status_of(error) + Connection: close
    c.close_after_send = true;
    mark_dirty(c, idx);
    break;
  }
  return off;
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

// ---- deferred requests --------------------------------------------------------------------

namespace {

constexpr std::string_view kInternalError =
    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

// Moves a view that points into [from, from + len] to the same offset from `to`. `from` is only
// an address: the bytes may have moved (provided buffer -> `in`, or `in` reallocated).
void rebase(std::string_view& v, uintptr_t from, size_t len, const char* to) noexcept {
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  if (p >= from && p <= from + len) {
    v = std::string_view(to + (p - from), v.size());
  }
}

void rebase(http::request& r, uintptr_t from, size_t len, const char* to) noexcept {
  rebase(r.method, from, len, to);
  rebase(r.target, from, len, to);
  rebase(r.path, from, len, to);
  rebase(r.query, from, len, to);
  rebase(r.body, from, len, to);
  for (size_t i = 0; i < r.num_headers; ++i) {
    rebase(r.headers[i].name, from, len, to);
    rebase(r.headers[i].value, from, len, to);
  }
}

}  // namespace

http::deferral_token core::defer() {
  TOLLGATE_ASSERT(cur_idx_ != kNil && "defer() outside handle()");
  if (cur_idx_ == kNil) {
    return {};
  }
  defer_called_ = true;
  return {cur_idx_, conns_[cur_idx_].req_id};
}

http::deferral_token core::current() const {
  if (cur_idx_ == kNil) {
    return {};
  }
  return {cur_idx_, conns_[cur_idx_].req_id};
}

bool core::resume(http::deferral_token t) {
  if (t.slot >= conns_.size()) {
    return false;
  }
  conn& c = conns_[t.slot];
  if (c.state != conn_state::open || c.req_id != t.gen) {
    return false;
  }
  // Deferred, or deferring right now (resume() from inside its own handle(), after defer()).
  const bool deferring = t.slot == cur_idx_ && defer_called_;
  if (!c.deferred && !deferring) {
    return false;
  }
  if (!c.resume_queued) {
    c.resume_queued = true;
    resumed_.push_back(t.slot);
  }
  return true;
}

http::response_info core::call_handler(conn& c, uint32_t idx, const http::request& req) {
  cur_idx_ = idx;
  defer_called_ = false;
  const size_t out_before = c.out.size();
  http::response_info info = handler_->handle(req, c.out, now_real_);
  cur_idx_ = kNil;
  c.journal_wait = c.journal_wait || info.journaled;
  if (info.deferred && defer_called_) {
    TOLLGATE_ASSERT(c.out.size() == out_before && "a deferring handle() wrote output");
    c.out.resize(out_before);  // (release builds) half a response must not go out
    return info;
  }
  c.resume_queued = false;  // resumed from inside handle() but answered after all
  if (info.deferred) {
    // Nothing could ever resume it (no token was taken): answer rather than hang.
    TOLLGATE_ASSERT(false && "handle() returned deferred without calling defer()");
    log_error("core {}: handler returned deferred without defer(); answering 500", index_);
    c.out.append(kInternalError);
    info = http::response_info{500, true, false};
  }
  return info;
}

void core::save_deferred(conn& c, const char* start, size_t len) {
  uint32_t s;
  if (!saved_free_.empty()) {
    s = saved_free_.back();
    saved_free_.pop_back();
  } else {
    s = static_cast<uint32_t>(saved_.size());
    saved_.push_back(std::make_unique<saved_request>());  // pool growth (warm-up) only
  }
  saved_request& sr = *saved_[s];
  sr.req = req_;
  sr.base = reinterpret_cast<uintptr_t>(start);
  sr.len = len;
  c.saved = s;
  c.deferred = true;
  c.need = 0;
  c.head_done = false;
}

void core::free_saved(conn& c) {
  if (c.saved != kNil) {
    saved_free_.push_back(c.saved);
    c.saved = kNil;
  }
}

// Delivers the requests resume()d so far. Resumes made meanwhile (by handle(), or on_upstream()
// of nothing: fetch() never completes inline) join the next pass's batch, so one pass can never
// loop on a handler that defers and resumes at once.
void core::process_resumes() {
  if (resumed_.empty()) {
    return;
  }
  std::swap(resumed_, resumed_work_);
  for (const uint32_t idx : resumed_work_) {
    redeliver(idx);
  }
  resumed_work_.clear();
}

void core::redeliver(uint32_t idx) {
  conn& c = conns_[idx];
  if (c.state != conn_state::open || !c.deferred || !c.resume_queued) {
    return;  // closed meanwhile (maybe reused), or listed twice
  }
  c.resume_queued = false;
  c.deferred = false;
  saved_request& sr = *saved_[c.saved];
  rebase(sr.req, sr.base, sr.len, c.in.data());  // the request is at the front of `in`
  sr.base = reinterpret_cast<uintptr_t>(c.in.data());
  if (draining_) {
    sr.req.keep_alive = false;
  }
  const http::response_info info = call_handler(c, idx, sr.req);
  if (info.deferred) {
    c.deferred = true;  // deferred again: same bytes, same saved request
    return;
  }
  const bool keep_alive = sr.req.keep_alive;
  const size_t len = sr.len;
  free_saved(c);
  c.in.consume(len);
  mark_dirty(c, idx);
  bool completed = true;
  if (info.close || !keep_alive || c.close_after_send) {
    c.close_after_send = true;
  } else if (c.out.size() >= kOutHighWater) {
    pause_input(c, idx);
  } else if (!c.in.empty()) {
    // The requests pipelined behind it, in order (one of them may defer in turn).
    const size_t used = process(c, idx, c.in.data(), c.in.size(), completed);
    c.in.consume(used);
  }
  if (c.close_after_send) {
    c.in.clear();
  }
  finish_after_fin(c, idx);
  update_timer(c, idx, completed);
  if (!c.recv_armed && wants_input(c) && !c.close_after_send) {
    arm_recv(c, idx);
  }
}

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
    if (c.ready == 0) {
      if (c.out.empty() && c.close_after_send) {
        graceful_close(c, idx);
      }
      continue;  // nothing yet, or output still held for the journal
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
  dirty_.clear();
}

void core::submit_send(conn& c, uint32_t idx) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_send(sqe, c.fd, c.sending.data() + c.sent, c.sending.size() - c.sent,
                     MSG_NOSIGNAL);
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
    const size_t used = process(c, idx, c.in.data(), c.in.size(), completed);
    c.in.consume(used);
    if (c.close_after_send) {
      c.in.clear();
    }
    finish_after_fin(c, idx);
    update_timer(c, idx, completed);
    if (!c.recv_armed && wants_input(c)) {
      arm_recv(c, idx);
    }
  }
  if (c.state != conn_state::open) {
    return;
  }
  if (!c.out.empty() || c.close_after_send) {
    mark_dirty(c, idx);  // sent (or closed) at the end of this pass
  } else if (c.in.empty() && c.list != kListHeader) {
    link(idx, kListIdle);
  }
}

// ---- journal ------------------------------------------------------------------------------
//
// Why the pass's sends are held rather than linked to the journal write: IOSQE_IO_LINK runs a
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
// unbilled responses are never sent; if the journal stays broken, held connections end by
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
    c.journal_wait = false;
  }
  for (const uint32_t idx : held_) {
    conn& c = conns_[idx];
    c.held_listed = false;
    if (c.state == conn_state::open) {
      c.ready = c.out.size();
      c.journal_wait = false;
      mark_dirty(c, idx);
    }
  }
  held_.clear();
  stats_.journal_held.store(0, std::memory_order_relaxed);
}

// The handler dropped the records that held answers wait for (journal_batch::dropped): none of
// them may go out as billed. A connection's held bytes may also hold answers pipelined behind a
// billed one; their boundaries are the handler's, so the whole held output becomes one 503 and
// the connection closes (the client retries what was not answered).
void core::refuse_held() {
  static constexpr std::string_view kBody =
      "{\"code\":\"unavailable\",\"message\":\"Usage cannot be recorded right now; the call was "
      "not billed.\"}";
  const fmt::format_int body_len(kBody.size());
  for (const uint32_t idx : dirty_) {
    hold_if_journaled(conns_[idx], idx);
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
    c.journal_wait = false;
    c.close_after_send = true;
    c.in.clear();
    mark_dirty(c, idx);
  }
  held_.clear();
  journal_partial_ = false;  // what is left of the batch covers none of them
  stats_.journal_held.store(0, std::memory_order_relaxed);
}

bool core::hold_if_journaled(conn& c, uint32_t idx) {
  if (c.out.size() <= c.ready) {
    return false;
  }
  if (c.journal_wait || c.held_listed) {
    hold(c, idx);
    return true;
  }
  c.ready = c.out.size();  // no billed answer in it: it never waits for the journal
  return false;
}

void core::journal_step() {
  // An inline write that was short but made progress has its rest written at once (a short
  // write to a regular file is rare: a full disk's last blocks, a signal).
  for (int i = 0; i < 8 && journal_step_once(); ++i) {
  }
}

bool core::journal_step_once() {
  if (!journal_inflight_ && now_mono_ >= journal_retry_at_) {
    const http::journal_batch b = handler_->journal_pending();
    if (b.dropped) {
      refuse_held();
    }
    if (b.sync_due && b.fd >= 0 && !sync_inflight_) {
      io_uring_sqe* sqe = get_sqe();
      io_uring_prep_fsync(sqe, b.fd, IORING_FSYNC_DATASYNC);
      io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::journal_sync)} << 56);
      sync_inflight_ = true;
    } else if (b.sync_due) {
      handler_->journal_synced(b.fd < 0 ? -EBADF : -EBUSY);  // not done: ask again later
    }
    if (b.size == 0) {
      release_all_held();  // every billed record is on disk: all answered output may go
      return false;
    }
    for (const uint32_t idx : dirty_) {
      hold_if_journaled(conns_[idx], idx);
    }
    stats_.journal_held.store(held_.size(), std::memory_order_relaxed);
    if (b.fd < 0) {
      journal_size_ = b.size;
      journal_inflight_ = true;
      on_journal_write(-EBADF);  // the journal file could not be opened: same as a failed write
      return false;
    }
    if (!journal_partial_) {
      for (const uint32_t idx : held_) {
        conn& c = conns_[idx];
        c.mark = c.out.size();  // this write covers everything answered so far
      }
    }
    // else: the rest of a short or failed write; it covers only the marks set when that
    // batch was first taken (the handler returns a batch's rest before any newer record).
    journal_inflight_ = true;
    journal_size_ = b.size;
    if (opts_.journal_inline) {
      // The completion is handled at once: on success the held bytes are released and this
      // pass's flush_sends() sends them.
      ssize_t n = 0;
      do {
        n = ::write(b.fd, b.data, b.size);  // O_APPEND: at the end
      } while (n < 0 && errno == EINTR);
      on_journal_write(n < 0 ? -errno : static_cast<int>(n));
      return n > 0 && journal_partial_;
    }
    io_uring_sqe* sqe = get_sqe();
    // Offset -1: the file position (the journal is O_APPEND, so the end).
    io_uring_prep_write(sqe, b.fd, b.data, static_cast<unsigned>(b.size), ~uint64_t{0});
    io_uring_sqe_set_data64(sqe, uint64_t{static_cast<uint8_t>(op::journal_write)} << 56);
    return false;
  }
  for (const uint32_t idx : dirty_) {  // answered after the write in flight: wait for the next
    hold_if_journaled(conns_[idx], idx);
  }
  stats_.journal_held.store(held_.size(), std::memory_order_relaxed);
  return false;
}

void core::on_journal_write(int res) {
  journal_inflight_ = false;
  handler_->journal_written(res);
  if (res < 0 || static_cast<size_t>(res) < journal_size_) {
    journal_partial_ = true;
    bump(stats_.journal_errors);
    if (res < 0) {
      log_error("core {}: usage journal write failed: {}; {} response(s) held, retrying", index_,
                std::strerror(-res), held_.size());
      journal_backoff_ns_ = journal_backoff_ns_ == 0 ? kBackoffMinNs
                            : journal_backoff_ns_ < kBackoffMaxNs ? journal_backoff_ns_ * 2
                                                                  : kBackoffMaxNs;
      journal_retry_at_ = now_mono_ + journal_backoff_ns_;
    } else if (res == 0) {
      journal_retry_at_ = now_mono_ + kBackoffMinNs;  // no progress: do not spin
    }
    // A short write: the handler hands its rest out again in this pass's journal step.
    return;
  }
  bump(stats_.journal_writes);
  journal_backoff_ns_ = 0;
  journal_partial_ = false;
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
      c.journal_wait = false;
    }
  }
  held_.resize(kept);  // shrinking: no allocation
  stats_.journal_held.store(kept, std::memory_order_relaxed);
}

void core::on_journal_sync(int res) {
  sync_inflight_ = false;
  if (res < 0) {
    bump(stats_.journal_errors);
  } else {
    bump(stats_.journal_syncs);
  }
  handler_->journal_synced(res);
}

// At exit: the handler's bytes must not stay "in flight" for ever (its shutdown path writes
// what is left with write(2)), so wait a bounded time for the last write and sync, and for the
// cancelled operations of upstream connections (their buffers are ours).
void core::finish_journal() {
  for (int i = 0;
       i < 50 && (journal_inflight_ || sync_inflight_ || up_ops_ > 0 || file_writes_ > 0); ++i) {
    __kernel_timespec ts{};
    ts.tv_nsec = 100 * kMs;
    io_uring_cqe* first = nullptr;
    io_uring_submit_and_wait_timeout(&ring_, &first, 1, &ts, nullptr);
    unsigned head = 0;
    unsigned n = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      const auto kind = static_cast<op>(cqe->user_data >> 56);
      if (kind == op::journal_write) {
        on_journal_write(cqe->res);
      } else if (kind == op::journal_sync) {
        on_journal_sync(cqe->res);
      } else if (kind == op::file_write) {
        --file_writes_;
        handler_->on_file_written(static_cast<uint32_t>(cqe->user_data), cqe->res);
      } else if (kind == op::up_connect || kind == op::up_send || kind == op::up_recv) {
        on_up_cqe(kind, *cqe);  // closing (teardown): releases the connection
      } else if (kind == op::recv && (cqe->flags & IORING_CQE_F_BUFFER) != 0) {
        return_buffer(static_cast<uint16_t>(cqe->flags >> IORING_CQE_BUFFER_SHIFT));
      }
      ++n;
    }
    io_uring_cq_advance(&ring_, n);
  }
  if (journal_inflight_ || sync_inflight_) {
    log_error("core {}: usage journal write did not complete at exit", index_);
  }
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
  ::close(c.fd);
  c.fd = -1;
  c.state = conn_state::free;
  ++c.gen;
  c.in.clear();
  c.out.clear();
  c.sending.clear();
  c.ready = c.mark = 0;
  c.journal_wait = false;
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
      if (conns_[idx].ts + timeout_ns_[l] > now_mono_) {
        break;
      }
      bump(stats_.timeouts);
      hard_close(conns_[idx], idx);
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
