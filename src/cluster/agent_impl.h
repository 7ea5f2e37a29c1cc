// Private to src/cluster: what the agent's three files share (agent.cc: the thread, leases
// for cores and outages; agent_sync.cc: the per-key push and lease protocol; agent_keys.cc:
// keys and accounts, and the copy that makes Redis a cache of the nodes' truth).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "tollgate/cluster/agent.h"
#include "tollgate/quota/key_state.h"

namespace tollgate::cluster {

inline constexpr int64_t kNsPerMs = 1000000;

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Takes up to `most` units from a pool of `month`; returns how many it took.
inline int64_t take_units(quota::key_state& s, uint32_t month, int64_t most) {
  uint64_t p = s.pool.load(std::memory_order_relaxed);
  for (;;) {
    if (quota::pool_month(p) != month || most <= 0) {
      return 0;
    }
    const int64_t units = quota::pool_units(p);
    const int64_t take = std::min(units, most);
    if (take == 0) {
      return 0;
    }
    // relaxed: the pool is a count; cores CAS it the same way.
    if (s.pool.compare_exchange_weak(p, quota::make_pool(month, units - take),
                                     std::memory_order_relaxed)) {
      return take;
    }
  }
}

inline bool add_units(quota::key_state& s, uint32_t month, int64_t n) {
  uint64_t p = s.pool.load(std::memory_order_relaxed);
  for (;;) {
    if (quota::pool_month(p) != month) {
      return false;
    }
    if (s.pool.compare_exchange_weak(p, quota::make_pool(month, quota::pool_units(p) + n),
                                     std::memory_order_relaxed)) {
      return true;
    }
  }
}

inline int64_t pool_of(const quota::key_state& s, uint32_t month) {
  const uint64_t p = s.pool.load(std::memory_order_relaxed);
  return quota::pool_month(p) == month ? quota::pool_units(p) : 0;
}

// A quiet key keeps reporting this long (as long as its rate report stays fresh in Redis)
// before it falls silent.
inline constexpr int64_t kQuietNs = 3000 * kNsPerMs;

// Written by the I/O thread only, except the fields marked (mu_), which cores touch too.
struct agent::key_info {
  quota::key_state* st = nullptr;
  uint64_t id = 0;
  int64_t quota = 0;
  uint32_t month = 0;  // month of `claim`
  int64_t claim = -1;  // units of the month's budget this node claims; -1: not yet known
  int64_t last_used = 0;
  int64_t demand = 0;         // billed per sync interval (decaying maximum)
  int64_t base_emission = 0;  // the plan's GCRA figures (0: not in a table yet)
  int64_t base_burst = 0;
  double share = 0;            // this node's share of the rate; 0: the default
  double applied = 0;          // the share last put in force
  int64_t quiet_since_ns = 0;  // steady clock: quiet since (0: it is not)
  int reports = 0;             // rate reports answered (capped at 2)
  int64_t reporters = 0;       // nodes reporting the key at the last report (itself included)
  int64_t prev_reporters = 0;  // and at the one before
  int64_t last_tat = 0;        // GCRA tat at the last demand sample
  int64_t last_rate_ns = 0;    // wall clock of that sample
  bool want = false;           // (mu_) a core asked for units
  uint64_t waiting_cores = 0;  // (mu_) the cores to wake when the attempt is over
  bool exhausted = false;      // (mu_) the last lease found the budget spent
  int64_t exhausted_ns = 0;    // (mu_)
  int64_t recovering_ns = 0;   // (mu_) when Redis last said the key's usage is being rebuilt
  // What the last acknowledged push sent (an unchanged, idle key is not pushed again).
  int64_t pushed_used = -1;
  int64_t pushed_over = -1;
  int64_t pushed_last = -1;  // l:NODE as last pushed (published apart from used: compared too)
  int64_t pushed_claim = -1;
  int64_t pushed_tat = 0;
};

}  // namespace tollgate::cluster
