#include "app/search_cache.h"

#include <gtest/gtest.h>

#include <string>

#include "support/alloc_counter.h"

namespace tollgate::app {
namespace {

search::query_args args(std::string_view q) {
  search::query_args a;
  a.query = q;
  return a;
}

// Stores `payload` under `q` (which must miss first).
void put(search_cache& c, const search::query_args& q, std::string_view payload,
         bool nested = true) {
  ASSERT_TRUE(c.make_key(q, nested));
  ASSERT_EQ(c.find(), nullptr);
  c.insert(payload);
}

std::string got(search_cache& c, const search::query_args& q, bool nested = true) {
  if (!c.make_key(q, nested)) {
    return "<uncacheable>";
  }
  const std::string_view* v = c.find();
  return v == nullptr ? "<miss>" : std::string(*v);
}

TEST(search_cache_test, returns_what_was_stored_for_the_same_arguments) {
  // Verifies a stored payload comes back byte for byte for the same arguments, and the
  // counters see one miss, one insert and one hit.
  search_cache_stats st;
  search_cache c({64, 4096}, &st);
  ASSERT_TRUE(c.enabled());
  put(c, args("rust"), "{\"total\":1}");
  EXPECT_EQ(got(c, args("rust")), "{\"total\":1}");
  EXPECT_EQ(st.misses.load(), 1u);
  EXPECT_EQ(st.inserts.load(), 1u);
  EXPECT_EQ(st.hits.load(), 1u);
}

TEST(search_cache_test, every_argument_and_the_nesting_level_are_part_of_the_key) {
  // Verifies that changing any one argument (query bytes, limit, offset, since, until, sort,
  // a tag, tag order) or the nesting level misses instead of returning another answer.
  search_cache c({256, 4096}, nullptr);
  search::query_args base = args("rust");
  base.add_tag("a");
  base.add_tag("b");
  put(c, base, "base");
  EXPECT_EQ(got(c, base), "base");
  EXPECT_EQ(got(c, base, false), "<miss>");
  auto changed = [&](auto edit) {
    search::query_args q = base;
    edit(q);
    return got(c, q);
  };
  EXPECT_EQ(changed([](auto& q) { q.query = "Rust"; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.query = "rust "; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.limit = 11; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.offset = 1; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.since = 0; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.until = 0; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.sort = search::sort_order::date; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.tags[1] = "c"; }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { std::swap(q.tags[0], q.tags[1]); }), "<miss>");
  EXPECT_EQ(changed([](auto& q) { q.tag_count = 1; }), "<miss>");
  // A tag boundary moved: tags {"ab"} with query "rust" vs tags {"a","b"}.
  EXPECT_EQ(changed([](auto& q) {
              q.tag_count = 0;
              q.add_tag("ab");
            }),
            "<miss>");
  EXPECT_EQ(got(c, base), "base");
}

TEST(search_cache_test, a_full_set_replaces_its_least_recently_used_entry) {
  // Verifies the bound: with one set of 4 entries, a fifth query evicts the entry used least
  // recently, and the others stay.
  search_cache_stats st;
  search_cache c({4, 1024}, &st);
  const std::string q[5] = {"q0", "q1", "q2", "q3", "q4"};
  for (int i = 0; i < 4; ++i) {
    put(c, args(q[i]), "p" + q[i]);
  }
  EXPECT_EQ(got(c, args(q[0])), "pq0");  // q1 is now the least recently used
  put(c, args(q[4]), "pq4");
  EXPECT_EQ(st.evictions.load(), 1u);
  EXPECT_EQ(got(c, args(q[1])), "<miss>");
  EXPECT_EQ(got(c, args(q[0])), "pq0");
  EXPECT_EQ(got(c, args(q[2])), "pq2");
  EXPECT_EQ(got(c, args(q[3])), "pq3");
  EXPECT_EQ(got(c, args(q[4])), "pq4");
}

TEST(search_cache_test, an_answer_larger_than_an_entry_is_not_stored) {
  // Verifies a payload that does not fit an entry is counted as oversize and never returned.
  search_cache_stats st;
  search_cache c({4, 1024}, &st);
  put(c, args("big"), std::string(1100, 'x'));
  EXPECT_EQ(st.oversize.load(), 1u);
  EXPECT_EQ(st.inserts.load(), 0u);
  EXPECT_EQ(got(c, args("big")), "<miss>");
}

TEST(search_cache_test, zero_entries_turns_it_off) {
  // Verifies entries = 0 allocates no slots and makes every key uncacheable.
  search_cache c({0, 16384}, nullptr);
  EXPECT_FALSE(c.enabled());
  EXPECT_EQ(c.footprint(), 0u);
  EXPECT_FALSE(c.make_key(args("rust"), true));
}

TEST(search_cache_test, look_ups_and_inserts_allocate_nothing) {
  // Verifies the steady state (hits, misses, inserts with evictions) makes no heap allocation.
  search_cache c({8, 2048}, nullptr);
  std::string names[32];
  for (int i = 0; i < 32; ++i) {
    names[i] = "query " + std::to_string(i);
  }
  const std::string payload(1500, 'p');
  tollgate::test::alloc_scope scope;
  for (int round = 0; round < 4; ++round) {
    for (const std::string& n : names) {
      ASSERT_TRUE(c.make_key(args(n), true));
      if (c.find() == nullptr) {
        c.insert(payload);
      }
    }
  }
  EXPECT_EQ(scope.count(), 0u);
}

}  // namespace
}  // namespace tollgate::app
