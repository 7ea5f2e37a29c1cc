// The seam between the quota core and cluster mode: where a node's key pools get their units
// when the budget is held somewhere else (Redis). Without one (single node) a key's pool holds
// the whole month's remainder and nothing here is used.
#pragma once

#include <cstdint>

namespace tollgate::quota {

struct key_state;

enum class lease_outcome : uint8_t {
  refilled,     ///< units were added to the key's pool: take a lease again
  exhausted,    ///< the cluster-wide budget is spent (stop: quota_exceeded, bill: overage)
  unreachable,  ///< the quota service cannot be reached (stop: unavailable, bill: overage)
};

/// Thread-safe. Implemented by cluster::agent.
class lease_source {
 public:
  virtual ~lease_source() = default;
  /// Called by a core whose lease and whose key pool are both empty for `month`. May block the
  /// calling core for a bounded time (one round trip to the quota service; never longer than a
  /// few hundred milliseconds) while units are fetched into `s.pool`.
  virtual lease_outcome refill(key_state& s, uint32_t month) noexcept = 0;
};

}  // namespace tollgate::quota
