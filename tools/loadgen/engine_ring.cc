// The runner's ring: set-up with feature fallbacks, the provided buffer ring, TCP_INFO segment
// counts and how long each wait may take (engine_runner.h).
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

bool runner::setup_ring() {
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

void runner::add_tcp_counts(int fd, int sign) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_data_segs_out) + sizeof ti.tcpi_data_segs_out) {
    return;  // a kernel without these fields (< 4.6): the counts stay 0
  }
  out_.tcp_segs_out += static_cast<std::uint64_t>(sign) * ti.tcpi_segs_out;
  out_.tcp_data_segs_out += static_cast<std::uint64_t>(sign) * ti.tcpi_data_segs_out;
}

void runner::start_tcp_window() {
  tcp_window_started_ = true;
  for (const auto& c : conns_) {
    if (c.fd >= 0) {
      add_tcp_counts(c.fd, -1);
    }
  }
}

void runner::note(const std::string& why) {
  if (!out_.ring_note.empty()) {
    out_.ring_note += "; ";
  }
  out_.ring_note += why;
}

int runner::setup_buf_ring() {
  std::size_t ring_bytes = sizeof(io_uring_buf) * buf_count;
  void* mem =
      ::mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
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

unsigned runner::wait_batch() const {
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

void runner::adapt_batch(bool timed_out) {
  if (timed_out) {
    batch_cap_ = batch_cap_ > 2 ? batch_cap_ / 2 : 1;
  } else if (batch_cap_ < max_auto_batch) {
    batch_cap_++;
  }
}

void runner::cap_wait(__kernel_timespec& ts, std::uint64_t max_ns) {
  std::uint64_t d = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
                    static_cast<std::uint64_t>(ts.tv_nsec);
  if (d > max_ns) {
    ts.tv_sec = static_cast<long long>(max_ns / 1'000'000'000ull);
    ts.tv_nsec = static_cast<long long>(max_ns % 1'000'000'000ull);
  }
}

__kernel_timespec runner::wait_time(std::uint64_t now) const {
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

}  // namespace tollgate::loadgen::detail
