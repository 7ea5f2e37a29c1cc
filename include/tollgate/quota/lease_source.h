// The seam between the quota core and cluster mode: where a node's key pools get their units
// when the budget is held somewhere else (Redis). Without one (single node) a key's pool holds
// the whole month's remainder and nothing here is used.
//
// A core never waits for units. When its lease and the node's pool of a key are both empty it
// asks (request()), which only records the want and returns: the request that needed the unit
// is parked by its handler and delivered again when the source wakes the core (the answer came,
// or Redis was found down) or when the handler's own bound passes (then the outage rules
// answer it: stop key `unavailable`, bill key served and counted locally).
#pragma once

#include <cstdint>
#include <functional>

namespace tollgate::quota {

struct key_state;

enum class lease_outcome : uint8_t {
  pending,      ///< asked (or already being asked): wait for the core's wake, then admit again
  exhausted,    ///< the cluster-wide budget is spent (stop: quota_exceeded, bill: overage)
  unreachable,  ///< the quota service cannot be reached, or the key's cluster-wide usage is
                ///< being re-established after Redis lost it (stop: unavailable, bill: overage)
};

/// Thread-safe. Implemented by cluster::agent.
class lease_source {
 public:
  virtual ~lease_source() = default;
  /// Called by core `core` whose lease and whose key pool are both empty for `month`. Never
  /// blocks on I/O (a short lock shared with the source's I/O thread at most). pending: units
  /// are being fetched into `s.pool`; the source calls the core's waker (set_waker) once the
  /// attempt is over, whatever its result.
  virtual lease_outcome request(key_state& s, uint32_t month, int core) noexcept = 0;
  /// Core `core`'s wake-up (thread-safe, non-blocking: an eventfd write), called from the
  /// source's thread. Set once per core before it serves; an empty function: never woken (the
  /// caller then relies on its own bound).
  virtual void set_waker(int core, std::function<void()> wake) = 0;
};

}  // namespace tollgate::quota
