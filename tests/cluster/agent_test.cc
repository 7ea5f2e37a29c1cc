// The cluster agent against a real redis-server: leases across nodes and cores conserve a stop
// key's budget exactly (also run under TSan: the tsan preset), key and account changes reach a
// node within a second, and an outage serves bill keys and answers stop keys `unavailable`.
#include "tollgate/cluster/agent.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>
#include <vector>

#include "cluster/redis_fixture.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/service.h"

namespace tollgate::cluster {
namespace {

using quota::admit_verdict;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

quota::plan_map plans() {
  quota::plan_map m;
  m["stop"] = quota::test::make_plan("stop", 1e9, 1000000000, 3000, quota::overage_policy::stop);
  m["bill"] = quota::test::make_plan("bill", 1e9, 1000000000, 50, quota::overage_policy::bill);
  return m;
}

settings cfg(const test::redis_server& r, std::string node, std::string prefix) {
  settings s;
  s.redis = r.address();
  s.node = std::move(node);
  s.prefix = std::move(prefix);
  s.timeout_ms = 500;
  return s;
}

// Admits as the HTTP handler does: a lease_pending answer parks the call (here: sleeps a
// millisecond; the engine serves other requests) and admits it again, with may_wait false once
// `wait_ms` has passed.
admit_verdict admit_parked(quota::core_ledger& sh, const quota::key_record& k, quota::figures& f,
                           quota::ticket& t, int64_t wait_ms = 2000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const bool may_wait = std::chrono::steady_clock::now() < until;
    const admit_verdict v = sh.admit(k, now_ns(), f, t, may_wait);
    if (v != admit_verdict::lease_pending) {
      return v;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// One node: a quota service in cluster mode and its agent.
struct node {
  quota::test::temp_dir dir;
  std::unique_ptr<agent> a;
  std::unique_ptr<quota::service> svc;

  node(const settings& s, int cores, agent_options o = fast()) {
    a = std::make_unique<agent>(s, o);
    quota::service_options so;
    so.data_dir = dir.path();
    so.plans = plans();
    so.cores = cores;
    so.reconcile_ms = 20;
    so.leases = a.get();
    svc = quota::test::open_service(so, now_ns());
  }
  ~node() {
    a->stop();
    a.reset();  // before the service it feeds
  }
  static agent_options fast() {
    agent_options o;
    o.sync_ms = 20;
    o.version_poll_ms = 50;
    return o;
  }
  // A tick and a quiescent point on every core (picks up a new key table).
  void tick() {
    for (int c = 0; c < svc->cores(); ++c) {
      svc->ledger(c).on_tick(now_ns());
      svc->ledger(c).before_send(now_ns());
    }
  }
};

// Sum of u:* in a key's usage hash this month.
int64_t redis_used(const settings& s, uint64_t key_id) {
  redis_conn c(*parse_redis_address(s.redis), "", 500);
  EXPECT_TRUE(c.connect());
  auto r = c.command({"HGETALL", usage_key(s, key_id, quota::month_index_of_ns(now_ns()))});
  int64_t sum = 0;
  if (r) {
    for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
      if (r->elements[i].str.rfind("u:", 0) == 0) {
        sum += std::stoll(r->elements[i + 1].str);
      }
    }
  }
  return sum;
}

template <class F>
bool within_ms(int64_t ms, F&& f) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}

class cluster_agent_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_redis_server()) {
      GTEST_SKIP() << "redis-server not installed (tools/install-deps.sh installs it)";
    }
    ASSERT_TRUE(redis_.start());
  }
  test::redis_server redis_;
};

TEST_F(cluster_agent_test, two_nodes_and_four_cores_admit_a_stop_budget_exactly) {
  // Verifies leases from Redis into node pools into core leases never admit past the quota and
  // leave nothing stranded: 2 nodes x 2 cores on 4 threads spend a 3000-unit stop key exactly.
  // Four spinning threads, two agents and redis-server share CI's two cores: Redis calls and
  // waits for units get seconds here (not 500 ms), so a starved agent thread is not an outage.
  settings sa = cfg(redis_, "a", "t1:");
  settings sb = cfg(redis_, "b", "t1:");
  sa.timeout_ms = sb.timeout_ms = 5000;
  agent_options patient = node::fast();
  redis_keys admin(sa);
  auto k = admin.create_key("acme", "stop", plans(), 1764633600);
  ASSERT_TRUE(k) << k.error().message;
  node na(sa, 2, patient);
  node nb(sb, 2, patient);
  ASSERT_TRUE(na.a->start(*na.svc, 5000));
  ASSERT_TRUE(nb.a->start(*nb.svc, 5000));
  na.tick();
  nb.tick();

  std::atomic<int64_t> admitted{0}, unreachable{0};
  std::atomic<int64_t> last_ok_ms{0};
  std::atomic<bool> done{false};
  auto steady_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  last_ok_ms = steady_ms();
  auto spend = [&](quota::service& svc, int core) {
    quota::core_ledger& sh = svc.ledger(core);
    uint64_t n = 0;
    while (!done.load()) {
      const int64_t now = now_ns();
      if (++n % 8 == 0) {
        sh.on_tick(now);
      }
      sh.before_send(now);
      const quota::key_record* rec = sh.authenticate(k->secret);
      ASSERT_NE(rec, nullptr);
      quota::figures f;
      quota::ticket t;
      switch (admit_parked(sh, *rec, f, t, 5000)) {
        case admit_verdict::ok:
          sh.settle(t, true);
          admitted.fetch_add(1);
          last_ok_ms = steady_ms();
          break;
        case admit_verdict::quota_unreachable:
          unreachable.fetch_add(1);
          break;
        default:
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          break;
      }
    }
    sh.reconcile(now_ns());
  };
  std::vector<std::thread> threads;
  threads.emplace_back(spend, std::ref(*na.svc), 0);
  threads.emplace_back(spend, std::ref(*na.svc), 1);
  threads.emplace_back(spend, std::ref(*nb.svc), 0);
  threads.emplace_back(spend, std::ref(*nb.svc), 1);
  // Every thread keeps asking until no call was admitted anywhere for a second (idle core
  // leases and node pools go back within that), bounded at 60 s.
  const int64_t give_up = steady_ms() + 60000;
  while (steady_ms() - last_ok_ms.load() < 1000 && steady_ms() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  done = true;
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(admitted.load(), 3000);
  EXPECT_EQ(unreachable.load(), 0);
  // Both nodes push their journals' counts; the cluster's sum is the quota.
  EXPECT_TRUE(within_ms(2000, [&] {
    return redis_used(sa, *quota::parse_key_id(k->key_id)) == 3000;
  })) << redis_used(sa, *quota::parse_key_id(k->key_id));
}

TEST_F(cluster_agent_test, key_and_account_changes_reach_a_node_within_a_second) {
  // Verifies a key made, an account suspended and a key revoked in Redis are in force on a
  // running node within 1 s, with no signal.
  const settings s = cfg(redis_, "a", "t2:");
  redis_keys admin(s);
  node n(s, 1);
  ASSERT_TRUE(n.a->start(*n.svc, 5000));
  auto k = admin.create_key("acme", "stop", plans(), 1764633600);
  ASSERT_TRUE(k);
  quota::core_ledger& sh = n.svc->ledger(0);
  auto known = [&] {
    n.tick();
    return sh.authenticate(k->secret) != nullptr;
  };
  EXPECT_TRUE(within_ms(1000, known));
  ASSERT_TRUE(admin.suspend("acme"));
  EXPECT_TRUE(within_ms(1000, [&] {
    n.tick();
    const quota::key_record* r = sh.authenticate(k->secret);
    quota::figures f;
    quota::ticket t;
    return r != nullptr && admit_parked(sh, *r, f, t) == admit_verdict::suspended;
  }));
  ASSERT_TRUE(admin.revoke(k->key_id));
  EXPECT_TRUE(within_ms(1000, [&] { return !known(); }));
}

TEST_F(cluster_agent_test, the_admin_apis_edits_in_redis_reach_a_node_within_a_second) {
  // Verifies the admin API's three edits work in cluster mode as on one node: an account with a
  // customer id (kept across a suspension; a second account cannot take it), a key's plan moved,
  // and a rotation whose new key works at once while the old one lasts until its grace ends.
  const settings s = cfg(redis_, "a", "t6:");
  redis_keys admin(s);
  node n(s, 1);
  ASSERT_TRUE(n.a->start(*n.svc, 5000));
  ASSERT_TRUE(admin.create_account("acme", "cus_123"));
  auto again = admin.create_account("acme", "");
  ASSERT_FALSE(again);
  EXPECT_TRUE(again.error().exists);
  auto taken = admin.create_account("other", "cus_123");
  ASSERT_FALSE(taken);
  EXPECT_TRUE(taken.error().exists);
  EXPECT_NE(taken.error().message.find("acme"), std::string::npos) << taken.error().message;
  EXPECT_FALSE(admin.create_account("bad name", ""));

  auto k = admin.create_key("acme", "stop", plans(), 1764633600);
  ASSERT_TRUE(k);
  ASSERT_TRUE(admin.suspend("acme"));
  ASSERT_TRUE(admin.resume("acme"));
  auto c = admin.load();
  ASSERT_TRUE(c);
  ASSERT_EQ(c->accounts.size(), 1u);
  EXPECT_EQ(c->accounts[0].customer, "cus_123");  // a status change keeps the customer id
  EXPECT_FALSE(c->accounts[0].suspended);

  quota::core_ledger& sh = n.svc->ledger(0);
  auto plan_of = [&](const std::string& secret) -> std::string {
    n.tick();
    const quota::key_record* r = sh.authenticate(secret);
    return r != nullptr ? r->plan : "";
  };
  EXPECT_TRUE(within_ms(1000, [&] { return plan_of(k->secret) == "stop"; }));
  ASSERT_TRUE(admin.set_plan(k->key_id, "bill", plans()));
  EXPECT_TRUE(within_ms(1000, [&] { return plan_of(k->secret) == "bill"; }));
  EXPECT_FALSE(admin.set_plan(k->key_id, "gold", plans()));  // no such plan
  auto missing = admin.set_plan("key_00000000000000ff", "bill", plans());
  ASSERT_FALSE(missing);
  EXPECT_TRUE(missing.error().not_found);

  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto r1 = admin.rotate(k->key_id, now, now + 3600);
  ASSERT_TRUE(r1);
  EXPECT_TRUE(within_ms(1000, [&] { return plan_of(r1->secret) == "bill"; }));
  EXPECT_EQ(plan_of(k->secret), "bill");  // the old key lasts its grace period
  // Rotated again with no grace: the old key is gone at the next reload, the newest works.
  auto r2 = admin.rotate(r1->key_id, now, now);
  ASSERT_TRUE(r2);
  EXPECT_TRUE(within_ms(1000, [&] { return plan_of(r1->secret).empty(); }));
  EXPECT_EQ(plan_of(r2->secret), "bill");
  auto expired = admin.rotate(r1->key_id, now + 1, now + 3600);
  ASSERT_FALSE(expired);  // a key past its grace cannot be rotated again
  ASSERT_TRUE(admin.revoke(r2->key_id));
  EXPECT_FALSE(admin.rotate(r2->key_id, now, now + 60));

  // The node's copy (what it puts back into a Redis that lost its data) keeps both.
  auto all = admin.load();
  ASSERT_TRUE(all);
  auto copy = parse_copy(s, copy_text(s, "e1", *all));
  ASSERT_TRUE(copy) << copy.error();
  ASSERT_EQ(copy->contents.keys.size(), all->keys.size());
  for (size_t i = 0; i < all->keys.size(); ++i) {
    EXPECT_EQ(copy->contents.keys[i].expires_unix, all->keys[i].expires_unix);
    EXPECT_EQ(copy->contents.keys[i].plan, all->keys[i].plan);
  }
  EXPECT_EQ(copy->contents.accounts.at(0).customer, "cus_123");
}

TEST_F(cluster_agent_test, outage_serves_bill_keys_and_answers_stop_keys_unavailable) {
  // Verifies that with Redis gone a stop key is admitted while its node holds units, then gets
  // quota_unreachable (never quota_exceeded, never past its quota), a bill key is admitted
  // throughout, and once Redis is back the bill key's usage there equals what was admitted.
  const settings s = cfg(redis_, "a", "t3:");
  redis_keys admin(s);
  auto ks = admin.create_key("acme", "stop", plans(), 1764633600);
  auto kb = admin.create_key("beta", "bill", plans(), 1764633600);
  ASSERT_TRUE(ks && kb);
  node n(s, 1);
  ASSERT_TRUE(n.a->start(*n.svc, 5000));
  n.tick();
  quota::core_ledger& sh = n.svc->ledger(0);
  auto call = [&](const std::string& secret) {
    const quota::key_record* r = sh.authenticate(secret);
    EXPECT_NE(r, nullptr);
    quota::figures f;
    quota::ticket t;
    const admit_verdict v = admit_parked(sh, *r, f, t);
    if (v == admit_verdict::ok) {
      sh.settle(t, true);
    }
    return v;
  };
  ASSERT_EQ(call(ks->secret), admit_verdict::ok);  // the node now holds a lease of the stop key
  int64_t bill_ok = call(kb->secret) == admit_verdict::ok ? 1 : 0;
  redis_.stop(/*hard=*/true);
  EXPECT_TRUE(within_ms(3000, [&] {
    n.tick();
    return !n.a->redis_up();
  }));
  int64_t stop_ok = 1;
  admit_verdict last = admit_verdict::ok;
  for (int i = 0; i < 5000 && last == admit_verdict::ok; ++i) {
    last = call(ks->secret);
    stop_ok += last == admit_verdict::ok ? 1 : 0;
  }
  EXPECT_EQ(last, admit_verdict::quota_unreachable);
  EXPECT_LE(stop_ok, 3000);
  for (int i = 0; i < 200; ++i) {  // past the bill key's quota of 50 too
    bill_ok += call(kb->secret) == admit_verdict::ok ? 1 : 0;
  }
  EXPECT_EQ(bill_ok, 201);
  ASSERT_TRUE(redis_.start());
  const uint64_t bill_id = *quota::parse_key_id(kb->key_id);
  EXPECT_TRUE(within_ms(5000, [&] {
    n.tick();
    return redis_used(s, bill_id) == bill_ok;
  })) << redis_used(s, bill_id);
  EXPECT_GT(n.a->stats().outage_secs, 0.0);
}

TEST_F(cluster_agent_test, a_redis_that_lost_its_data_keeps_keys_and_gets_usage_back) {
  // Verifies a flushed Redis (data lost) neither turns every key away on a running node (an
  // empty key set is not installed over a loaded one) nor loses the month's usage: the node
  // pushes its journal's absolute count again.
  const settings s = cfg(redis_, "a", "t4:");
  redis_keys admin(s);
  auto k = admin.create_key("acme", "bill", plans(), 1764633600);
  ASSERT_TRUE(k);
  node n(s, 1);
  ASSERT_TRUE(n.a->start(*n.svc, 5000));
  n.tick();
  quota::core_ledger& sh = n.svc->ledger(0);
  for (int i = 0; i < 7; ++i) {
    const quota::key_record* r = sh.authenticate(k->secret);
    ASSERT_NE(r, nullptr);
    quota::figures f;
    quota::ticket t;
    ASSERT_EQ(admit_parked(sh, *r, f, t), admit_verdict::ok);
    sh.settle(t, true);
  }
  const uint64_t id = *quota::parse_key_id(k->key_id);
  EXPECT_TRUE(within_ms(2000, [&] {
    n.tick();
    return redis_used(s, id) == 7;
  }));
  ASSERT_TRUE(admin.conn().command({"FLUSHALL"}));
  EXPECT_TRUE(within_ms(2000, [&] {
    n.tick();
    return redis_used(s, id) == 7;
  }));
  n.tick();
  EXPECT_NE(sh.authenticate(k->secret), nullptr);
}

TEST_F(cluster_agent_test, a_silent_nodes_unused_units_come_back_after_the_stale_bound) {
  // Verifies another node's claim counts whole while it pushes and only its used units once it
  // has been silent past stale_claim_ms: a dead node's leases do not strand a stop budget.
  const settings s = cfg(redis_, "a", "t5:");
  redis_keys admin(s);
  auto stale = admin.create_key("acme", "stop", plans(), 1764633600);
  auto fresh = admin.create_key("beta", "stop", plans(), 1764633600);
  ASSERT_TRUE(stale && fresh);
  const int64_t wall = now_ns() / 1000000;
  const uint32_t month = quota::month_index_of_ns(now_ns());
  // A node "gone" used 100 units and claims 2,900 of each 3,000 budget: last pushed 10 s ago
  // for one key, just now for the other.
  for (const auto& [key, at] : {std::pair{*stale, wall - 10000}, std::pair{*fresh, wall}}) {
    ASSERT_TRUE(
        admin.conn().command({"HSET", usage_key(s, *quota::parse_key_id(key.key_id), month),
                              "u:gone", "100", "g:gone", "2900", "t:gone", std::to_string(at)}));
  }
  agent_options o = node::fast();
  o.stale_claim_ms = 1000;
  node n(s, 1, o);
  ASSERT_TRUE(n.a->start(*n.svc, 5000));
  n.tick();
  quota::core_ledger& sh = n.svc->ledger(0);
  auto spend = [&](const std::string& secret) {
    int64_t ok = 0;
    for (int i = 0; i < 5000; ++i) {
      const quota::key_record* r = sh.authenticate(secret);
      EXPECT_NE(r, nullptr);
      quota::figures f;
      quota::ticket t;
      const admit_verdict v = admit_parked(sh, *r, f, t);
      if (v != admit_verdict::ok) {
        EXPECT_EQ(v, admit_verdict::quota_exceeded);
        break;
      }
      sh.settle(t, true);
      ++ok;
      if (i % 64 == 0) {
        n.tick();
      }
    }
    return ok;
  };
  EXPECT_EQ(spend(fresh->secret), 100);   // 3,000 - the live claim of 2,900
  EXPECT_EQ(spend(stale->secret), 2900);  // 3,000 - the 100 the silent node used
}

}  // namespace
}  // namespace tollgate::cluster

// The rate share split (README, cluster mode: rate limits), no Redis needed.
TEST(cluster_rate_share_test, shares_of_all_nodes_sum_to_one) {
  const std::vector<std::vector<int64_t>> cases = {
      {0, 0, 0}, {40, 0, 0}, {72, 0}, {10, 20, 30, 40}, {1, 1000}, {5}, {0, 3, 0, 0, 0, 7}};
  for (const auto& demands : cases) {
    int64_t sum = 0;
    for (int64_t d : demands) {
      sum += d;
    }
    double total = 0;
    for (int64_t d : demands) {
      const double s = tollgate::cluster::rate_share(d, sum, static_cast<int64_t>(demands.size()));
      EXPECT_GE(s, 1.0 / (10.0 * static_cast<double>(demands.size())));
      total += s;
    }
    EXPECT_NEAR(total, 1.0, 1e-9) << demands.size() << " nodes";
  }
}

TEST(cluster_rate_share_test, a_node_that_alone_serves_a_key_gets_over_nine_tenths) {
  // Sticky sessions: one of three nodes has all the demand (40/s of its share; twice that when
  // its bucket is empty); the idle two keep their floor of 1/30 and no more.
  for (int64_t d : {4, 40, 80}) {
    const double s = tollgate::cluster::rate_share(d, d, 3);
    EXPECT_NEAR(s, 1.0 - 2.0 / 30, 1e-12) << d;
    EXPECT_NEAR(tollgate::cluster::rate_share(0, d, 3), 1.0 / 30, 1e-12) << d;
  }
}

TEST(cluster_rate_share_test, idle_nodes_split_evenly_and_demand_splits_in_proportion) {
  EXPECT_NEAR(tollgate::cluster::rate_share(0, 0, 4), 0.25, 1e-12);
  EXPECT_NEAR(tollgate::cluster::rate_share(7, 7, 1), 1.0, 1e-12);
  // Two busy nodes at 30/s and 10/s: floors 1/20 each, the other 0.9 split about 3:1.
  EXPECT_NEAR(tollgate::cluster::rate_share(30, 40, 2), 0.05 + 0.9 * 30 / 40, 1e-12);
  // A demand figure larger than the sum read (a report racing the script) stays a share <= 1.
  EXPECT_LE(tollgate::cluster::rate_share(50, 10, 2), 1.0);
}
