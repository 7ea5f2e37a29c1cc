// The legacy session store (session.cc): the LRU cap and idle expiry.
#include <gtest/gtest.h>

#include <string>

#include "mcp/endpoint_fixture.h"
#include "mcp/mcp_fixture.h"
#include "tollgate/envelope/reference.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;
using envelope::revision;

TEST(session_store_test, at_the_cap_a_new_session_ends_the_least_recently_used) {
  // Verifies the cap: with room for 3, a 4th mint ends the session used longest ago (a touch
  // counts as use), the count of evictions says so, and the store never holds more than 3.
  session_store store(1'000'000'000'000, 3);
  const auto rev = envelope::revision::v2025_06_18;
  std::string a = store.mint(rev, 1);
  std::string b = store.mint(rev, 2);
  std::string c = store.mint(rev, 3);
  EXPECT_EQ(store.size(), 3u);
  ASSERT_TRUE(store.touch(a, 4));  // a is now the most recent; b the least
  std::string d = store.mint(rev, 5);
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.evicted(), 1u);
  EXPECT_FALSE(store.touch(b, 6));
  EXPECT_TRUE(store.touch(a, 7));
  EXPECT_TRUE(store.touch(c, 8));
  EXPECT_TRUE(store.touch(d, 9));
  for (int i = 0; i < 1000; ++i) {
    store.mint(rev, 10 + i);
  }
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.evicted(), 1001u);
  EXPECT_FALSE(store.touch(d, 2000));
}

TEST(session_store_test, expiry_ends_only_the_idle_and_end_frees_room) {
  // Verifies idle expiry by last use (not by mint time), and that DELETE's end() frees a slot
  // without counting as an eviction.
  session_store store(100, 2);
  const auto rev = envelope::revision::v2025_03_26;
  std::string a = store.mint(rev, 0);
  std::string b = store.mint(rev, 10);
  ASSERT_TRUE(store.touch(a, 90));
  store.expire(150);  // b idle 140 > 100; a idle 60
  EXPECT_EQ(store.size(), 1u);
  EXPECT_FALSE(store.touch(b, 151));
  EXPECT_TRUE(store.touch(a, 152));
  EXPECT_TRUE(store.end(a));
  EXPECT_FALSE(store.end(a));
  EXPECT_EQ(store.size(), 0u);
  store.mint(rev, 160);
  store.mint(rev, 161);
  EXPECT_EQ(store.evicted(), 0u);
  EXPECT_EQ(std::string(store.mint(rev, 162)).size(), session_store::id_len);
  EXPECT_EQ(store.evicted(), 1u);
}

}  // namespace
}  // namespace tollgate::mcp
