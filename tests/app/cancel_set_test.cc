// The cancelled requests set (src/app/cancel_set.h): which calls a notifications/cancelled
// reaches (same key and id, received before it, within keep_ns), and that cores may add and look
// up at once.
#include "app/cancel_set.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace tollgate::app {
namespace {

constexpr int64_t kS = 1'000'000'000;

TEST(cancel_set_test, a_cancellation_reaches_the_calls_received_before_it) {
  // Verifies a call of the same key and id received before (or in the same pass as) the
  // cancellation is reached; one received after it (another client reusing the id) is not,
  // nor another key's or another id's, nor anything once keep_ns has passed.
  cancel_set s;
  const int64_t t = 1000 * kS;
  EXPECT_FALSE(s.contains(7, "5", t - kS, t)) << "empty";
  s.add(7, "5", t);
  EXPECT_TRUE(s.contains(7, "5", t - kS, t + kS));
  EXPECT_TRUE(s.contains(7, "5", t, t)) << "the same pass";
  EXPECT_FALSE(s.contains(7, "5", t + 1, t + kS)) << "received after the cancellation";
  EXPECT_FALSE(s.contains(8, "5", t - kS, t + kS)) << "another key";
  EXPECT_FALSE(s.contains(7, "\"5\"", t - kS, t + kS)) << "the string id \"5\" is another id";
  EXPECT_FALSE(s.contains(7, "6", t - kS, t + kS));
  EXPECT_FALSE(s.contains(7, "5", t - kS, t + cancel_set::keep_ns + 1)) << "forgotten";
}

TEST(cancel_set_test, a_full_bucket_forgets_its_oldest) {
  // Verifies the set is bounded: more cancellations than it holds forget the oldest, never the
  // newest.
  cancel_set s;
  const int64_t t = 1000 * kS;
  const int n = static_cast<int>(cancel_set::buckets * cancel_set::ways * 4);
  for (int i = 0; i < n; ++i) {
    s.add(1, std::to_string(i), t + i);
  }
  EXPECT_TRUE(s.contains(1, std::to_string(n - 1), t, t + n));
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    kept += s.contains(1, std::to_string(i), t, t + n) ? 1 : 0;
  }
  EXPECT_LE(kept, static_cast<int>(cancel_set::buckets * cancel_set::ways));
  EXPECT_GT(kept, 0);
}

TEST(cancel_set_test, cores_add_and_look_up_at_once) {
  // Verifies concurrent adds and lookups from several threads (as cores do) are safe (run under
  // TSan too; a lost entry under a race is allowed: best effort), and the set still works after.
  cancel_set s;
  const int64_t t = 1000 * kS;
  std::atomic<int> found{0};
  std::vector<std::thread> th;
  for (int k = 0; k < 4; ++k) {
    th.emplace_back([&s, &found, k, t] {
      for (int i = 0; i < 2000; ++i) {
        s.add(static_cast<uint64_t>(k), std::to_string(i), t + i);
        if (s.contains(static_cast<uint64_t>(k), std::to_string(i), t, t + i)) {
          found.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& x : th) {
    x.join();
  }
  EXPECT_GT(found.load(), 0);
  s.add(9, "after", t + 5000);
  EXPECT_TRUE(s.contains(9, "after", t, t + 5000));
}

}  // namespace
}  // namespace tollgate::app
