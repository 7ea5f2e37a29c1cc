// A key's shared state (its GCRA word, lease pool and reconciled counters): the quota service
// owns it; the cluster agent (cluster mode) refills its pool and reads its counters.
#pragma once

#include <atomic>
#include <cstdint>

namespace tollgate::quota {

/// The pool word packs the month the budget belongs to with the units not yet leased out:
///   bits 63..48  month index (year * 12 + month - 1)
///   bits 47..0   units available for leases
/// Tagging the month makes a month rollover one store and makes a stale CAS (a core still in
/// the old month, or a lease returned after the rollover) fail or be dropped, never mixing
/// months.
inline constexpr int pool_month_shift = 48;
inline constexpr uint64_t pool_units_mask = (uint64_t{1} << pool_month_shift) - 1;
inline constexpr uint64_t make_pool(uint32_t month, int64_t units) noexcept {
  return (uint64_t{month} << pool_month_shift) |
         (static_cast<uint64_t>(units < 0 ? 0 : units) & pool_units_mask);
}
inline constexpr uint32_t pool_month(uint64_t p) noexcept {
  return static_cast<uint32_t>(p >> pool_month_shift);
}
inline constexpr int64_t pool_units(uint64_t p) noexcept {
  return static_cast<int64_t>(p & pool_units_mask);
}

/// Thread-safe: a key's shared state. Lives as long as the service (survives reloads, so its
/// counters do). Each hot field has its own cache line so the GCRA CAS traffic of one key does
/// not slow lease refills, and reconciliation writes do not disturb either.
struct key_state {
  /// GCRA theoretical arrival time (ns, CLOCK_REALTIME). CAS'd by every core per request.
  alignas(64) std::atomic<int64_t> tat_ns{0};
  /// Lease pool (see make_pool). CAS'd when a core refills its lease; rare on the hot path.
  alignas(64) std::atomic<uint64_t> pool{0};
  /// Bumped (under service::impl::mu) when a reload changes the key's quota. A core whose
  /// lease was taken under another epoch hands it back before admitting from it, so a lowered
  /// quota binds at once; read relaxed on every admit (same line as the pool, rarely written).
  std::atomic<uint32_t> plan_epoch{0};
  /// Reconciled billed successes and overage for the service's current month. Written under
  /// service::impl::mu at reconciliation; read relaxed for response figures.
  alignas(64) std::atomic<int64_t> used{0};
  std::atomic<int64_t> overage{0};
  /// Cluster mode: billed this month by the other nodes (as of the last sync with Redis); the
  /// figures add it to this node's own. Written by the cluster agent, read relaxed; 0 otherwise.
  std::atomic<int64_t> remote_used{0};
  /// Unix seconds of the current month's first and last reconciled billed call (0: none).
  /// Written under service::impl::mu; read relaxed by the cluster agent's pushes.
  std::atomic<int64_t> first_s{0};
  std::atomic<int64_t> last_s{0};
  // Written only under service::impl::mu.
  uint64_t key_id = 0;
  int64_t quota = 0;
  uint32_t slot = 0;
  /// Units of this month's leases that must not return to the pool: a quota lowered by a
  /// reload below what the pool and the cores' leases held. Leases coming back pay it first,
  /// so the pool never holds more than quota - used - (leases still out).
  int64_t debt = 0;
  /// Cluster mode: the plan's GCRA figures before this node's share is applied (the agent
  /// measures the node's demand with them). Written under service::impl::mu.
  int64_t base_emission_ns = 0;
  int64_t base_burst = 0;
};

static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

}  // namespace tollgate::quota
