// core_ledger (core_ledger.cc): the per-core hot path: authentication and the core key cache,
// the GCRA rate limit, admission against the monthly quota, settle, leases and reconcile, and no
// allocation in the steady state.
#include <gtest/gtest.h>
#include <openssl/crypto.h>

#include <cstdlib>
#include <string>

#include "quota/service_fixture.h"
#include "quota/state.h"
#include "support/alloc_counter.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {
namespace {

using test::bill;
using test::fixture;
using test::kMid;
using test::kSec;
using test::small_plans;
using test::temp_dir;
using test::utc_ns;

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
