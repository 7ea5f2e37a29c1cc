// allocator_hold: the hooks run on the first hold and after the last, whichever thread holds.
#include "tollgate/common/alloc_hold.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

namespace tollgate {
namespace {

// What the hooks saw: calls in order ('h' hold, 'r' release).
std::vector<char> g_seen;

struct hooks_guard {
  hooks_guard() {
    g_seen.clear();
    set_allocator_hold_hooks({[] { g_seen.push_back('h'); }, [] { g_seen.push_back('r'); }});
  }
  ~hooks_guard() { set_allocator_hold_hooks({}); }
};

TEST(alloc_hold_test, overlapping_holds_hold_once_and_release_after_the_last) {
  // Verifies the first of overlapping holds calls hold, the inner ones nothing, and only the
  // end of the last calls release; a later hold holds again.
  hooks_guard g;
  {
    std::optional<allocator_hold> outer(std::in_place);
    EXPECT_EQ(g_seen, std::vector<char>{'h'});
    {
      const allocator_hold inner;
      EXPECT_EQ(g_seen, std::vector<char>{'h'});
    }
    EXPECT_EQ(g_seen, std::vector<char>{'h'}) << "an inner hold's end released";
    outer.reset();
    EXPECT_EQ(g_seen, (std::vector<char>{'h', 'r'}));
  }
  { const allocator_hold again; }
  EXPECT_EQ(g_seen, (std::vector<char>{'h', 'r', 'h', 'r'}));
}

TEST(alloc_hold_test, holds_from_many_threads_pair_every_hold_with_a_release) {
  // Verifies holds taken and ended by several threads at once leave the hooks paired: every
  // release follows a hold, and the last call is a release.
  hooks_guard g;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 2000; ++i) {
        const allocator_hold h;
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  ASSERT_FALSE(g_seen.empty());
  for (size_t i = 0; i < g_seen.size(); ++i) {
    EXPECT_EQ(g_seen[i], i % 2 == 0 ? 'h' : 'r') << "call " << i;
  }
  EXPECT_EQ(g_seen.back(), 'r');
}

TEST(alloc_hold_test, without_hooks_a_hold_does_nothing) {
  // Verifies a hold with no hooks set (tests, the C library's malloc) is harmless.
  set_allocator_hold_hooks({});
  const allocator_hold h;
  SUCCEED();
}

}  // namespace
}  // namespace tollgate
