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

namespace detail {

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

runner::runner(const run_config& cfg, const workload& w, const run_times& t, unsigned index,
               unsigned nconns, thread_stats& out)
    : cfg_(cfg),
      w_(w),
      t_(t),
      out_(out),
      pick_(w, cfg.seed * 0x100000001b3ull + index + 1),
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

runner::~runner() {
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
    tls_end(c);
  }
}

void runner::run() {
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
    int r =
        io_uring_submit_and_wait_timeout(&ring_, &cqe, sends_unsubmitted_ + batch, &ts, nullptr);
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

void runner::finish() {
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
    double start =
        next_due_ > static_cast<double>(t_.measure) ? next_due_ : static_cast<double>(t_.measure);
    out_.backlog_at_end =
        static_cast<std::uint64_t>((static_cast<double>(t_.end) - start) / interval_ns_);
  }
}

}  // namespace detail

void run_thread(const run_config& cfg, const workload& w, const run_times& times, unsigned index,
                unsigned conns, thread_stats& out) {
  if (conns == 0) {
    return;
  }
  detail::runner r(cfg, w, times, index, conns, out);
  r.run();
}

}  // namespace tollgate::loadgen
