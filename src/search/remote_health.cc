// remote_health: lock-free down-marking of the shard nodes (remote_health.h).
#include "tollgate/search/remote_health.h"

#include <algorithm>

namespace tollgate::search {

remote_health::remote_health(uint32_t remotes, uint32_t failures_to_down, int64_t down_ns)
    : n_(remotes),
      slots_(std::make_unique<slot[]>(remotes)),
      failures_to_down_(std::max<uint32_t>(failures_to_down, 1)),
      down_ns_(std::max<int64_t>(down_ns, 1)) {}

bool remote_health::should_ask(uint32_t r, int64_t now_ns) noexcept {
  if (r >= n_) {
    return false;
  }
  // acquire pairs with the release stores in failure()/success(): a caller seeing a shard
  // up sees it as the last writer left it (the counters are advisory; no data hangs off them)
  int64_t until = slots_[r].down_until.load(std::memory_order_acquire);
  if (until == 0) {
    return true;
  }
  if (now_ns < until) {
    return false;
  }
  // the down period is over: the one caller whose CAS moves it on probes the shard
  const int64_t next = std::max<int64_t>(now_ns + down_ns_, 1);
  return slots_[r].down_until.compare_exchange_strong(until, next, std::memory_order_acq_rel,
                                                      std::memory_order_acquire);
}

void remote_health::success(uint32_t r) noexcept {
  if (r >= n_) {
    return;
  }
  slots_[r].failures.store(0, std::memory_order_release);
  slots_[r].down_until.store(0, std::memory_order_release);
}

void remote_health::failure(uint32_t r, int64_t now_ns) noexcept {
  if (r >= n_) {
    return;
  }
  const uint32_t f = slots_[r].failures.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (f >= failures_to_down_) {
    slots_[r].down_until.store(std::max<int64_t>(now_ns + down_ns_, 1), std::memory_order_release);
  }
}

bool remote_health::is_down(uint32_t r, int64_t now_ns) const noexcept {
  if (r >= n_) {
    return true;
  }
  const int64_t until = slots_[r].down_until.load(std::memory_order_acquire);
  return until != 0 && now_ns < until;
}

}  // namespace tollgate::search
