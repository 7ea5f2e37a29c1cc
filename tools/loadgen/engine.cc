// The load generator's io_uring engine (see engine.h).
//
// Life of a connection:
//   1. down → connecting: socket() + IORING_OP_CONNECT.
//   2. connecting → open: one recv is kept armed at all times into the connection's own
//      buffer; requests are rendered into `out_q` and flushed with one send per connection
//      per loop pass (a send in flight owns `out_fly`; new requests queue behind it).
//   3. Each completed recv frames as many responses as it holds, checks each one against the
//      oldest outstanding request, and (closed loop) renders the next request at once.
//   4. open → closing: on a transport error, a framing error, EOF or `Connection: close`,
//      shutdown() makes the armed recv complete; outstanding requests count as transport
//      errors; once no SQE refers to the connection, close() and back to 1.
#include "engine.h"

#include <linux/tcp.h>  // struct tcp_info with tcpi_segs_out (glibc's lacks it), TCP_* options
#include <liburing.h>
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

namespace tollgate::loadgen {

namespace {

struct feature_name {
  ring_feature bit;
  const char* name;
};
constexpr feature_name feature_names[] = {
    {feat_defer_taskrun, "defer_taskrun"},
    {feat_coop_taskrun, "coop_taskrun"},
    {feat_fixed_files, "fixed_files"},
    {feat_buf_ring, "buf_ring"},
    {feat_ring_fd, "ring_fd"},
};

}  // namespace

std::string ring_feature_names(unsigned features) {
  std::string out;
  for (const auto& f : feature_names) {
    if ((features & f.bit) != 0) {
      if (!out.empty()) {
        out += '+';
      }
      out += f.name;
    }
  }
  return out.empty() ? "plain" : out;
}

bool parse_ring_features(const std::string& list, unsigned& out) {
  out = 0;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t end = list.find(',', pos);
    if (end == std::string::npos) {
      end = list.size();
    }
    std::string_view name(list.data() + pos, end - pos);
    bool known = false;
    for (const auto& f : feature_names) {
      if (name == f.name) {
        out |= f.bit;
        known = true;
      }
    }
    if (name == "all") {
      out |= feat_all;
      known = true;
    } else if (name == "none" || name == "plain") {
      known = true;
    }
    if (!known) {
      return false;
    }
    pos = end + 1;
  }
  return true;
}

std::uint64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

namespace {

enum op : std::uint8_t { op_connect = 1, op_recv = 2, op_send = 3 };

std::uint64_t pack(std::uint32_t conn, op o) { return (std::uint64_t{conn} << 8) | o; }

/// A request sent (or queued) and not yet answered.
struct pending_req {
  std::uint64_t t0 = 0;  ///< intended (open loop) or queued (closed loop) send time
  std::int64_t id = 0;
  std::uint32_t spec = 0;
};

/// One client connection. Core-local.
struct connection {
  enum class state : std::uint8_t { down, connecting, open, closing };
  int fd = -1;
  state st = state::down;
  std::uint8_t sqes = 0;  ///< SQEs in flight that name this connection
  bool send_busy = false;
  bool dirty = false;    ///< on the flush list
  bool in_free = false;  ///< on the open-loop free list
  bool retry_later = false;
  std::uint64_t retry_at = 0;
  std::string out_q;
  std::string out_fly;
  std::size_t fly_off = 0;
  std::vector<char> in;
  std::size_t in_len = 0;
  response_parser parser;
  std::vector<pending_req> fifo;  ///< ring of capacity depth
  std::size_t fifo_head = 0;
  std::size_t fifo_count = 0;
};

const char* errno_name(int e) {
  switch (e) {
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case ECONNRESET:
      return "ECONNRESET";
    case EPIPE:
      return "EPIPE";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    case EHOSTUNREACH:
      return "EHOSTUNREACH";
    case ENETUNREACH:
      return "ENETUNREACH";
    case EADDRNOTAVAIL:
      return "EADDRNOTAVAIL";
    case EMFILE:
      return "EMFILE";
    case ENFILE:
      return "ENFILE";
    case ENOBUFS:
      return "ENOBUFS";
    case ECANCELED:
      return "ECANCELED";
    case EINTR:
      return "EINTR";
    default:
      return "other errno";
  }
}

class runner {
 public:
  runner(const run_config& cfg, const workload& w, const run_times& t, unsigned index,
         unsigned nconns, thread_stats& out)
      : cfg_(cfg), w_(w), t_(t), out_(out), pick_(w, cfg.seed * 0x100000001b3ull + index + 1),
        conns_(nconns) {
    open_loop_ = cfg.rate > 0;
    if (open_loop_) {
      interval_ns_ = 1e9 * cfg.threads / cfg.rate;
      next_due_ = static_cast<double>(t.begin) + interval_ns_ * index / cfg.threads;
    }
    for (auto& c : conns_) {
      c.in.resize(16 * 1024);
      c.fifo.resize(cfg.depth);
      c.out_q.reserve(4096);
      c.out_fly.reserve(4096);
    }
  }

  ~runner() {
    if (ring_ok_) {
      io_uring_queue_exit(&ring_);
    }
    if (br_ != nullptr) {
      ::munmap(br_, br_bytes_);
      ::munmap(bufs_, bufs_bytes_);
    }
    for (auto& c : conns_) {
      if (c.fd >= 0) {
        ::close(c.fd);
      }
    }
  }

  void run() {
    if (!setup_ring()) {
      return;
    }
    for (std::uint32_t i = 0; i < conns_.size(); i++) {
      down_.push_back(i);
    }
    for (;;) {
      std::uint64_t now = now_ns();
      if (now >= t_.end || (cfg_.stop_after > 0 && out_.counted >= cfg_.stop_after)) {
        break;
      }
      start_due_connects(now);
      if (open_loop_) {
        issue_due(now);
      }
      flush();
      __kernel_timespec ts = wait_time(now);
      // Sends on a socket with room complete inside the submit, so their completions are
      // already posted when the wait starts: ask for them plus a batch of responses.
      unsigned batch = wait_batch();
      if (batch > 1) {
        cap_wait(ts, std::uint64_t{cfg_.wait_batch_us} * 1000);
      }
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_submit_and_wait_timeout(&ring_, &cqe, sends_unsubmitted_ + batch, &ts,
                                               nullptr);
      sends_unsubmitted_ = 0;
      if (batch > 1) {
        adapt_batch(r == -ETIME);
      }
      if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY) {
        out_.fatal = std::string("io_uring_submit_and_wait_timeout: ") + std::strerror(-r);
        return;
      }
      now = now_ns();
      if (!tcp_window_started_ && now >= t_.measure) {
        start_tcp_window();
      }
      unsigned head = 0;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        seen++;
        handle(cqe->user_data, cqe->res, cqe->flags, now);
      }
      io_uring_cq_advance(&ring_, seen);
      if (in_window(now)) {
        out_.passes++;
        out_.cqes += seen;
      }
    }
    finish();
  }

 private:
  bool setup_ring() {
    unsigned entries = 64;
    while (entries < 4 * conns_.size() + 16) {
      entries <<= 1;
    }
    ring_init_fn init = cfg_.ring_init != nullptr ? cfg_.ring_init : &io_uring_queue_init_params;
    unsigned want = cfg_.features;
    io_uring_params p{};
    int r = -EINVAL;
    if ((want & feat_defer_taskrun) != 0) {
      p = io_uring_params{};
      p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
      r = init(entries, &ring_, &p);
      if (r == 0) {
        out_.features |= feat_defer_taskrun;
      } else if (r == -EINVAL) {
        note("IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN refused (needs Linux 6.1+)");
      }
    }
    if (r == -EINVAL && (want & feat_coop_taskrun) != 0) {
      p = io_uring_params{};
      p.flags = IORING_SETUP_COOP_TASKRUN;
      r = init(entries, &ring_, &p);
      if (r == 0) {
        out_.features |= feat_coop_taskrun;
      } else if (r == -EINVAL) {
        note("IORING_SETUP_COOP_TASKRUN refused (needs Linux 5.19+)");
      }
    }
    if (r == -EINVAL) {
      p = io_uring_params{};
      r = init(entries, &ring_, &p);
    }
    if (r < 0) {
      out_.fatal = std::string("io_uring_queue_init: ") + std::strerror(-r) +
                   " (needs Linux 5.11+ with io_uring enabled)";
      return false;
    }
    ring_ok_ = true;
    if ((p.features & IORING_FEAT_EXT_ARG) == 0) {
      out_.fatal = "io_uring lacks IORING_FEAT_EXT_ARG (timed waits): needs Linux 5.11+";
      return false;
    }
    if ((want & feat_ring_fd) != 0) {
      // Every io_uring_enter then names the ring by its registered index (liburing passes
      // IORING_ENTER_REGISTERED_RING itself), skipping the file table lookup and refcount.
      int rr = io_uring_register_ring_fd(&ring_);
      if (rr == 1) {
        out_.features |= feat_ring_fd;
      } else {
        note(std::string("registered ring fd refused (") + std::strerror(rr < 0 ? -rr : EINVAL) +
             ", needs Linux 5.18+): plain ring fd");
      }
    }
    if ((want & feat_fixed_files) != 0) {
      int fr = io_uring_register_files_sparse(&ring_, static_cast<unsigned>(conns_.size()));
      if (fr == 0) {
        fixed_ = true;
        out_.features |= feat_fixed_files;
      } else {
        note(std::string("registered files refused (") + std::strerror(-fr) +
             ", needs Linux 5.19+): plain descriptors");
      }
    }
    if ((want & feat_buf_ring) != 0) {
      int br = setup_buf_ring();
      if (br == 0) {
        out_.features |= feat_buf_ring;
      } else {
        note(std::string("provided buffer ring refused (") + std::strerror(-br) +
             ", needs Linux 6.0+): one recv per read");
      }
    }
    return true;
  }

  // --- TCP segment counts (TCP_INFO): what the client's sockets sent in the window ----------

  /// Adds (sign +1) or subtracts (-1) socket `fd`'s segment counters to the window's totals.
  void add_tcp_counts(int fd, int sign) {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(tcp_info, tcpi_data_segs_out) + sizeof ti.tcpi_data_segs_out) {
      return;  // a kernel without these fields (< 4.6): the counts stay 0
    }
    out_.tcp_segs_out += static_cast<std::uint64_t>(sign) * ti.tcpi_segs_out;
    out_.tcp_data_segs_out += static_cast<std::uint64_t>(sign) * ti.tcpi_data_segs_out;
  }

  /// The window starts: what sockets open now sent during the warm-up is taken off (their
  /// counters are added back when they close or at the end).
  void start_tcp_window() {
    tcp_window_started_ = true;
    for (const auto& c : conns_) {
      if (c.fd >= 0) {
        add_tcp_counts(c.fd, -1);
      }
    }
  }

  void note(const std::string& why) {
    if (!out_.ring_note.empty()) {
      out_.ring_note += "; ";
    }
    out_.ring_note += why;
  }

  /// Multishot recv into a provided buffer ring (Linux 6.0+), registered by hand (liburing 2.3
  /// has no io_uring_setup_buf_ring). Without it, recv falls back to one SQE per read into the
  /// connection's own buffer. Returns 0 or a negative errno.
  int setup_buf_ring() {
    std::size_t ring_bytes = sizeof(io_uring_buf) * buf_count;
    void* mem = ::mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE,
                       -1, 0);
    if (mem == MAP_FAILED) {
      return -errno;
    }
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uint64_t>(mem);
    reg.ring_entries = buf_count;
    reg.bgid = buf_group;
    int r = io_uring_register_buf_ring(&ring_, &reg, 0);
    if (r < 0) {
      ::munmap(mem, ring_bytes);
      return r;
    }
    // The buffers themselves: anonymous memory, so pages are zeroed lazily by the kernel as
    // they are first used rather than all up front (which showed up in short runs).
    std::size_t bytes = static_cast<std::size_t>(buf_count) * buf_size;
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (data == MAP_FAILED) {
      r = -errno;
      io_uring_unregister_buf_ring(&ring_, buf_group);
      ::munmap(mem, ring_bytes);
      return r;
    }
    bufs_ = static_cast<char*>(data);
    bufs_bytes_ = bytes;
    br_ = static_cast<io_uring_buf_ring*>(mem);
    br_bytes_ = ring_bytes;
    io_uring_buf_ring_init(br_);
    for (unsigned b = 0; b < buf_count; b++) {
      io_uring_buf_ring_add(br_, bufs_ + static_cast<std::size_t>(b) * buf_size, buf_size,
                            static_cast<unsigned short>(b), io_uring_buf_ring_mask(buf_count),
                            static_cast<int>(b));
    }
    io_uring_buf_ring_advance(br_, static_cast<int>(buf_count));
    return 0;
  }

  /// Responses one wait asks for: 1 in open loop (sends are due at set times), else
  /// cfg_.wait_batch or, for auto, an eighth of the requests outstanding, at most
  /// `batch_cap_` (which shrinks when waits time out, so a slow server is not polled).
  unsigned wait_batch() const {
    if (open_loop_ || inflight_ < 2) {
      return 1;
    }
    std::uint64_t b = cfg_.wait_batch;
    if (b == 0) {
      b = inflight_ / 8;
      if (b > batch_cap_) {
        b = batch_cap_;
      }
    }
    if (b > inflight_) {
      b = inflight_;
    }
    return b < 1 ? 1 : static_cast<unsigned>(b);
  }

  void adapt_batch(bool timed_out) {
    if (timed_out) {
      batch_cap_ = batch_cap_ > 2 ? batch_cap_ / 2 : 1;
    } else if (batch_cap_ < max_auto_batch) {
      batch_cap_++;
    }
  }

  static void cap_wait(__kernel_timespec& ts, std::uint64_t max_ns) {
    std::uint64_t d = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
                      static_cast<std::uint64_t>(ts.tv_nsec);
    if (d > max_ns) {
      ts.tv_sec = static_cast<long long>(max_ns / 1'000'000'000ull);
      ts.tv_nsec = static_cast<long long>(max_ns % 1'000'000'000ull);
    }
  }

  /// Points `s` at connection `i`'s socket: its slot in the registered table, or its fd.
  void target(io_uring_sqe* s, std::uint32_t i) const {
    if (fixed_) {
      s->fd = static_cast<int>(i);
      s->flags |= IOSQE_FIXED_FILE;
    }
  }

  void recycle_buffer(unsigned bid) {
    io_uring_buf_ring_add(br_, bufs_ + static_cast<std::size_t>(bid) * buf_size, buf_size,
                          static_cast<unsigned short>(bid), io_uring_buf_ring_mask(buf_count), 0);
    io_uring_buf_ring_advance(br_, 1);
  }

  io_uring_sqe* sqe() {
    io_uring_sqe* s = io_uring_get_sqe(&ring_);
    while (s == nullptr) {
      io_uring_submit(&ring_);
      s = io_uring_get_sqe(&ring_);
    }
    return s;
  }

  bool in_window(std::uint64_t now) const { return now >= t_.measure && now < t_.end; }

  __kernel_timespec wait_time(std::uint64_t now) const {
    std::uint64_t until = t_.end;
    std::uint64_t cap = now + 50'000'000;  // wake at least every 50 ms
    if (cap < until) {
      until = cap;
    }
    if (open_loop_ && !free_.empty()) {
      auto due = static_cast<std::uint64_t>(next_due_);
      if (due < until) {
        until = due;
      }
    }
    if (!down_.empty()) {
      std::uint64_t soon = now + 5'000'000;
      if (soon < until) {
        until = soon;
      }
    }
    std::uint64_t d = until > now ? until - now : 0;
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<long long>(d / 1'000'000'000ull);
    ts.tv_nsec = static_cast<long long>(d % 1'000'000'000ull);
    return ts;
  }

  // --- connections -------------------------------------------------------------------------

  void start_due_connects(std::uint64_t now) {
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

  bool start_connect(std::uint32_t i, std::uint64_t now) {
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

  void arm_recv(std::uint32_t i) {
    connection& c = conns_[i];
    io_uring_sqe* s = sqe();
    if (br_ != nullptr) {
      // One SQE keeps reading until it fails, the peer closes or the buffers run out.
      io_uring_prep_recv_multishot(s, c.fd, nullptr, 0, 0);
      s->flags |= IOSQE_BUFFER_SELECT;
      s->buf_group = buf_group;
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

  /// Starts closing: outstanding requests are lost (counted as `why` unless null and none
  /// are outstanding); the connection comes back once no SQE refers to it.
  void begin_close(std::uint32_t i, const char* why, std::uint64_t now, bool backoff) {
    connection& c = conns_[i];
    if (c.st == connection::state::closing || c.st == connection::state::down) {
      return;
    }
    if (c.fifo_count > 0) {
      count_transport(why != nullptr ? why : "closed with requests outstanding", now,
                      c.fifo_count);
    }
    inflight_ -= c.fifo_count;
    c.fifo_count = 0;
    c.st = connection::state::closing;
    c.retry_later = backoff;
    ::shutdown(c.fd, SHUT_RDWR);
    maybe_finish_close(i, now);
  }

  void maybe_finish_close(std::uint32_t i, std::uint64_t now) {
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
    c.fd = -1;
    c.st = connection::state::down;
    c.retry_at = c.retry_later ? now + 50'000'000 : now;
    down_.push_back(i);
  }

  // --- requests ----------------------------------------------------------------------------

  void issue(std::uint32_t i, std::uint64_t t0) {
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

  void issue_due(std::uint64_t now) {
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

  bool pop_free(std::uint32_t& out) {
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

  void push_free(std::uint32_t i) {
    connection& c = conns_[i];
    if (!c.in_free) {
      c.in_free = true;
      free_.push_back(i);
    }
  }

  void flush() {
    for (std::uint32_t i : dirty_) {
      connection& c = conns_[i];
      c.dirty = false;
      if (c.st != connection::state::open || c.send_busy || c.out_q.empty()) {
        continue;
      }
      std::swap(c.out_q, c.out_fly);
      c.out_q.clear();
      c.fly_off = 0;
      submit_send(i);
    }
    dirty_.clear();
  }

  void submit_send(std::uint32_t i) {
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

  // --- completions -------------------------------------------------------------------------

  void handle(std::uint64_t data, int res, unsigned flags, std::uint64_t now) {
    auto i = static_cast<std::uint32_t>(data >> 8);
    auto o = static_cast<op>(data & 0xff);
    connection& c = conns_[i];
    // Bytes a multishot recv put in a provided buffer: framed from there (only an incomplete
    // tail is copied into the connection's buffer), then the buffer goes back to the kernel.
    const char* buf = nullptr;
    if (flags & IORING_CQE_F_BUFFER) {
      buf = bufs_ + static_cast<std::size_t>(flags >> IORING_CQE_BUFFER_SHIFT) * buf_size;
    }
    bool more = (flags & IORING_CQE_F_MORE) != 0;
    if (!more) {
      c.sqes--;
    }
    if (c.st == connection::state::closing) {
      if (o == op_send) {
        c.send_busy = false;
      }
      maybe_finish_close(i, now);
    } else {
      switch (o) {
        case op_connect:
          on_connect(i, res, now);
          break;
        case op_send:
          on_send(i, res, now);
          break;
        case op_recv:
          on_recv(i, res, more, buf, now);
          break;
      }
    }
    if (buf != nullptr) {
      recycle_buffer(flags >> IORING_CQE_BUFFER_SHIFT);
    }
  }

  void on_connect(std::uint32_t i, int res, std::uint64_t now) {
    connection& c = conns_[i];
    if (res < 0) {
      count_transport(connect_reason(-res), now, 1);
      begin_close(i, nullptr, now, true);
      return;
    }
    c.st = connection::state::open;
    out_.connects++;
    arm_recv(i);
    if (now >= t_.end) {
      return;
    }
    if (open_loop_) {
      push_free(i);
    } else {
      for (unsigned k = 0; k < cfg_.depth; k++) {
        issue(i, now);
      }
    }
  }

  static const char* connect_reason(int e) {
    switch (e) {
      case ECONNREFUSED:
        return "connect ECONNREFUSED";
      case ETIMEDOUT:
        return "connect ETIMEDOUT";
      case EADDRNOTAVAIL:
        return "connect EADDRNOTAVAIL";
      default:
        return "connect failed";
    }
  }

  void on_send(std::uint32_t i, int res, std::uint64_t now) {
    connection& c = conns_[i];
    c.send_busy = false;
    if (res < 0) {
      begin_close(i, errno_name(-res), now, true);
      return;
    }
    c.fly_off += static_cast<std::size_t>(res);
    if (c.fly_off < c.out_fly.size()) {
      submit_send(i);
      return;
    }
    c.out_fly.clear();
    c.fly_off = 0;
    if (!c.out_q.empty() && !c.dirty) {
      c.dirty = true;
      dirty_.push_back(i);
    }
  }

  void on_recv(std::uint32_t i, int res, bool more, const char* buf, std::uint64_t now) {
    connection& c = conns_[i];
    if (res == -ENOBUFS && br_ != nullptr) {
      arm_recv(i);  // buffers ran out for a moment; they are recycled as we go
      return;
    }
    if (res < 0) {
      begin_close(i, errno_name(-res), now, true);
      return;
    }
    bool eof = res == 0;
    auto n = static_cast<std::size_t>(res);
    if (in_window(now)) {
      out_.bytes_read += n;
    }
    if (buf != nullptr && c.in_len == 0 && n > 0) {
      std::size_t used = 0;
      if (!frame_responses(i, buf, n, false, now, used)) {
        return;  // closing
      }
      append_in(c, buf + used, n - used);
    } else {
      if (buf != nullptr) {
        append_in(c, buf, n);
      } else {
        c.in_len += n;  // the recv read straight into c.in
      }
      std::size_t used = 0;
      if (!frame_responses(i, c.in.data(), c.in_len, eof, now, used)) {
        return;  // closing
      }
      if (used > 0) {
        std::memmove(c.in.data(), c.in.data() + used, c.in_len - used);
        c.in_len -= used;
      }
    }
    if (eof) {
      begin_close(i, "EOF with requests outstanding", now, false);
      return;
    }
    if (!more) {
      arm_recv(i);
    }
  }

  static void append_in(connection& c, const char* p, std::size_t n) {
    if (n == 0) {
      return;
    }
    if (c.in.size() - c.in_len < n) {
      c.in.resize(c.in_len + n > 2 * c.in.size() ? c.in_len + n : 2 * c.in.size());
    }
    std::memcpy(c.in.data() + c.in_len, p, n);
    c.in_len += n;
  }

  /// Frames, checks and records every complete response in data[0, len); `used` is the bytes
  /// they took (the rest starts an incomplete response). False when the connection started
  /// closing.
  bool frame_responses(std::uint32_t i, const char* data, std::size_t len, bool eof,
                       std::uint64_t now, std::size_t& used) {
    connection& c = conns_[i];
    std::size_t off = 0;
    bool keep = true;
    while (off < len) {
      frame_result r = c.parser.parse(data + off, len - off, eof);
      if (r == frame_result::incomplete) {
        break;
      }
      if (r == frame_result::error) {
        if (c.fifo_count > 0) {
          record(c, outcome{outcome_kind::bad_response, 0, frame_errc_name(c.parser.error())},
                 std::string_view(data + off, len - off), now);
        } else {
          count_bad("bytes with no request outstanding", now);
        }
        begin_close(i, nullptr, now, true);
        keep = false;
        break;
      }
      if (c.fifo_count == 0) {
        count_bad("response with no request outstanding", now);
        begin_close(i, nullptr, now, true);
        keep = false;
        break;
      }
      const pending_req& p = c.fifo[c.fifo_head];
      expectation want{w_.spec(p.spec).kind, p.id, w_.expect_status()};
      outcome o = checker_.check(c.parser.head(), c.parser.body(), want, cfg_.level);
      record(c, o, c.parser.body(), now);
      off += c.parser.consumed();
      bool close = c.parser.head().close;
      c.parser.reset();
      if (close) {
        begin_close(i, nullptr, now, false);
        keep = false;
        break;
      }
      if (now < t_.end) {
        if (open_loop_) {
          push_free(i);
        } else {
          issue(i, now);
        }
      }
    }
    used = off;
    return keep;
  }

  /// Pops the oldest outstanding request and records its outcome and latency.
  void record(connection& c, const outcome& o, std::string_view body, std::uint64_t now) {
    const pending_req& p = c.fifo[c.fifo_head];
    c.fifo_head = (c.fifo_head + 1) % c.fifo.size();
    c.fifo_count--;
    inflight_--;
    if (!in_window(now)) {
      return;
    }
    out_.responses++;
    out_.counted++;
    out_.latency.record(now > p.t0 ? now - p.t0 : 0);
    out_.outcomes.add(o, body);
  }

  void count_transport(const char* why, std::uint64_t now, std::uint64_t n) {
    if (in_window(now)) {
      out_.outcomes.add(outcome{outcome_kind::transport, 0, why}, {}, n);
      out_.counted += n;
    }
  }

  void count_bad(const char* why, std::uint64_t now) {
    if (in_window(now)) {
      out_.outcomes.add(outcome{outcome_kind::bad_response, 0, why}, {});
      out_.counted++;
    }
  }

  void finish() {
    out_.finished_ns = now_ns();
    if (tcp_window_started_) {
      for (const auto& c : conns_) {
        if (c.fd >= 0) {
          add_tcp_counts(c.fd, +1);
        }
      }
    }
    out_.memo_hits = checker_.memo_hits();
    for (const auto& c : conns_) {
      if (c.st == connection::state::open) {
        out_.inflight_at_end += c.fifo_count;
      }
    }
    if (open_loop_ && next_due_ < static_cast<double>(t_.end)) {
      double start = next_due_ > static_cast<double>(t_.measure) ? next_due_
                                                                  : static_cast<double>(t_.measure);
      out_.backlog_at_end =
          static_cast<std::uint64_t>((static_cast<double>(t_.end) - start) / interval_ns_);
    }
  }

  const run_config& cfg_;
  const workload& w_;
  const run_times& t_;
  thread_stats& out_;
  picker pick_;
  response_checker checker_;
  std::vector<connection> conns_;
  std::vector<std::uint32_t> down_;
  std::vector<std::uint32_t> dirty_;
  std::vector<std::uint32_t> free_;
  std::string body_tmp_;
  io_uring ring_{};
  bool ring_ok_ = false;
  static constexpr unsigned buf_count = 256;  ///< provided buffers (a power of two)
  static constexpr unsigned buf_size = 16 * 1024;
  static constexpr unsigned short buf_group = 1;
  io_uring_buf_ring* br_ = nullptr;
  std::size_t br_bytes_ = 0;
  char* bufs_ = nullptr;  ///< buf_count * buf_size bytes, mmap'ed
  std::size_t bufs_bytes_ = 0;
  bool congestion_refused_ = false;
  bool tcp_window_started_ = false;  ///< the sockets' warm-up segment counts were taken off
  bool fixed_ = false;  ///< sockets live in the registered file table, slot = connection index
  std::uint64_t inflight_ = 0;          ///< requests sent or queued, not yet answered
  unsigned sends_unsubmitted_ = 0;      ///< send SQEs since the last submit
  static constexpr unsigned max_auto_batch = 16;
  unsigned batch_cap_ = max_auto_batch;
  bool open_loop_ = false;
  double interval_ns_ = 0;
  double next_due_ = 0;
  std::int64_t next_id_ = 0;
};

}  // namespace

void run_thread(const run_config& cfg, const workload& w, const run_times& times, unsigned index,
                unsigned conns, thread_stats& out) {
  if (conns == 0) {
    return;
  }
  runner r(cfg, w, times, index, conns, out);
  r.run();
}

}  // namespace tollgate::loadgen
