// Private to src/quota: what the service's units share (the service's shared state, the
// journal file names, clock helpers). See service.cc for how the units fit together.
#pragma once

#include <fmt/format.h>
#include <time.h>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "quota/core_ledger.h"
#include "quota/journal.h"
#include "quota/state.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

constexpr int64_t kNsPerSec = 1000000000;
constexpr int64_t kNsPerMs = 1000000;

inline int64_t ceil_secs(int64_t ns) noexcept {
  return ns <= 0 ? 0 : (ns + kNsPerSec - 1) / kNsPerSec;
}

// Cold paths only (reservations): the hot path uses the engine's clock.
inline int64_t mono_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}
constexpr int64_t kReserveRetryNs = 100 * kNsPerMs;

struct covered_pos {
  uint64_t gen = 0;
  uint64_t offset = 0;
};

inline std::string journal_name(int core, uint64_t gen) {
  return fmt::format("journal-{}-{}.bin", core, gen);
}

// Parses "journal-C-G.bin".
inline bool parse_journal_name(std::string_view n, int& core, uint64_t& gen) {
  if (n.substr(0, 8) != "journal-" || n.size() < 13 || n.substr(n.size() - 4) != ".bin") {
    return false;
  }
  std::string_view mid = n.substr(8, n.size() - 12);
  size_t dash = mid.find('-');
  if (dash == std::string_view::npos) {
    return false;
  }
  auto a = std::from_chars(mid.data(), mid.data() + dash, core);
  auto b = std::from_chars(mid.data() + dash + 1, mid.data() + mid.size(), gen);
  return a.ec == std::errc() && a.ptr == mid.data() + dash && b.ec == std::errc() &&
         b.ptr == mid.data() + mid.size() && core >= 0;
}

struct service::impl {
  impl(const std::string& dir, bool cluster)
      : store(dir), usage_dir(dir + "/usage"), cluster(cluster) {}

  key_store store;
  std::string usage_dir;
  const bool cluster;        // pools are filled by a lease_source; keys come from install_keys()
  store_contents installed;  // cluster: the keys and accounts last installed (reload_mu)
  bool installed_new = false;
  std::vector<token_alias> tokens;  // OAuth access tokens (reload_mu)
  bool tokens_new = false;          // set_token_aliases since the last build (reload_mu)
  std::unordered_map<uint64_t, double> rate_share;  // cluster: key -> this node's share (reload_mu)
  double default_share = 1.0;                       // keys without one (reload_mu)

  // Guards: states/by_slot (structure and key_state's plain fields), closed, covered,
  // publication into the shared counters, month rollover.
  std::mutex mu;
  std::unordered_map<uint64_t, std::unique_ptr<key_state>> states;
  std::vector<key_state*> by_slot;
  std::map<uint32_t, std::map<uint64_t, usage_totals>> closed;  // month -> key -> totals
  std::vector<uint32_t> closed_dirty;                           // months to export
  std::vector<covered_pos> covered;                             // per core

  // Guards table building and reclamation.
  std::mutex reload_mu;
  std::unique_ptr<key_table> current;
  std::vector<std::unique_ptr<key_table>> retired;
  fs::file_stamp keys_stamp, accounts_stamp;
  uint64_t next_epoch = 1;
  // The earliest expiry of a rotated key in the table in force (0: none); reaching it rebuilds
  // the table (reload_if_changed). Relaxed: a late read only delays the rebuild one check.
  std::atomic<int64_t> next_expiry_unix{0};
  size_t loaded_keys = 0;  // entries of the files the table in force was built from
  size_t loaded_accounts = 0;

  std::mutex persist_mu;
  bool persist_failing = false;  // guarded by persist_mu

  key_state* state_for_locked(uint64_t key_id, int64_t quota, uint32_t month) {
    auto it = states.find(key_id);
    if (it != states.end()) {
      key_state* s = it->second.get();
      if (quota != s->quota && cluster) {
        // The budget is Redis's: the next lease is judged against the new quota there. Leases
        // taken under the old one go back to the node's pool at their core's next admit.
        s->quota = quota;
        s->plan_epoch.fetch_add(1, std::memory_order_relaxed);
      }
      if (quota != s->quota) {  // plan changed: shift the remaining budget by the difference
        // pool - debt + leases out + used == quota holds before and after. A cut below what
        // the pool holds becomes debt, paid by the leases the cores hand back (at their next
        // admit of the key, or reconcile), so a lowered quota is never overrun.
        uint64_t p = s->pool.load(std::memory_order_relaxed);
        int64_t debt = 0;
        for (;;) {
          int64_t units = quota - s->used.load(std::memory_order_relaxed);
          if (pool_month(p) == month) {
            units = pool_units(p) - s->debt + quota - s->quota;
          }
          debt = units < 0 ? -units : 0;
          if (s->pool.compare_exchange_weak(p, make_pool(month, units),
                                            std::memory_order_relaxed)) {
            break;
          }
        }
        s->debt = pool_month(p) == month ? debt : 0;
        s->quota = quota;
        // Leases taken before this point are handed back at their core's next admit of the
        // key (or reconcile), paying the debt; relaxed: the give-back takes the mutex.
        s->plan_epoch.fetch_add(1, std::memory_order_relaxed);
      }
      return s;
    }
    auto s = std::make_unique<key_state>();
    s->key_id = key_id;
    s->quota = quota;
    s->slot = static_cast<uint32_t>(by_slot.size());
    s->pool.store(make_pool(month, cluster ? 0 : quota), std::memory_order_relaxed);
    by_slot.push_back(s.get());
    key_state* raw = s.get();
    states.emplace(key_id, std::move(s));
    return raw;
  }
};

}  // namespace tollgate::quota
