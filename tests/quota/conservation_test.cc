// Conservation under threads: N shards on N threads spend many keys' budgets and one hot key's
// at once; for stop keys the admitted-and-billed total must equal each budget exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "quota/test_util.h"

namespace tollgate::quota {
namespace {

using test::kSec;
using test::temp_dir;
using test::utc_ns;

// A spender's pacing, as an engine core has it: a quiescent point every 16 calls, a tick
// (reconcile, reload, persist when due) and 1 ms more every 256.
void pace(core_ledger& s, uint64_t& n, int64_t& now) {
  if (++n % 16 == 0) {
    s.before_send(now);
  }
  if (n % 256 == 0) {
    now += 1000000;  // 1 ms
    s.on_tick(now);
  }
}

// Calls of key `ki` billed by all threads.
int64_t total_of(const std::vector<std::vector<int64_t>>& billed, size_t ki) {
  int64_t total = 0;
  for (const auto& per_thread : billed) {
    total += per_thread[ki];
  }
  return total;
}

TEST(quota_conservation_test, threads_spend_each_stop_budget_exactly) {
  // Verifies sum of billed successes == monthly_quota for 40 keys and one hot key, with 4
  // threads, random failures (refunds), and reconciliation/persist/reload racing the spenders.
  constexpr int kThreads = 4;
  constexpr int kKeys = 40;
  temp_dir d;
  plan_map plans;
  plans["small"] = test::make_plan("small", 1e9, 1000000000, 300, overage_policy::stop);
  plans["hot"] = test::make_plan("hot", 1e9, 1000000000, 20000, overage_policy::stop);
  std::vector<created_key> keys;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back(test::add_key(d.path(), "acct" + std::to_string(i % 7), "small", plans));
  }
  keys.push_back(test::add_key(d.path(), "hotacct", "hot", plans));
  auto o = test::options(d.path(), kThreads);
  o.plans = plans;
  o.reconcile_ms = 5;
  o.reload_ms = 20;
  const int64_t t0 = utc_ns(2026, 12, 2, 12);
  auto svc = test::open_service(o, t0);
  ASSERT_NE(svc, nullptr);

  std::vector<std::vector<int64_t>> billed(kThreads, std::vector<int64_t>(keys.size(), 0));
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      core_ledger& s = svc->ledger(th);
      std::mt19937 rng(static_cast<unsigned>(th + 1));
      std::vector<bool> done(keys.size(), false);
      size_t remaining = keys.size();
      int64_t now = t0;
      uint64_t n = 0;
      while (remaining > 0) {
        // Half the attempts go to the hot key.
        size_t ki = (rng() & 1) ? keys.size() - 1 : rng() % keys.size();
        if (done[ki]) {
          ki = 0;
          while (ki < keys.size() && done[ki]) {
            ++ki;
          }
        }
        const key_record* r = s.authenticate(keys[ki].secret);
        ASSERT_NE(r, nullptr);
        figures f;
        ticket t;
        if (s.admit(*r, now, f, t) != admit_verdict::ok) {
          done[ki] = true;
          --remaining;
        } else {
          const bool ok = rng() % 10 != 0;
          s.settle(t, ok);
          billed[static_cast<size_t>(th)][ki] += ok;
        }
        pace(s, n, now);
      }
      s.before_send(now);
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  svc->close(t0 + 3600 * kSec);
  for (size_t ki = 0; ki < keys.size(); ++ki) {
    const int64_t quota = ki + 1 == keys.size() ? 20000 : 300;
    EXPECT_EQ(total_of(billed, ki), quota) << "key " << ki;
    const key_record* r = svc->ledger(0).authenticate(keys[ki].secret);
    EXPECT_EQ(svc->usage(r->key_id, month_index_of_ns(t0)).used, quota) << "key " << ki;
  }
}

// Over 80 lines on purpose: one scenario (spend, pause, cut the quota, spend, count) in order.
TEST(quota_conservation_test, a_quota_cut_by_reload_mid_run_is_spent_exactly) {
  // Verifies that plans replaced while 4 threads spend leave every key with exactly its final
  // quota billed. Once ~3000 calls are billed the spenders pause, holding leases of the old
  // budgets, while the hot key's quota is cut to 10 above what it has billed (far below what
  // the pool and those leases hold, so the cut becomes debt) and the small keys' from 1000 to
  // 250; then they spend on while five more reloads raise both by one each, racing them.
  // Leases of the old budget must be handed back and pay the cut, never spent past it.
  constexpr int kThreads = 4;
  constexpr int kKeys = 20;
  constexpr int kRaises = 5;
  temp_dir d;
  plan_map plans;
  plans["small"] = test::make_plan("small", 1e9, 1000000000, 1000, overage_policy::stop);
  plans["hot"] = test::make_plan("hot", 1e9, 1000000000, 20000, overage_policy::stop);
  std::vector<created_key> keys;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back(test::add_key(d.path(), "acct" + std::to_string(i), "small", plans));
  }
  keys.push_back(test::add_key(d.path(), "hotacct", "hot", plans));
  auto o = test::options(d.path(), kThreads);
  o.plans = plans;
  o.reconcile_ms = 5;
  const int64_t t0 = utc_ns(2026, 12, 2, 12);
  auto svc = test::open_service(o, t0);
  ASSERT_NE(svc, nullptr);

  std::atomic<int64_t> billed_all{0};
  std::atomic<int64_t> hot_billed{0};
  std::atomic<int> paused{0};
  std::atomic<bool> cut_done{false};
  std::atomic<int64_t> hot_final{0};
  std::vector<std::vector<int64_t>> billed(kThreads, std::vector<int64_t>(keys.size(), 0));
  std::vector<std::thread> threads;
  threads.emplace_back([&] {            // the reloader: what SIGHUP does
    while (paused.load() < kThreads) {  // every spender stopped: the hot count is exact
      std::this_thread::yield();
    }
    const int64_t hot_cut = hot_billed.load() + 10;
    hot_final.store(hot_cut + kRaises);
    plan_map next;
    for (int i = 0; i <= kRaises; ++i) {
      next["small"] = test::make_plan("small", 1e9, 1000000000, 250 + i, overage_policy::stop);
      next["hot"] = test::make_plan("hot", 1e9, 1000000000, hot_cut + i, overage_policy::stop);
      EXPECT_TRUE(svc->replace_plans(next).has_value());
      cut_done.store(true);
    }
  });
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      core_ledger& s = svc->ledger(th);
      std::mt19937 rng(static_cast<unsigned>(th + 7));
      std::vector<bool> done(keys.size(), false);
      size_t remaining = keys.size();
      int64_t now = t0;
      uint64_t n = 0;
      bool was_paused = false;
      while (remaining > 0) {
        if (billed_all.load() >= 3000 && !cut_done.load()) {
          if (!was_paused) {
            was_paused = true;
            paused.fetch_add(1);
          }
          s.before_send(now);  // a quiescent point while paused, as an idle core has
          std::this_thread::yield();
          continue;
        }
        size_t ki = (rng() & 1) ? keys.size() - 1 : rng() % keys.size();
        while (done[ki]) {
          ki = (ki + 1) % keys.size();
        }
        const key_record* r = s.authenticate(keys[ki].secret);
        ASSERT_NE(r, nullptr);
        figures f;
        ticket t;
        if (s.admit(*r, now, f, t) != admit_verdict::ok) {
          // A refusal counts once this core holds the last plan (an earlier one may be raised).
          if (r->monthly_quota == 250 + kRaises ||
              (cut_done.load() && r->monthly_quota == hot_final.load())) {
            done[ki] = true;
            --remaining;
          }
        } else {
          s.settle(t, true);
          ++billed[static_cast<size_t>(th)][ki];
          if (ki + 1 == keys.size()) {
            hot_billed.fetch_add(1);
          }
          billed_all.fetch_add(1);
        }
        pace(s, n, now);
      }
      s.before_send(now);
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  svc->close(t0 + 3600 * kSec);
  for (size_t ki = 0; ki < keys.size(); ++ki) {
    EXPECT_EQ(total_of(billed, ki), ki + 1 == keys.size() ? hot_final.load() : 250 + kRaises)
        << "key " << ki;
  }
}

TEST(quota_conservation_test, gcra_is_exact_across_threads) {
  // Verifies 4 threads hammering one key at one instant admit exactly `burst` requests.
  temp_dir d;
  plan_map plans;
  plans["r"] = test::make_plan("r", 100, 5000, 1000000, overage_policy::stop);
  auto k = test::add_key(d.path(), "a", "r", plans);
  auto o = test::options(d.path(), 4);
  o.plans = plans;
  const int64_t t0 = utc_ns(2026, 12, 2, 12);
  auto svc = test::open_service(o, t0);
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      core_ledger& s = svc->ledger(th);
      const key_record* r = s.authenticate(k.secret);
      int64_t mine = 0;
      for (int i = 0; i < 5000; ++i) {
        figures f;
        mine += s.check_rate(*r, t0, f) == rate_verdict::ok;
      }
      admitted += mine;
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(admitted.load(), 5000);
}

}  // namespace
}  // namespace tollgate::quota
