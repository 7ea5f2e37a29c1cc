// remote_health: which shard nodes a gateway's cores ask. app/fleet_client reports each
// remote's outcome here and skips the nodes marked down.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace tollgate::search {

/// Down-marking of the shard nodes, shared by all cores of a gateway. Thread-safe
/// (lock-free). A remote that failed `failures_to_down` queries in a row is down for
/// `down_ns`; then one query at a time probes it (should_ask() lets one caller through per
/// down period) until a success brings it back.
class remote_health {
 public:
  explicit remote_health(uint32_t remotes, uint32_t failures_to_down = 3,
                         int64_t down_ns = 2'000'000'000);
  /// Whether a query should ask remote `r` now (monotonic clock). While down: false, except
  /// once the down period is over, when exactly one caller gets true (the probe; the period is
  /// renewed at the same time). Report its outcome with success() or failure().
  bool should_ask(uint32_t r, int64_t now_ns) noexcept;
  void success(uint32_t r) noexcept;
  void failure(uint32_t r, int64_t now_ns) noexcept;
  /// Marked down and inside the down period (should_ask() would refuse everyone).
  bool is_down(uint32_t r, int64_t now_ns) const noexcept;
  uint32_t remotes() const noexcept { return static_cast<uint32_t>(n_); }

 private:
  struct slot {
    std::atomic<uint32_t> failures{0};
    std::atomic<int64_t> down_until{0};  // 0: up
  };
  size_t n_;
  std::unique_ptr<slot[]> slots_;
  uint32_t failures_to_down_;
  int64_t down_ns_;
};

}  // namespace tollgate::search
