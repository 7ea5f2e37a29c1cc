// Reloads (reload.cc): key, account and plan changes reach every core's next request through
// new lookup tables, counters and rate state carry over, and old tables are freed.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "quota/service_fixture.h"
#include "quota/state.h"
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

}  // namespace
}  // namespace tollgate::quota
