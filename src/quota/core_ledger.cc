// The per-core hot path: key lookup (with its cache), the rate limit, admission against leases
// of the monthly quota, settling, reconciliation and the month roll. Table reclamation is
// described in service.cc, the journal these calls append to in journal_writer.cc.
#include <fcntl.h>
#include <unistd.h>
// The low-level SHA256_* calls are deprecated in OpenSSL 3 but allocation-free (see
// authenticate); this file opts out of the deprecation warnings for them.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstring>

#include "quota/journal.h"
#include "quota/service_impl.h"
#include "quota/state.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

service::impl& core_ledger_impl::shared() const noexcept { return *svc_.impl_; }

// The state's counters and the journal's figures, as the public surface reports them.
uint64_t core_ledger::key_cache_hits() const noexcept { return impl_of(*this).key_cache_hits_; }
uint64_t core_ledger::key_cache_misses() const noexcept { return impl_of(*this).key_cache_misses_; }
uint64_t core_ledger::billed_calls() const noexcept { return impl_of(*this).billed_calls_; }
uint64_t core_ledger::overage_calls() const noexcept { return impl_of(*this).overage_calls_; }
std::string_view core_ledger::pending_journal() noexcept {
  core_ledger_impl& self = impl_of(*this);
  self.seal_record();
  return self.journal_buf_.view();
}
uint64_t core_ledger::journal_unsynced() const noexcept { return impl_of(*this).unsynced_bytes_; }
uint64_t core_ledger::journal_errors() const noexcept { return impl_of(*this).journal_errors_; }
const journal_health& core_ledger::health() const noexcept { return impl_of(*this).health_; }
uint64_t core_ledger::billed_seq() const noexcept {
  const core_ledger_impl& self = impl_of(*this);
  return (static_cast<uint64_t>(self.journal_buf_.size()) << 32) | self.open_count_;
}
int core_ledger::index() const noexcept { return impl_of(*this).index_; }

core_ledger_impl::core_ledger_impl(service& svc, int index) : svc_(svc), index_(index) {
  journal_buf_.reserve(64 * 1024);
  journal_out_.reserve(64 * 1024);
  late_.reserve(64);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  pass_now_s_ = ts.tv_sec;  // dates calls settled before the first pass (before_send sets it)
  refresh_table();          // the journal is opened by service::open once its generation is known
}

core_ledger_impl::~core_ledger_impl() {
  if (journal_fd_ >= 0) {
    ::close(journal_fd_);
  }
}

void core_ledger_impl::refresh_table() noexcept {
  // acquire: pairs with the release store in reload_if_changed, so the table's contents are
  // visible before we use it.
  const key_table* t = svc_.current_.load(std::memory_order_acquire);
  if (t == table_) {
    if (t != nullptr && seen_epoch_.load(std::memory_order_relaxed) != t->epoch) {
      // Switched mid-pass by authenticate_newest: published only now, at a quiescent point.
      seen_epoch_.store(t->epoch, std::memory_order_release);
    }
    return;
  }
  switch_table(t);
  // release: the reclaimer reading this epoch knows we are done with older tables.
  seen_epoch_.store(t->epoch, std::memory_order_release);
}

void core_ledger_impl::switch_table(const key_table* t) noexcept {
  table_ = t;
  clear_key_cache();                     // remembered records belong to the old table
  if (t->slot_count > locals_.size()) {  // allocation only when keys were added
    locals_.resize(t->slot_count + 64);
    dirty_.reserve(locals_.size());
  }
}

const key_record* core_ledger::authenticate_newest(std::string_view presented) noexcept {
  core_ledger_impl& self = impl_of(*this);
  // acquire: as in refresh_table. seen_epoch_ is not advanced: the table left may still hold
  // records this pass handed out, so it must not be reclaimed before the next quiescent point.
  const key_table* t = self.newest_table();
  if (t != nullptr && t != self.table_) {
    self.switch_table(t);
  }
  return authenticate(presented);
}

void core_ledger_impl::clear_key_cache() noexcept {
  for (key_cache_slot& e : key_cache_) {
    OPENSSL_cleanse(e.bytes, sizeof e.bytes);  // no secret outlives its table here
    e.epoch = 0;
    e.rec = nullptr;
    e.len = 0;
  }
}

namespace {
// Constant-time equality of two n-byte strings (n is public): 8 bytes at a time, no
// data-dependent branch. CRYPTO_memcmp compares a byte per iteration through a library call;
// this runs on every request.
bool equal_ct(const char* a, const char* b, size_t n) noexcept {
  uint64_t diff = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    uint64_t y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    diff |= x ^ y;
  }
  for (; i < n; ++i) {
    diff |= static_cast<uint64_t>(static_cast<unsigned char>(a[i] ^ b[i]));
  }
  return diff == 0;
}

// The cache slot of a presented key: a multiplicative hash of its last 8 bytes (the random part
// of a tg_live_ secret) and its length. It only picks which remembered key the constant-time
// comparison runs against; a caller can learn from timing whether the bytes it presented were
// remembered, which needs them to be a valid key already.
size_t key_slot_of(std::string_view k, size_t slots) noexcept {
  uint64_t w = k.size();
  if (k.size() >= 8) {
    uint64_t tail;
    std::memcpy(&tail, k.data() + k.size() - 8, 8);
    w ^= tail;
  } else {
    for (char c : k) {
      w = (w << 8) | static_cast<unsigned char>(c);
    }
  }
  return static_cast<size_t>((w * 0x9E3779B97F4A7C15ull) >> 58) & (slots - 1);
}
}  // namespace

const key_record* core_ledger::authenticate(std::string_view presented) noexcept {
  core_ledger_impl& self = impl_of(*this);
  if (presented.empty() || self.table_ == nullptr || self.table_->records.empty()) {
    return nullptr;
  }
  core_ledger_impl::key_cache_slot* slot = nullptr;
  if (presented.size() <= core_ledger_impl::kKeyCacheMaxLen) {
    slot = &self.key_cache_[key_slot_of(presented, core_ledger_impl::kKeyCacheSlots)];
    // The length is not secret (every key has the same format); the bytes are compared in
    // constant time, as the digests are below.
    if (slot->epoch == self.table_->epoch && slot->len == presented.size() &&
        equal_ct(slot->bytes, presented.data(), presented.size())) {
      ++self.key_cache_hits_;
      return slot->rec;
    }
  }
  ++self.key_cache_misses_;
  // SHA-256 through OpenSSL's low-level interface: on OpenSSL 3.0 every EVP_DigestInit
  // allocates a fresh provider context, and this runs on every request. The digest is the same
  // one key_store::sha256 (EVP) stores.
  digest d;
  SHA256_CTX c;
  if (SHA256_Init(&c) != 1 || SHA256_Update(&c, presented.data(), presented.size()) != 1 ||
      SHA256_Final(d.data(), &c) != 1) {
    return nullptr;
  }
  uint64_t h;
  std::memcpy(&h, d.data(), sizeof h);
  const key_table& t = *self.table_;
  for (uint64_t i = h & t.mask;; i = (i + 1) & t.mask) {
    int32_t idx = t.index[i];
    if (idx < 0) {
      return nullptr;
    }
    const key_record& r = t.records[static_cast<size_t>(idx)];
    // Constant-time comparison of the full digest (the secret's hash never leaks by timing).
    if (CRYPTO_memcmp(r.hash.data(), d.data(), d.size()) == 0) {
      if (slot != nullptr) {
        slot->epoch = t.epoch;
        slot->rec = &r;
        slot->len = static_cast<uint32_t>(presented.size());
        std::memcpy(slot->bytes, presented.data(), presented.size());
      }
      return &r;
    }
  }
}

rate_verdict core_ledger::check_rate(const key_record& k, int64_t now_ns, figures& f) noexcept {
  // GCRA: the key's theoretical arrival time (tat) advances by one emission interval T per
  // admitted request; a request is admitted if, after advancing, tat - now <= burst * T. One
  // CAS per request makes it exact across cores. relaxed: the value itself is the only data.
  std::atomic<int64_t>& a = k.state->tat_ns;
  int64_t tat = a.load(std::memory_order_relaxed);
  int64_t ntat;
  for (;;) {
    ntat = std::max(tat, now_ns) + k.emission_ns;
    if (ntat - now_ns > k.tolerance_ns) {
      break;
    }
    if (a.compare_exchange_weak(tat, ntat, std::memory_order_relaxed)) {
      f.rate_limit = k.burst;
      f.rate_remaining = (k.tolerance_ns - (ntat - now_ns)) / k.emission_ns;
      f.rate_reset_secs = ceil_secs(ntat - now_ns);
      f.rate_window_secs = k.window_secs;
      f.retry_after_secs = 0;
      return rate_verdict::ok;
    }
  }
  f.rate_limit = k.burst;
  f.rate_remaining = 0;
  f.rate_reset_secs = std::max<int64_t>(1, ceil_secs(tat - now_ns));
  f.rate_window_secs = k.window_secs;
  f.retry_after_secs = std::max<int64_t>(1, ceil_secs(ntat - now_ns - k.tolerance_ns));
  return rate_verdict::limited;
}

void core_ledger::refund_rate(const key_record& k, int64_t now_ns, figures& f) noexcept {
  // The admission advanced tat by T from max(tat, now); stepping it back by T leaves the key
  // where it would be without that request (an earlier tat below now means the same as now).
  // relaxed: as in check_rate.
  std::atomic<int64_t>& a = k.state->tat_ns;
  int64_t tat = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(tat, tat - k.emission_ns, std::memory_order_relaxed)) {
  }
  const int64_t ahead = std::max<int64_t>(0, tat - k.emission_ns - now_ns);
  f.rate_remaining = (k.tolerance_ns - ahead) / k.emission_ns;
  f.rate_reset_secs = ceil_secs(ahead);
}

bool core_ledger_impl::take_lease(const key_record& k, local_key& lk) noexcept {
  std::atomic<uint64_t>& pool = k.state->pool;
  // Read before the pool: a rebase between the two leaves this lease tagged with the older
  // epoch, so it is handed back at the next admit (harmless), never kept past a cut.
  lk.plan_epoch = k.state->plan_epoch.load(std::memory_order_relaxed);
  uint64_t p = pool.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t pm = pool_month(p);
    if (pm != month_) {
      if (pm < month_) {  // this core is first into the new month: roll the service over
        {
          std::lock_guard g(svc_.impl_->mu);
          svc_.ensure_month_locked(month_);
        }
        p = pool.load(std::memory_order_relaxed);
        continue;
      }
      roll_month(pm);  // another core already rolled over (our clock lags slightly)
      p = pool.load(std::memory_order_relaxed);
      continue;
    }
    const int64_t avail = pool_units(p);
    if (avail == 0) {
      return false;
    }
    // Leases shrink with the budget: a quarter of the remainder per core, at most max_lease,
    // at least 1. Near zero every unit is taken singly, so no core hoards the last ones.
    const int64_t cores = static_cast<int64_t>(svc_.ledgers_.empty() ? 1 : svc_.ledgers_.size());
    const int64_t n = std::clamp<int64_t>(avail / (4 * cores), 1, svc_.opt_.max_lease);
    // relaxed: a count; no other data is published through the pool.
    if (pool.compare_exchange_weak(p, make_pool(month_, avail - n), std::memory_order_relaxed)) {
      lk.lease += n;
      return true;
    }
  }
}

admit_verdict core_ledger::admit(const key_record& k, int64_t now_ns, figures& f, ticket& t,
                                 bool may_wait) noexcept {
  core_ledger_impl& self = impl_of(*this);
  if (now_ns >= self.month_end_ns_) {
    self.roll_month(month_index_of_ns(now_ns));
  }
  const int64_t reset = std::max<int64_t>(1, ceil_secs(self.month_end_ns_ - now_ns));
  f.quota_limit = k.monthly_quota;
  f.quota_reset_secs = reset;
  if (k.suspended) {
    fill_quota(k, now_ns, f);
    return admit_verdict::suspended;
  }
  if (!self.journal_room()) {
    // Not recordable: not made, not billed (design §6). The figures are the key's as they stand.
    fill_quota(k, now_ns, f);
    f.retry_after_secs = 1;
    self.health_.refused.store(self.health_.refused.load(std::memory_order_relaxed) + 1,
                               std::memory_order_relaxed);
    return admit_verdict::unavailable;
  }
  core_ledger_impl::local_key& lk = self.locals_[k.slot];
  bool over = false;
  if (lk.lease > 0 && lk.plan_epoch != k.state->plan_epoch.load(std::memory_order_relaxed)) {
    // A reload changed the key's quota since this lease was taken: hand it back (paying a
    // cut first) and take a new one from the rebased pool. Rare: once per core and reload.
    std::lock_guard g(self.shared().mu);
    self.give_back_lease_locked(lk);
  }
  if (lk.lease == 0 && self.opt().leases != nullptr && !self.take_lease(k, lk)) {
    // Cluster mode: the node's pool is filled from Redis by the agent's thread. Asking never
    // waits: the caller parks the request (lease_pending) and admits it again when woken.
    lease_outcome lo = self.opt().leases->request(*k.state, self.month_, self.index_);
    if (lo == lease_outcome::pending && may_wait) {
      fill_quota(k, now_ns, f);
      return admit_verdict::lease_pending;
    }
    if (lo == lease_outcome::pending) {
      lo = lease_outcome::unreachable;  // the caller's bound passed with no units: an outage
    }
    if (lo == lease_outcome::unreachable && k.overage == overage_policy::stop) {
      // An outage is not a bill: the figures stay as they are, the caller retries shortly.
      fill_quota(k, now_ns, f);
      f.retry_after_secs = 1;
      return admit_verdict::quota_unreachable;
    }
  }
  if (lk.lease == 0 && !self.take_lease(k, lk)) {
    if (k.overage == overage_policy::stop) {
      // Every unit is spent or leased to a core that is spending it. Used is what was used
      // (more than the limit after a reload cut the quota below it, as /v1/usage says), and at
      // least the limit: the units leased out are committed to calls in flight on other cores.
      // Cluster mode adds what the other nodes billed (0 on a single node).
      const int64_t used = k.state->used.load(std::memory_order_relaxed) +
                           k.state->remote_used.load(std::memory_order_relaxed) + lk.used_delta;
      f.quota_used = std::max(used, k.monthly_quota);
      f.quota_remaining = 0;
      f.retry_after_secs = reset;
      return admit_verdict::quota_exceeded;
    }
    over = true;
  }
  if (!over) {
    --lk.lease;
  }
  self.touch(lk, k.slot, k.state, k.key_id);  // after take_lease: a month roll there clears flags
  lk.active = true;
  t.state = k.state;
  t.key_id = k.key_id;
  t.slot = k.slot;
  t.month = self.month_;
  t.overage = over;
  // The figures count this call, as X-RateLimit-Remaining counts this request: a response
  // reports the month as it stands once the call it answers is billed, so the answer to the
  // last call a quota allows says 0 remaining. A call that fails after admission is not billed;
  // REST re-reads the figures for its error, MCP's headers are written before the tool runs and
  // count it until the next response.
  const int64_t used = k.state->used.load(std::memory_order_relaxed) +
                       k.state->remote_used.load(std::memory_order_relaxed) + lk.used_delta + 1;
  f.quota_used = used;
  f.quota_remaining = std::max<int64_t>(0, k.monthly_quota - used);
  return admit_verdict::ok;
}

void core_ledger_impl::seal_record() noexcept {
  if (open_count_ == 0) {
    return;
  }
  char* dst = journal_buf_.prepare(journal::kRecordSize);
  journal::encode(dst, journal::record{open_month_, open_key_, open_count_, open_overage_,
                                       static_cast<uint32_t>(pass_now_s_)});
  journal_buf_.commit(journal::kRecordSize);
  --room_calls_;
  open_count_ = 0;
}

void core_ledger::settle(const ticket& t, bool success) noexcept {
  core_ledger_impl& self = impl_of(*this);
  if (success) {
    ++self.billed_calls_;
    self.overage_calls_ += t.overage ? 1 : 0;
  }
  if (t.month != self.month_) {
    // Admitted before this core moved to a new month: bill it to the month it was admitted in.
    if (success) {
      self.append_record(t.month, t.key_id, t.overage);
      self.late_.push_back({t.state, t.month, 1, t.overage, self.pass_now_s_, self.pass_now_s_});
    }
    return;  // a failure's unit belonged to the closed month's budget: nothing to return
  }
  core_ledger_impl::local_key& lk = self.locals_[t.slot];
  // A reconcile may have run since admit (asynchronous outcomes): list the key again.
  self.touch(lk, t.slot, t.state, t.key_id);
  if (success) {
    ++lk.used_delta;
    if (t.overage) {
      ++lk.overage_delta;
    }
    lk.first_s = lk.first_s == 0 ? self.pass_now_s_ : lk.first_s;
    lk.last_s = self.pass_now_s_;
    self.append_record(t.month, t.key_id, t.overage);
  } else if (!t.overage) {
    ++lk.lease;  // refund: the unit goes back to this core's lease
  }
}

void core_ledger::fill_quota(const key_record& k, int64_t now_ns, figures& f) const noexcept {
  const core_ledger_impl& self = impl_of(*this);
  int64_t end_ns = self.month_end_ns_;
  int64_t used = k.state->used.load(std::memory_order_relaxed) +
                 k.state->remote_used.load(std::memory_order_relaxed);
  if (now_ns >= end_ns) {  // month ended but this core has not rolled yet
    end_ns = month_end_secs(month_index_of_ns(now_ns)) * kNsPerSec;
    used = 0;
  } else if (k.slot < self.locals_.size()) {
    used += self.locals_[k.slot].used_delta;
  }
  f.quota_limit = k.monthly_quota;
  f.quota_used = used;
  f.quota_remaining = std::max<int64_t>(0, k.monthly_quota - used);
  f.quota_reset_secs = std::max<int64_t>(1, ceil_secs(end_ns - now_ns));
}

// Publishes every listed key's deltas. Leases go back to the pool only from keys this core did
// not admit since the last reconcile (or all, at a month roll): a core still serving a key keeps
// spending its lease, so a key whose pool ran dry stays refused on the other cores instead of
// flickering back when a busy core reconciles; an idle core's units return within one interval.
void core_ledger_impl::publish_locked(bool return_all_leases) noexcept {
  service& s = svc_;
  if (month_ > s.month_.load(std::memory_order_relaxed)) {
    s.ensure_month_locked(month_);
  }
  const uint32_t svc_month = s.month_.load(std::memory_order_relaxed);
  auto add = [&](key_state* st, uint32_t month, int64_t used, int64_t over, int64_t first,
                 int64_t last) {
    if (used == 0 && over == 0) {
      return;
    }
    if (month == svc_month) {
      // relaxed: readers only want an approximate figure; persist reads under the mutex.
      st->used.fetch_add(used, std::memory_order_relaxed);
      st->overage.fetch_add(over, std::memory_order_relaxed);
      usage_totals times{0, 0, st->first_s.load(std::memory_order_relaxed),
                         st->last_s.load(std::memory_order_relaxed)};
      times.add(0, 0, first, last);
      st->first_s.store(times.first_s, std::memory_order_relaxed);
      st->last_s.store(times.last_s, std::memory_order_relaxed);
    } else {
      s.impl_->closed[month][st->key_id].add(used, over, first, last);
      s.impl_->closed_dirty.push_back(month);
    }
  };
  size_t kept = 0;
  for (uint32_t slot : dirty_) {
    local_key& lk = locals_[slot];
    add(lk.state, month_, lk.used_delta, lk.overage_delta, lk.first_s, lk.last_s);
    lk.used_delta = 0;
    lk.overage_delta = 0;
    lk.first_s = 0;
    lk.last_s = 0;
    if (lk.lease > 0 && lk.active && !return_all_leases) {
      lk.active = false;
      dirty_[kept++] = slot;  // still listed: its lease is reconsidered next time
      continue;
    }
    give_back_lease_locked(lk);
    lk.active = false;
    lk.dirty = false;
  }
  dirty_.resize(kept);  // shrinking: no allocation
  for (const late_entry& e : late_) {
    add(e.state, e.month, e.count, e.overage ? e.count : 0, e.first_s, e.last_s);
  }
  late_.clear();
}

void core_ledger_impl::give_back_lease_locked(local_key& lk) noexcept {
  if (lk.lease > 0) {  // return the unused lease, unless its month's budget is gone
    uint64_t p = lk.state->pool.load(std::memory_order_relaxed);
    if (pool_month(p) == month_) {
      // A quota cut by a reload is paid first (the month only changes under the mutex we hold).
      const int64_t pay = std::min(lk.lease, lk.state->debt);
      lk.state->debt -= pay;
      const int64_t give = lk.lease - pay;
      while (give > 0 && pool_month(p) == month_ &&
             !lk.state->pool.compare_exchange_weak(p, make_pool(month_, pool_units(p) + give),
                                                   std::memory_order_relaxed)) {
      }
    }
  }
  lk.lease = 0;
}

void core_ledger::reconcile(int64_t now_ns) noexcept {
  core_ledger_impl& self = impl_of(*this);
  if (self.journal_busy_) {
    return;  // an engine write is in flight: the next tick reconciles
  }
  self.last_reconcile_ns_ = now_ns;
  if (!flush_journal()) {
    return;  // publishing now would let replay count the still-buffered records twice
  }
  // No rotation while space is short: the new file could not reserve any, and the old one
  // still has what it reserved.
  const bool rotate =
      self.journal_size_ >= static_cast<uint64_t>(self.opt().journal_rotate_bytes) &&
      !self.reserve_failed_;
  int old_fd = -1;
  if (rotate && self.journal_fd_ >= 0) {
    ::fdatasync(self.journal_fd_);
    old_fd = self.journal_fd_;
    const uint64_t old_size = self.journal_size_;
    const uint64_t old_reserved = self.reserved_end_;
    ++self.journal_gen_;
    self.open_journal();
    if (self.journal_fd_ < 0 || self.reserve_failed_) {  // could not rotate: keep the old file
      if (self.journal_fd_ >= 0) {
        ::close(self.journal_fd_);  // the new file stays empty; a later rotation appends to it
      }
      --self.journal_gen_;
      self.journal_fd_ = old_fd;
      old_fd = -1;
      self.journal_size_ = old_size;
      self.reserved_end_ = old_reserved;
      self.update_failing();
      self.recount_room();
    } else {
      self.unsynced_bytes_ = 0;
    }
  }
  {
    std::lock_guard g(self.shared().mu);
    self.publish_locked(false);
    auto& cov = self.shared().covered;
    if (cov.size() <= static_cast<size_t>(self.index_)) {
      cov.resize(static_cast<size_t>(self.index_) + 1);
    }
    cov[static_cast<size_t>(self.index_)] = {self.journal_gen_,
                                             old_fd >= 0 ? 0 : self.journal_size_};
  }
  if (old_fd >= 0) {
    ::close(old_fd);
  }
}

void core_ledger_impl::roll_month(uint32_t month) noexcept {
  if (month <= month_ && month_end_ns_ != 0) {
    return;
  }
  // Publish (and drop leases of) the old month first, then move on.
  if (flush_journal()) {
    std::lock_guard g(svc_.impl_->mu);
    publish_locked(true);
    auto& cov = svc_.impl_->covered;
    if (cov.size() <= static_cast<size_t>(index_)) {
      cov.resize(static_cast<size_t>(index_) + 1);
    }
    cov[static_cast<size_t>(index_)] = {journal_gen_, journal_size_};
  } else {
    // Records not yet written cannot be published; their counts stay the old month's, as late
    // entries (published to that month once written), never the new month's deltas.
    for (const uint32_t slot : dirty_) {
      local_key& lk = locals_[slot];
      if (lk.used_delta > lk.overage_delta) {
        late_.push_back(
            {lk.state, month_, lk.used_delta - lk.overage_delta, false, lk.first_s, lk.last_s});
      }
      if (lk.overage_delta > 0) {
        late_.push_back({lk.state, month_, lk.overage_delta, true, lk.first_s, lk.last_s});
      }
      lk.used_delta = 0;
      lk.overage_delta = 0;
      lk.first_s = 0;
      lk.last_s = 0;
    }
  }
  month_ = month;
  month_end_ns_ = month_end_secs(month) * kNsPerSec;
  for (local_key& lk : locals_) {
    lk.lease = 0;
  }
}

void core_ledger::before_send(int64_t now_ns) noexcept {
  core_ledger_impl& self = impl_of(*this);
  self.pass_now_ns_ = now_ns;
  self.pass_now_s_ = now_ns / kNsPerSec;
  if (!self.engine_journal_) {
    flush_journal();  // else the engine writes the pass's bytes (take_journal)
  }
  self.refresh_table();
}

void core_ledger::on_tick(int64_t now_ns) noexcept {
  core_ledger_impl& self = impl_of(*this);
  self.pass_now_ns_ = now_ns;
  self.pass_now_s_ = now_ns / kNsPerSec;
  self.refresh_table();
  if ((self.reserve_failed_ || self.journal_fd_ < 0) && !self.write_failed_) {
    self.make_room();  // recovery needs no traffic: /readyz turns ready once space returns
  }
  if (now_ns >= self.month_end_ns_) {
    self.roll_month(month_index_of_ns(now_ns));
  }
  if (now_ns - self.last_reconcile_ns_ >= self.opt().reconcile_ms * kNsPerMs) {
    reconcile(now_ns);
  }
  if (now_ns - self.last_fsync_ns_ >= self.opt().fsync_ms * kNsPerMs) {
    self.last_fsync_ns_ = now_ns;
    if (self.engine_journal_) {
      // Off the request path: the engine submits an io_uring fdatasync with its next pass.
      self.sync_requested_ = self.sync_requested_ || self.unsynced_bytes_ > 0;
    } else {
      flush_journal();
      if (self.unsynced_bytes_ > 0 && self.journal_fd_ >= 0) {
        ::fdatasync(self.journal_fd_);
        self.unsynced_bytes_ = 0;
      }
    }
  }
  self.maybe_background(now_ns);
  self.refresh_table();
}

}  // namespace tollgate::quota
