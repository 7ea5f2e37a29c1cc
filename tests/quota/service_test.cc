#include "tollgate/quota/service.h"

#include <gtest/gtest.h>
#include <openssl/crypto.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "quota/state.h"
#include "quota/test_util.h"
#include "support/alloc_counter.h"

namespace tollgate::quota {
namespace {

using test::kSec;
using test::temp_dir;
using test::utc_ns;

const int64_t kMid = utc_ns(2026, 12, 2, 12, 0, 0);  // mid-month "now"

// OpenSSL allocates with malloc, which the operator-new counter does not see: count its
// allocations too (installed before OpenSSL's first allocation, at static initialisation).
thread_local uint64_t t_openssl_allocs = 0;
void* openssl_malloc(size_t n, const char*, int) {
  ++t_openssl_allocs;
  return std::malloc(n);
}
void* openssl_realloc(void* p, size_t n, const char*, int) {
  ++t_openssl_allocs;
  return std::realloc(p, n);
}
void openssl_free(void* p, const char*, int) { std::free(p); }
const bool g_openssl_counted =
    CRYPTO_set_mem_functions(openssl_malloc, openssl_realloc, openssl_free) == 1;

struct fixture {
  explicit fixture(plan_map plans = test::default_plans(), int cores = 1, int64_t now = kMid) {
    opt = test::options(dir.path(), cores);
    opt.plans = std::move(plans);
    this->now = now;
  }
  created_key key(std::string_view account, std::string_view plan_name) {
    return test::add_key(dir.path(), account, plan_name, opt.plans);
  }
  void open() { svc = test::open_service(opt, now); }
  temp_dir dir;
  service_options opt;
  std::unique_ptr<service> svc;
  int64_t now;
};

plan_map small_plans() {
  plan_map m;
  m["tiny"] = test::make_plan("tiny", 1e9, 1000000000, 5, overage_policy::stop);
  m["rated"] = test::make_plan("rated", 10, 20, 1000000, overage_policy::stop);
  m["slow"] = test::make_plan("slow", 2, 1, 1000000, overage_policy::stop);
  m["billed"] = test::make_plan("billed", 1e9, 1000000000, 100, overage_policy::bill);
  m["k1000"] = test::make_plan("k1000", 1e9, 1000000000, 1000, overage_policy::stop);
  return m;
}

// Admits and settles up to `n` calls of `r` on `s` at `now` (billed when `success`), stopping at
// the first refusal; returns how many were admitted.
int bill(core_ledger& s, const key_record& r, int64_t now, int n, bool success = true) {
  int admitted = 0;
  figures fig;
  ticket t;
  while (admitted < n && s.admit(r, now, fig, t) == admit_verdict::ok) {
    s.settle(t, success);
    ++admitted;
  }
  return admitted;
}

TEST(quota_service_test, authenticates_known_keys_only) {
  // Verifies a created key authenticates, and a wrong, empty or prefix-only key does not.
  fixture f;
  auto k = f.key("acme", "free");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->account, "acme");
  EXPECT_EQ(r->plan, "free");
  std::string wrong = k.secret;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  EXPECT_EQ(s.authenticate(wrong), nullptr);
  EXPECT_EQ(s.authenticate(""), nullptr);
  EXPECT_EQ(s.authenticate("tg_live_"), nullptr);
}

TEST(quota_service_test, gcra_allows_burst_then_limits) {
  // Verifies a fresh key gets exactly `burst` requests at one instant, then 429 with
  // Retry-After >= 1, and remaining counts down from burst - 1.
  fixture f(small_plans());
  auto k = f.key("a", "rated");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  for (int i = 0; i < 20; ++i) {
    figures fig;
    ASSERT_EQ(s.check_rate(*r, f.now, fig), rate_verdict::ok) << i;
    EXPECT_EQ(fig.rate_limit, 20);
    EXPECT_EQ(fig.rate_remaining, 19 - i);
    EXPECT_EQ(fig.retry_after_secs, 0);
  }
  figures fig;
  EXPECT_EQ(s.check_rate(*r, f.now, fig), rate_verdict::limited);
  EXPECT_EQ(fig.rate_remaining, 0);
  EXPECT_EQ(fig.retry_after_secs, 1);
  EXPECT_EQ(fig.rate_reset_secs, 2);  // 20 requests at 10/s take 2 s to drain
}

TEST(quota_service_test, gcra_refills_at_the_configured_rate) {
  // Verifies one emission interval later exactly one more request is allowed.
  fixture f(small_plans());
  auto k = f.key("a", "rated");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(s.check_rate(*r, f.now, fig), rate_verdict::ok);
  }
  EXPECT_EQ(s.check_rate(*r, f.now + kSec / 10 - 1, fig), rate_verdict::limited);
  EXPECT_EQ(s.check_rate(*r, f.now + kSec / 10, fig), rate_verdict::ok);
  EXPECT_EQ(s.check_rate(*r, f.now + kSec / 10, fig), rate_verdict::limited);
}

TEST(quota_service_test, gcra_sustained_rate_admits_burst_plus_rate_times_t) {
  // Verifies driving a key far above its rate for 10 s admits burst + rate * 10 exactly.
  fixture f(small_plans());
  auto k = f.key("a", "rated");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  int admitted = 0;
  for (int64_t t = 0; t <= 10 * kSec; t += kSec / 1000) {  // 1000 attempts a second
    figures fig;
    admitted += s.check_rate(*r, f.now + t, fig) == rate_verdict::ok;
  }
  EXPECT_EQ(admitted, 20 + 10 * 10);
}

TEST(quota_service_test, gcra_retry_after_rounds_up_to_whole_seconds) {
  // Verifies a 2/s burst-1 key refused 0.1 s early gets Retry-After 1, and is admitted on time.
  fixture f(small_plans());
  auto k = f.key("a", "slow");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ASSERT_EQ(s.check_rate(*r, f.now, fig), rate_verdict::ok);
  figures lim;
  ASSERT_EQ(s.check_rate(*r, f.now + 4 * kSec / 10, lim), rate_verdict::limited);
  EXPECT_EQ(lim.retry_after_secs, 1);
  EXPECT_EQ(s.check_rate(*r, f.now + 5 * kSec / 10, fig), rate_verdict::ok);
}

TEST(quota_service_test, stop_key_is_refused_at_its_quota_with_matching_figures) {
  // Verifies exactly quota successes, then quota_exceeded with retry_after_secs to the end of
  // the UTC month and limit/used/remaining = quota/quota/0.
  fixture f(small_plans());
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  for (int i = 0; i < 5; ++i) {
    figures fig;
    ticket t;
    ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::ok) << i;
    s.settle(t, true);
  }
  figures fig;
  ticket t;
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  const int64_t to_month_end = (utc_ns(2027, 1, 1) - f.now) / kSec;
  EXPECT_EQ(fig.retry_after_secs, to_month_end);
  EXPECT_EQ(fig.quota_reset_secs, to_month_end);
  EXPECT_EQ(fig.quota_limit, 5);
  EXPECT_EQ(fig.quota_used, 5);
  EXPECT_EQ(fig.quota_remaining, 0);
}

TEST(quota_service_test, retry_after_counts_to_the_end_of_a_28_day_february) {
  // Verifies retry_after_secs at 2026-02-27T00:00:00Z is two days (Feb 2026 has 28 days).
  fixture f(small_plans(), 1, utc_ns(2026, 2, 27));
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket t;
  ASSERT_EQ(bill(s, *r, f.now, 5), 5);
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  EXPECT_EQ(fig.retry_after_secs, 2 * 86400);
}

TEST(quota_service_test, failed_call_gives_its_unit_back) {
  // Verifies failures are not billed: 3 failures + 5 successes fit a quota of 5.
  fixture f(small_plans());
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket t;
  ASSERT_EQ(bill(s, *r, f.now, 3, false), 3);
  ASSERT_EQ(bill(s, *r, f.now, 5), 5);
  EXPECT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  s.reconcile(f.now);
  EXPECT_EQ(f.svc->usage(r->key_id, f.svc->month()).used, 5);
}

TEST(quota_service_test, settle_after_a_reconcile_is_still_published) {
  // Verifies an outcome that arrives after the core reconciled (asynchronous calls) is counted
  // at the next reconciliation, and a refund then is returned to the pool.
  fixture f(small_plans());
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket ok_ticket, fail_ticket;
  ASSERT_EQ(s.admit(*r, f.now, fig, ok_ticket), admit_verdict::ok);
  ASSERT_EQ(s.admit(*r, f.now, fig, fail_ticket), admit_verdict::ok);
  s.reconcile(f.now);
  s.settle(ok_ticket, true);
  s.settle(fail_ticket, false);
  s.reconcile(f.now);
  s.reconcile(f.now);
  EXPECT_EQ(f.svc->usage(r->key_id, f.svc->month()).used, 1);
  EXPECT_EQ(pool_units(r->state->pool.load()), 4);
}

TEST(quota_service_test, bill_key_goes_past_quota_and_counts_overage) {
  // Verifies a bill key keeps being admitted past its quota and the excess is counted as
  // overage; failures past the quota are not counted.
  fixture f(small_plans());
  auto k = f.key("a", "billed");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket t;
  ASSERT_EQ(bill(s, *r, f.now, 150), 150);
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::ok);
  s.settle(t, false);
  EXPECT_EQ(fig.quota_remaining, 0);
  s.reconcile(f.now);
  usage_totals u = f.svc->usage(r->key_id, f.svc->month());
  EXPECT_EQ(u.used, 150);
  EXPECT_EQ(u.overage, 50);
}

TEST(quota_service_test, leases_shrink_as_the_budget_nears_zero) {
  // Verifies each lease is at most max_lease and a quarter of the pool per core, and the last
  // units are leased one at a time; the leases never add up to more than the quota.
  fixture f(small_plans(), 2);
  auto k = f.key("a", "k1000");
  f.open();
  const key_record* r = f.svc->ledger(0).authenticate(k.secret);
  std::atomic<uint64_t>& pool = r->state->pool;
  int64_t prev = pool_units(pool.load());
  ASSERT_EQ(prev, 1000);
  int64_t admitted = 0;
  std::vector<int64_t> leases;
  for (;;) {
    core_ledger& s = f.svc->ledger(static_cast<int>(admitted % 2));
    figures fig;
    ticket t;
    if (s.admit(*r, f.now, fig, t) != admit_verdict::ok) {
      break;
    }
    s.settle(t, true);
    ++admitted;
    const int64_t cur = pool_units(pool.load());
    if (cur != prev) {
      const int64_t lease = prev - cur;
      EXPECT_LE(lease, 64);
      EXPECT_LE(lease, std::max<int64_t>(1, prev / 8));
      leases.push_back(lease);
      prev = cur;
    }
  }
  // The other shard may still hold units: drain it too.
  for (int i = 0; i < 2; ++i) {
    figures fig;
    ticket t;
    while (f.svc->ledger(i).admit(*r, f.now, fig, t) == admit_verdict::ok) {
      f.svc->ledger(i).settle(t, true);
      ++admitted;
    }
  }
  EXPECT_EQ(admitted, 1000);
  ASSERT_GE(leases.size(), 8u);
  EXPECT_EQ(leases.front(), 64);
  for (size_t i = leases.size() - 7; i < leases.size(); ++i) {
    EXPECT_EQ(leases[i], 1);
  }
}

TEST(quota_service_test, reconcile_returns_unused_leases) {
  // Verifies a lease is kept while its core keeps admitting the key and goes back to the pool
  // at the first reconciliation after the core went idle on it, so another core can use the
  // whole budget.
  fixture f(small_plans(), 2);
  auto k = f.key("a", "k1000");
  f.open();
  const key_record* r = f.svc->ledger(0).authenticate(k.secret);
  figures fig;
  ticket t;
  ASSERT_EQ(f.svc->ledger(0).admit(*r, f.now, fig, t), admit_verdict::ok);
  f.svc->ledger(0).settle(t, true);
  const int64_t after_lease = pool_units(r->state->pool.load());
  EXPECT_LT(after_lease, 999);
  f.svc->ledger(0).reconcile(f.now);  // admitted this interval: keeps its lease
  EXPECT_EQ(pool_units(r->state->pool.load()), after_lease);
  f.svc->ledger(0).reconcile(f.now);  // idle for a whole interval: returns it
  EXPECT_EQ(pool_units(r->state->pool.load()), 999);
  int n = 0;
  while (f.svc->ledger(1).admit(*r, f.now, fig, t) == admit_verdict::ok) {
    f.svc->ledger(1).settle(t, true);
    ++n;
  }
  EXPECT_EQ(n, 999);
}

TEST(quota_service_test, refused_core_stays_refused_while_another_spends_its_lease) {
  // Verifies the tail of a stop key is monotonic: once a core is refused, a busy core's
  // reconciliation does not hand units back to it; the busy core spends them and the total is
  // exactly the quota.
  fixture f(small_plans(), 2);
  auto k = f.key("a", "k1000");
  f.open();
  core_ledger& a = f.svc->ledger(0);
  core_ledger& b = f.svc->ledger(1);
  const key_record* r = a.authenticate(k.secret);
  figures fig;
  ticket t;
  int64_t total = 0;
  ASSERT_EQ(b.admit(*r, f.now, fig, t), admit_verdict::ok);  // b holds a lease
  b.settle(t, true);
  ++total;
  while (a.admit(*r, f.now, fig, t) == admit_verdict::ok) {
    a.settle(t, true);
    ++total;
  }
  ASSERT_EQ(b.admit(*r, f.now, fig, t), admit_verdict::ok);  // b is still busy on the key
  b.settle(t, true);
  ++total;
  b.reconcile(f.now);
  a.reconcile(f.now);
  EXPECT_EQ(a.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  while (b.admit(*r, f.now, fig, t) == admit_verdict::ok) {
    b.settle(t, true);
    ++total;
  }
  EXPECT_EQ(total, 1000);
  EXPECT_EQ(a.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
}

TEST(quota_service_test, suspended_account_is_refused_after_reload_and_resumed_after) {
  // Verifies suspend takes effect at the next reload (admit -> suspended, rate still counted)
  // and resume restores admission.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  key_store store(f.dir.path());
  ASSERT_TRUE(store.suspend("acme").has_value());
  EXPECT_TRUE(f.svc->reload_if_changed());
  s.before_send(f.now);  // quiescent point: picks up the new table
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->suspended);
  figures fig;
  ticket t;
  EXPECT_EQ(s.check_rate(*r, f.now, fig), rate_verdict::ok);
  EXPECT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::suspended);
  EXPECT_EQ(fig.quota_limit, 5);
  ASSERT_TRUE(store.resume("acme").has_value());
  EXPECT_TRUE(f.svc->reload_if_changed());
  s.before_send(f.now);
  r = s.authenticate(k.secret);
  EXPECT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::ok);
}

TEST(quota_service_test, revoked_key_is_refused_after_reload) {
  // Verifies a revoked key stops authenticating once the table is reloaded.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  ASSERT_NE(s.authenticate(k.secret), nullptr);
  key_store store(f.dir.path());
  ASSERT_TRUE(store.revoke(k.key_id).has_value());
  f.svc->request_reload();  // the next on_tick of any core reloads
  s.on_tick(f.now);         // reloads, then passes a quiescent point
  EXPECT_EQ(s.authenticate(k.secret), nullptr);
}

TEST(quota_service_test, replaced_plans_apply_to_the_next_request_of_every_key) {
  // Verifies replace_plans (SIGHUP, admin reload) puts a plan's new rate, burst, quota and
  // overage in force at the core's next quiescent point: a key stopped at its quota of 5 is
  // admitted again under a quota of 8 with the 5 already used still counted, and billed past
  // it once the plan bills overage.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  figures fig;
  ticket t;
  ASSERT_EQ(bill(s, *r, f.now, 5), 5);
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);

  plan_map next = small_plans();
  next["tiny"] = test::make_plan("tiny", 4, 7, 8, overage_policy::stop);
  ASSERT_TRUE(f.svc->replace_plans(next).has_value());
  EXPECT_FALSE(f.svc->wait_until_in_force(0));  // the shard still holds the old table
  s.before_send(f.now);                         // quiescent point: picks up the new table
  EXPECT_TRUE(f.svc->wait_until_in_force(0));
  r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->burst, 7);
  EXPECT_EQ(s.check_rate(*r, f.now, fig), rate_verdict::ok);
  EXPECT_EQ(fig.rate_limit, 7);
  EXPECT_EQ(fig.rate_window_secs, 2);  // 7 requests at 4/s
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::ok) << i;
    EXPECT_EQ(fig.quota_limit, 8);
    s.settle(t, true);
  }
  EXPECT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  EXPECT_EQ(fig.quota_used, 8);

  next["tiny"] = test::make_plan("tiny", 4, 7, 8, overage_policy::bill);
  ASSERT_TRUE(f.svc->replace_plans(next).has_value());
  s.before_send(f.now);
  r = s.authenticate(k.secret);
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::ok);
  EXPECT_TRUE(t.overage);
  s.settle(t, true);
}

TEST(quota_service_test, a_quota_lowered_by_a_reload_is_never_overrun_by_leases_out) {
  // Verifies that after a plan's quota drops from 1000 to 10 while two cores hold leases of
  // the old budget, exactly 10 - used more calls are admitted across both cores: the cut the
  // pool could not absorb is paid by the leases the cores hand back at their table switch.
  plan_map plans;
  plans["p"] = test::make_plan("p", 1e9, 1000000000, 1000, overage_policy::stop);
  fixture f(plans, 2);
  auto k = f.key("acme", "p");
  f.open();
  core_ledger& a = f.svc->ledger(0);
  core_ledger& b = f.svc->ledger(1);
  figures fig;
  ticket t;
  for (core_ledger* s : {&a, &b}) {
    const key_record* r = s->authenticate(k.secret);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(s->admit(*r, f.now, fig, t), admit_verdict::ok);  // takes a lease of up to 64
    s->settle(t, true);
  }
  // Replaces the plan with quota `q`; both cores pass a quiescent point.
  auto reload = [&](int64_t q) {
    plans["p"] = test::make_plan("p", 1e9, 1000000000, q, overage_policy::stop);
    const bool ok = f.svc->replace_plans(plans).has_value();
    a.before_send(f.now);
    b.before_send(f.now);
    return ok;
  };
  // 40 attempts alternating between the cores; how many were admitted (-1: key unknown).
  auto attempts = [&] {
    int admitted = 0;
    for (int i = 0; i < 40; ++i) {
      core_ledger& s = i % 2 == 0 ? a : b;
      const key_record* r = s.authenticate(k.secret);
      if (r == nullptr) {
        return -1;
      }
      if (s.admit(*r, f.now, fig, t) == admit_verdict::ok) {
        s.settle(t, true);
        ++admitted;
      }
    }
    return admitted;
  };
  ASSERT_TRUE(reload(10));
  EXPECT_EQ(attempts(), 8);  // 10 minus the 2 billed before the cut
  a.reconcile(f.now);
  b.reconcile(f.now);
  EXPECT_EQ(f.svc->usage(a.authenticate(k.secret)->key_id, f.svc->month()).used, 10);

  // Raised again: the budget grows by the difference, the debt already paid.
  ASSERT_TRUE(reload(15));
  EXPECT_EQ(attempts(), 5);
}

TEST(quota_service_test, a_quota_lowered_below_usage_reports_the_true_usage_when_refused) {
  // Verifies that once a reload cuts a stop key's quota below what it already used, the
  // quota_exceeded figures say what was used (not the new limit), with remaining 0, the same
  // numbers fill_quota (/v1/usage, get_usage) gives: one truth on every surface.
  plan_map plans;
  plans["p"] = test::make_plan("p", 1e9, 1000000000, 100, overage_policy::stop);
  fixture f(plans);
  auto k = f.key("acme", "p");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  ASSERT_EQ(bill(s, *s.authenticate(k.secret), f.now, 30), 30);
  s.reconcile(f.now);
  plans["p"] = test::make_plan("p", 1e9, 1000000000, 10, overage_policy::stop);
  ASSERT_TRUE(f.svc->replace_plans(plans).has_value());
  s.before_send(f.now);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  figures fig;
  ticket t;
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  EXPECT_EQ(fig.quota_limit, 10);
  EXPECT_EQ(fig.quota_used, 30);
  EXPECT_EQ(fig.quota_remaining, 0);
  figures usage;
  s.fill_quota(*r, f.now, usage);
  EXPECT_EQ(usage.quota_used, fig.quota_used);
  EXPECT_EQ(usage.quota_remaining, fig.quota_remaining);
  EXPECT_EQ(usage.quota_limit, fig.quota_limit);
}

TEST(quota_service_test, replacing_plans_changes_nothing_when_the_keys_file_cannot_be_read) {
  // Verifies that when the keys file is unreadable, replace_plans fails with the store's
  // reason and leaves the previous plans in force: once the file is back, a reload still
  // builds the key's figures from the old plans, not from the refused set.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  key_store store(f.dir.path());
  const std::string keys_file = store.keys_path();
  std::string saved;
  {
    std::ifstream in(keys_file, std::ios::binary);
    saved.assign(std::istreambuf_iterator<char>(in), {});
  }
  { std::ofstream(keys_file, std::ios::binary | std::ios::app) << "this is not a key line\n"; }
  plan_map next = small_plans();
  next["tiny"] = test::make_plan("tiny", 4, 7, 8, overage_policy::stop);
  auto r = f.svc->replace_plans(next);
  ASSERT_FALSE(r.has_value());
  EXPECT_FALSE(r.error().empty());
  { std::ofstream(keys_file, std::ios::binary | std::ios::trunc) << saved; }
  ASSERT_TRUE(f.svc->reload_if_changed(true));
  s.before_send(f.now);
  const key_record* rec = s.authenticate(k.secret);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->monthly_quota, 5);
  EXPECT_EQ(rec->burst, 1000000000);
}

TEST(quota_service_test, replacing_plans_is_refused_whole_when_invalid_or_still_in_use) {
  // Verifies a plan set that drops a plan a live key uses, or holds an invalid plan, is
  // refused with a message naming the plan, and the key keeps its old figures.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  plan_map without = small_plans();
  without.erase("tiny");
  without["rated"] = test::make_plan("rated", 1, 1, 1, overage_policy::stop);
  auto r1 = f.svc->replace_plans(without);
  ASSERT_FALSE(r1.has_value());
  EXPECT_NE(r1.error().find("\"tiny\""), std::string::npos) << r1.error();
  EXPECT_NE(r1.error().find(k.key_id), std::string::npos) << r1.error();

  plan_map bad = small_plans();
  bad["tiny"] = test::make_plan("tiny", -1, 7, 8, overage_policy::stop);
  auto r2 = f.svc->replace_plans(bad);
  ASSERT_FALSE(r2.has_value());
  EXPECT_NE(r2.error().find("tiny"), std::string::npos) << r2.error();

  s.before_send(f.now);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->monthly_quota, 5);
  EXPECT_EQ(f.svc->key_count(), 1u);
  // Still the old set: a key of the dropped "rated" plan figures is unchanged too.
  auto k2 = f.key("other", "rated");
  ASSERT_TRUE(f.svc->reload_if_changed(true));
  s.before_send(f.now);
  const key_record* r2k = s.authenticate(k2.secret);
  ASSERT_NE(r2k, nullptr);
  EXPECT_EQ(r2k->burst, 20);
  EXPECT_EQ(f.svc->key_count(), 2u);
}

TEST(quota_service_test, a_repeated_key_is_answered_by_the_core_key_cache) {
  // Verifies the second look-up of a key skips the SHA-256 (a cache hit) and returns the same
  // record, while an unknown key is hashed every time and never remembered.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* first = s.authenticate(k.secret);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(s.key_cache_hits(), 0u);
  EXPECT_EQ(s.authenticate(k.secret), first);
  EXPECT_EQ(s.key_cache_hits(), 1u);
  std::string wrong = k.secret;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  const uint64_t misses = s.key_cache_misses();
  EXPECT_EQ(s.authenticate(wrong), nullptr);
  EXPECT_EQ(s.authenticate(wrong), nullptr);
  EXPECT_EQ(s.key_cache_misses(), misses + 2);
  EXPECT_EQ(s.key_cache_hits(), 1u);
  EXPECT_EQ(s.authenticate(k.secret), first);  // the real key is still remembered
}

TEST(quota_service_test, cached_keys_do_not_answer_for_each_other) {
  // Verifies keys that share a cache slot's length and prefix never authenticate as one
  // another: each presented key gets its own record, over many alternations.
  fixture f(small_plans());
  std::vector<created_key> keys;
  for (int i = 0; i < 20; ++i) {
    keys.push_back(f.key("acct" + std::to_string(i), "tiny"));
  }
  f.open();
  core_ledger& s = f.svc->ledger(0);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 20; ++i) {
      // Twice in a row: the second look-up is a cache hit whatever slots the keys share.
      for (int again = 0; again < 2; ++again) {
        const key_record* r = s.authenticate(keys[static_cast<size_t>(i)].secret);
        ASSERT_NE(r, nullptr);
        EXPECT_EQ(r->account, "acct" + std::to_string(i));
      }
    }
  }
  EXPECT_GE(s.key_cache_hits(), 60u);
}

TEST(quota_service_test, a_cached_key_is_refused_once_revoked_and_reloaded) {
  // Verifies the key cache keeps revocation semantics: a key answered from the cache is still
  // accepted until the core passes a quiescent point after the reload (as without the cache),
  // then refused.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  ASSERT_NE(s.authenticate(k.secret), nullptr);
  ASSERT_NE(s.authenticate(k.secret), nullptr);
  ASSERT_EQ(s.key_cache_hits(), 1u);
  key_store store(f.dir.path());
  ASSERT_TRUE(store.revoke(k.key_id).has_value());
  EXPECT_TRUE(f.svc->reload_if_changed());
  EXPECT_NE(s.authenticate(k.secret), nullptr);  // same table until the quiescent point
  s.before_send(f.now);
  EXPECT_EQ(s.authenticate(k.secret), nullptr);
  EXPECT_EQ(s.authenticate(k.secret), nullptr);
}

TEST(quota_service_test, a_cached_key_sees_its_account_suspended_after_reload) {
  // Verifies the record a cached key returns after a reload is the new table's: suspension is
  // seen (suspended flag, admit refuses) and resumption too.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  ASSERT_FALSE(r->suspended);
  key_store store(f.dir.path());
  ASSERT_TRUE(store.suspend("acme").has_value());
  EXPECT_TRUE(f.svc->reload_if_changed());
  s.before_send(f.now);
  r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->suspended);
  r = s.authenticate(k.secret);  // now from the cache
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->suspended);
  figures fig;
  ticket t;
  EXPECT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::suspended);
  ASSERT_TRUE(store.resume("acme").has_value());
  EXPECT_TRUE(f.svc->reload_if_changed());
  s.before_send(f.now);
  r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->suspended);
}

TEST(quota_service_test, on_tick_picks_up_file_changes_within_reload_ms) {
  // Verifies that without any signal a revocation is seen by the first tick after reload_ms.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  key_store store(f.dir.path());
  ASSERT_TRUE(store.revoke(k.key_id).has_value());
  s.on_tick(f.now + 100 * 1000000);  // 100 ms: not due yet
  EXPECT_NE(s.authenticate(k.secret), nullptr);
  s.on_tick(f.now + 1000 * 1000000);  // reload_ms = 1000
  EXPECT_EQ(s.authenticate(k.secret), nullptr);
}

TEST(quota_service_test, reload_keeps_counters_and_rate_state) {
  // Verifies a table swap (new key added) keeps the old key's usage, lease pool and GCRA state.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket t;
  ASSERT_EQ(bill(s, *r, f.now, 3), 3);
  s.reconcile(f.now);
  const int64_t tat = r->state->tat_ns.load();
  key_state* const state = r->state;
  f.key("other", "tiny");
  ASSERT_TRUE(f.svc->reload_if_changed());
  s.before_send(f.now);
  const key_record* r2 = s.authenticate(k.secret);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->state, state);
  EXPECT_EQ(r2->state->tat_ns.load(), tat);
  EXPECT_EQ(f.svc->usage(r2->key_id, f.svc->month()).used, 3);
  int more = 0;
  while (s.admit(*r2, f.now, fig, t) == admit_verdict::ok) {
    s.settle(t, true);
    ++more;
  }
  EXPECT_EQ(more, 2);
}

TEST(quota_service_test, old_tables_are_freed_once_every_shard_moved_on) {
  // Verifies repeated reloads do not leak tables once shards pass quiescent points (checked
  // under ASan/LSan), and a record seen before the reload stays readable until then.
  fixture f(small_plans(), 2);
  auto k = f.key("acme", "tiny");
  f.open();
  const key_record* held = f.svc->ledger(1).authenticate(k.secret);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(f.svc->reload_if_changed(true));
    f.svc->ledger(0).before_send(f.now);
  }
  EXPECT_EQ(held->account, "acme");  // shard 1 has not passed a quiescent point
  f.svc->ledger(1).before_send(f.now);
  f.svc->reload_if_changed(true);
}

TEST(quota_service_test, month_rollover_resets_usage_and_keeps_closed_totals) {
  // Verifies Dec -> Jan: a stop key exhausted on Dec 31 is admitted again on Jan 1, with
  // December's total kept for billing and January counting from zero.
  fixture f(small_plans(), 1, utc_ns(2026, 12, 31, 23, 59, 59));
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket t;
  ASSERT_EQ(bill(s, *r, f.now, 5), 5);
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  EXPECT_EQ(fig.retry_after_secs, 1);
  const int64_t jan = utc_ns(2027, 1, 1);
  ASSERT_EQ(s.admit(*r, jan, fig, t), admit_verdict::ok);
  s.settle(t, true);
  EXPECT_EQ(fig.quota_reset_secs, 31 * 86400);
  s.reconcile(jan);
  const uint32_t dec_idx = month_index_of_ns(f.now);
  EXPECT_EQ(f.svc->month(), dec_idx + 1);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx).used, 5);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx + 1).used, 1);
  f.svc->persist(jan);
  std::ifstream closed(f.dir.path() + "/usage/month-2026-12.txt");
  std::string text((std::istreambuf_iterator<char>(closed)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(k.key_id + " 5 0"), std::string::npos) << text;
}

TEST(quota_service_test, call_admitted_before_rollover_bills_the_old_month) {
  // Verifies a call admitted in December and settled after the core rolled into January is
  // billed to December.
  fixture f(small_plans(), 1, utc_ns(2026, 12, 31, 23, 59, 59));
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket dec_ticket, t;
  ASSERT_EQ(s.admit(*r, f.now, fig, dec_ticket), admit_verdict::ok);
  const int64_t jan = utc_ns(2027, 1, 1);
  ASSERT_EQ(s.admit(*r, jan, fig, t), admit_verdict::ok);
  s.settle(t, true);
  s.settle(dec_ticket, true);
  s.reconcile(jan);
  const uint32_t dec_idx = month_index_of_ns(f.now);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx).used, 1);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx + 1).used, 1);
}

TEST(quota_service_test, leap_february_lasts_29_days) {
  // Verifies quota_reset_secs on 2028-02-28T00:00:00Z is two days (29-day February).
  fixture f(small_plans(), 1, utc_ns(2028, 2, 28));
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  s.fill_quota(*r, f.now, fig);
  EXPECT_EQ(fig.quota_reset_secs, 2 * 86400);
  EXPECT_EQ(fig.quota_remaining, 5);
}

TEST(quota_service_test, headers_carry_the_same_numbers_as_the_figures) {
  // Verifies write_rate_headers writes every header from one figures snapshot.
  figures f;
  f.rate_limit = 20;
  f.rate_remaining = 7;
  f.rate_reset_secs = 2;
  f.rate_window_secs = 2;
  f.quota_limit = 1000;
  f.quota_used = 1000;
  f.quota_remaining = 0;
  f.quota_reset_secs = 394200;
  f.retry_after_secs = 394200;
  out_buffer out;
  write_rate_headers(out, f);
  EXPECT_EQ(out.view(),
            "X-RateLimit-Limit: 20\r\n"
            "X-RateLimit-Remaining: 7\r\n"
            "X-RateLimit-Reset: 2\r\n"
            "X-Quota-Limit: 1000\r\n"
            "X-Quota-Used: 1000\r\n"
            "X-Quota-Remaining: 0\r\n"
            "X-Quota-Reset: 394200\r\n"
            "RateLimit-Policy: \"burst\";q=20;w=2, \"monthly\";q=1000;w=2592000\r\n"
            "RateLimit: \"burst\";r=7;t=2, \"monthly\";r=0;t=394200\r\n"
            "Retry-After: 394200\r\n");
  f.retry_after_secs = 0;
  out.clear();
  write_rate_headers(out, f);
  EXPECT_EQ(out.view().find("Retry-After"), std::string_view::npos);
}

TEST(quota_service_test, headers_match_a_reference_rendering_for_any_figures) {
  // Verifies write_rate_headers (which converts each repeated value once and copies its digits
  // for the second use) writes exactly what a plain std::to_string rendering writes, for values
  // of every digit count, 0, negatives and the int64 extremes, with and without Retry-After,
  // appended after existing output, and never past its reservation.
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> values = {0, 1, -1, 9, 10, 99, 100, kMax, kMin, kMin + 1, -kMax};
  int64_t p = 1;
  for (int digits = 1; digits <= 18; ++digits) {  // p = 10^digits, up to 10^18 (no overflow)
    p *= 10;
    values.push_back(p - 1);
    values.push_back(p);
    values.push_back(-p);
  }
  auto ref = [](const figures& f) {
    auto n = [](int64_t v) { return std::to_string(v); };
    std::string r = "X-RateLimit-Limit: " + n(f.rate_limit) +
                    "\r\nX-RateLimit-Remaining: " + n(f.rate_remaining) +
                    "\r\nX-RateLimit-Reset: " + n(f.rate_reset_secs) +
                    "\r\nX-Quota-Limit: " + n(f.quota_limit) +
                    "\r\nX-Quota-Used: " + n(f.quota_used) +
                    "\r\nX-Quota-Remaining: " + n(f.quota_remaining) +
                    "\r\nX-Quota-Reset: " + n(f.quota_reset_secs) +
                    "\r\nRateLimit-Policy: \"burst\";q=" + n(f.rate_limit) +
                    ";w=" + n(f.rate_window_secs) + ", \"monthly\";q=" + n(f.quota_limit) +
                    ";w=2592000\r\nRateLimit: \"burst\";r=" + n(f.rate_remaining) +
                    ";t=" + n(f.rate_reset_secs) + ", \"monthly\";r=" + n(f.quota_remaining) +
                    ";t=" + n(f.quota_reset_secs) + "\r\n";
    if (f.retry_after_secs > 0) {
      r += "Retry-After: " + n(f.retry_after_secs) + "\r\n";
    }
    return r;
  };
  size_t checked = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    figures f;
    // Each field takes a different value of the list, so neighbours differ in length.
    f.rate_limit = values[i];
    f.rate_remaining = values[(i + 1) % values.size()];
    f.rate_reset_secs = values[(i + 2) % values.size()];
    f.rate_window_secs = values[(i + 3) % values.size()];
    f.quota_limit = values[(i + 4) % values.size()];
    f.quota_used = values[(i + 5) % values.size()];
    f.quota_remaining = values[(i + 6) % values.size()];
    f.quota_reset_secs = values[(i + 7) % values.size()];
    f.retry_after_secs = values[(i + 8) % values.size()];
    out_buffer out;
    out.append("HTTP/1.1 200 OK\r\n");
    write_rate_headers(out, f);
    EXPECT_EQ(out.view(), "HTTP/1.1 200 OK\r\n" + ref(f)) << "case " << i;
    ++checked;
  }
  // The longest output: every number 20 characters, Retry-After included.
  figures worst;
  worst.rate_limit = worst.rate_remaining = worst.rate_reset_secs = worst.rate_window_secs =
      worst.quota_limit = worst.quota_used = worst.quota_remaining = worst.quota_reset_secs = kMin;
  worst.retry_after_secs = kMax;
  out_buffer out;
  write_rate_headers(out, worst);
  EXPECT_EQ(out.view(), ref(worst));
  EXPECT_EQ(checked, values.size());
}

TEST(quota_service_test, admit_and_settle_allocate_nothing_in_the_steady_state) {
  // Verifies authenticate + check_rate + admit + settle + before_send make no heap allocation
  // after warm-up.
  fixture f(test::default_plans());
  auto k = f.key("a", "big");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  out_buffer hdr(4096);
  auto one = [&](int64_t now) {
    const key_record* r = s.authenticate(k.secret);
    figures fig;
    ticket t;
    if (r == nullptr || s.check_rate(*r, now, fig) != rate_verdict::ok ||
        s.admit(*r, now, fig, t) != admit_verdict::ok) {
      return false;
    }
    s.settle(t, true);
    hdr.clear();
    write_rate_headers(hdr, fig);
    return true;
  };
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(one(f.now + i));
    s.before_send(f.now + i);
  }
  tollgate::test::alloc_scope scope;
  const uint64_t openssl_before = t_openssl_allocs;
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(one(f.now + 1000 + i));
    if (i % 8 == 0) {
      s.before_send(f.now + 1000 + i);
    }
  }
  EXPECT_EQ(scope.count(), 0u);
  if (g_openssl_counted) {
    EXPECT_EQ(t_openssl_allocs - openssl_before, 0u) << "SHA-256 of the presented key allocated";
  }
}

}  // namespace
}  // namespace tollgate::quota
