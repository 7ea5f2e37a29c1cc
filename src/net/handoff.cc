// See handoff.h.
#include "net/handoff.h"

#include <unistd.h>

namespace tollgate::net::detail {

handoff::handoff(int cores, uint32_t max_per_core)
    : cores_(cores),
      max_(max_per_core),
      slots_(std::make_unique<slot[]>(static_cast<size_t>(cores))) {}

handoff::~handoff() {
  for (int i = 0; i < cores_; ++i) {
    for (const int fd : slots_[i].queued) {
      ::close(fd);
    }
  }
}

bool handoff::reserve(int core) noexcept {
  // relaxed: the figure only bounds how many descriptors a core holds; the descriptor itself is
  // published under the queue's mutex.
  std::atomic<uint32_t>& load = slots_[core].load;
  if (load.fetch_add(1, std::memory_order_relaxed) < max_) {
    return true;
  }
  load.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void handoff::release(int core) noexcept {
  slots_[core].load.fetch_sub(1, std::memory_order_relaxed);
}

int handoff::reserve_elsewhere(int from) noexcept {
  // The emptiest core first; if another core filled it meanwhile, the next emptiest.
  for (int attempt = 0; attempt < cores_; ++attempt) {
    int best = -1;
    uint32_t best_load = max_;
    for (int i = 0; i < cores_; ++i) {
      const uint32_t l = slots_[i].load.load(std::memory_order_relaxed);
      if (i != from && l < best_load) {
        best = i;
        best_load = l;
      }
    }
    if (best < 0) {
      return -1;
    }
    if (reserve(best)) {
      return best;
    }
  }
  return -1;
}

void handoff::push(int to, int fd) {
  slot& s = slots_[to];
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.queued.push_back(fd);
  }
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(s.wake_fd, &one, sizeof one);
}

void handoff::take(int core, std::vector<int>& out) {
  out.clear();
  slot& s = slots_[core];
  std::lock_guard<std::mutex> lock(s.mu);
  out.swap(s.queued);
}

}  // namespace tollgate::net::detail
