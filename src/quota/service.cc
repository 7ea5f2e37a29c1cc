// The quota service: shared key state, lookup tables, reconciliation, persistence, recovery.
//
// Table reclamation (quiescent-state based, lock-free for readers):
//   1. The service publishes the current table through `current_` (release store).
//   2. A ledger uses exactly one table at a time (`table_`). Only at its quiescent points
//      (before_send and on_tick, where it holds no key_record*) does it load `current_`
//      (acquire) and then store that table's epoch into its own `seen_epoch_` (release).
//   3. A replaced table goes on a retired list with its epoch. The reclaimer (under reload_mu)
//      frees a retired table once every ledger's seen_epoch_ is greater than that table's epoch:
//      each ledger has by then switched to a newer table at a quiescent point and cannot hold
//      a pointer into the old one.
// Request paths never lock and never write shared memory for lookups. Key state lives outside
// tables (owned by the service for its lifetime), so swapping tables never loses a counter.
//
//
// Where the rest is (all in src/quota):
//   service_impl.h    the service's shared state (keys' states, closed months, coverage)
//   core_ledger.h      a core's ledger state (core_ledger forwards to it)
//   core_ledger.cc     the per-core hot path: lookup, rate limit, admission, settle, reconcile
//   journal_writer.cc the per-core usage journal: durability and disk faults
//   reload.cc         key/account/plan reloads into new lookup tables
//   recovery.cc       the usage snapshot, compaction and start-up recovery
//   rate_headers.cc   the rate/quota response headers
#include "tollgate/quota/service.h"

#include "quota/service_impl.h"
#include "quota/state.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/civil.h"

namespace tollgate::quota {

// ---------------------------------------------------------------------------------------------
// service

service::service(service_options opt)
    : opt_(std::move(opt)), impl_(new impl(opt_.data_dir, opt_.leases != nullptr)) {}

service::~service() { ledgers_.clear(); }

core_ledger& service::ledger(int i) noexcept { return *ledgers_[static_cast<size_t>(i)]; }

bool service::journals_ok() const noexcept {
  for (const auto& s : ledgers_) {
    if (s->health().failing.load(std::memory_order_relaxed)) {
      return false;
    }
  }
  return true;
}

void service::ensure_month_locked(uint32_t month) {
  const uint32_t cur = month_.load(std::memory_order_relaxed);
  if (month <= cur) {
    return;
  }
  for (key_state* s : impl_->by_slot) {
    const int64_t used = s->used.load(std::memory_order_relaxed);
    const int64_t over = s->overage.load(std::memory_order_relaxed);
    if (used != 0 || over != 0) {
      impl_->closed[cur][s->key_id].add(used, over, s->first_s.load(std::memory_order_relaxed),
                                        s->last_s.load(std::memory_order_relaxed));
    }
    s->first_s.store(0, std::memory_order_relaxed);
    s->last_s.store(0, std::memory_order_relaxed);
    s->used.store(0, std::memory_order_relaxed);
    s->overage.store(0, std::memory_order_relaxed);
    s->remote_used.store(0, std::memory_order_relaxed);
    s->pool.store(make_pool(month, impl_->cluster ? 0 : s->quota), std::memory_order_relaxed);
    s->debt = 0;  // a cut applied to the old month's budget
  }
  impl_->closed_dirty.push_back(cur);
  // release: a ledger reading month() after this sees the reset counters.
  month_.store(month, std::memory_order_release);
  log_info("usage month {} closed; now counting {}", month_label(cur), month_label(month));
}

void service::maybe_background(int64_t now_ns) {
  int64_t due = next_reload_ns_.load(std::memory_order_relaxed);
  const bool requested = reload_requested_.exchange(false, std::memory_order_relaxed);
  if (requested || now_ns >= due) {
    if (requested || next_reload_ns_.compare_exchange_strong(
                         due, now_ns + opt_.reload_ms * kNsPerMs, std::memory_order_relaxed)) {
      reload_if_changed(requested);
    }
  }
  due = next_persist_ns_.load(std::memory_order_relaxed);
  if (now_ns >= due && next_persist_ns_.compare_exchange_strong(
                           due, now_ns + opt_.reconcile_ms * kNsPerMs, std::memory_order_relaxed)) {
    persist(now_ns);
  }
}

}  // namespace tollgate::quota
