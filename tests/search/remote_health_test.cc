// Down-marking of the shard nodes (remote_health.cc): marked down after failures, one probe let
// through at a time.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "search/fleet_fixture.h"
#include "search/fleet_impl.h"
#include "search/test_corpus.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/fleet.h"

namespace tollgate::search {
namespace {

using namespace test_support;

TEST(fleet_test, remote_health_marks_down_and_lets_one_probe_through) {
  // Verifies failures_to_down consecutive failures mark a remote down for down_ns, that after
  // it exactly one caller per period probes, that a failed probe keeps it down and a success
  // brings it back (and resets the count).
  remote_health h(2, 3, 1000);
  EXPECT_EQ(h.remotes(), 2u);
  EXPECT_TRUE(h.should_ask(0, 100));
  h.failure(0, 100);
  h.failure(0, 100);
  EXPECT_FALSE(h.is_down(0, 100));
  EXPECT_TRUE(h.should_ask(0, 100));
  h.failure(0, 100);
  EXPECT_TRUE(h.is_down(0, 100));
  EXPECT_FALSE(h.should_ask(0, 100));
  EXPECT_FALSE(h.should_ask(0, 1099));
  EXPECT_TRUE(h.should_ask(1, 500));  // the other remote is unaffected
  EXPECT_FALSE(h.is_down(1, 500));
  // period over: one probe
  EXPECT_TRUE(h.should_ask(0, 1100));
  EXPECT_FALSE(h.should_ask(0, 1100));
  EXPECT_FALSE(h.should_ask(0, 1500));
  EXPECT_TRUE(h.is_down(0, 1500));
  h.failure(0, 1500);  // the probe failed: down for another period
  EXPECT_FALSE(h.should_ask(0, 2499));
  EXPECT_TRUE(h.should_ask(0, 2500));
  h.success(0);  // the probe answered
  EXPECT_FALSE(h.is_down(0, 2500));
  EXPECT_TRUE(h.should_ask(0, 2500));
  EXPECT_TRUE(h.should_ask(0, 2500));
  h.failure(0, 2600);
  h.failure(0, 2600);
  EXPECT_TRUE(h.should_ask(0, 2600));  // the count restarted at the success
  h.success(0);
  h.failure(0, 2700);
  h.failure(0, 2700);
  EXPECT_FALSE(h.is_down(0, 2700));  // not consecutive
  EXPECT_FALSE(h.should_ask(2, 0));  // out of range

  // many threads at the end of a down period: exactly one probes
  remote_health c(1, 1, 1000);
  c.failure(0, 0);
  std::atomic<int> probes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c, &probes] {
      for (int i = 0; i < 2000; ++i) {
        if (c.should_ask(0, 1000 + i % 500)) {
          probes.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(probes.load(), 1);
}

}  // namespace
}  // namespace tollgate::search
