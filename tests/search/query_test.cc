#include "tollgate/search/query.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "search/fleet_impl.h"
#include "support/alloc_counter.h"

namespace tollgate::search {
namespace {

TEST(query_args_test, parses_all_parameters) {
  // Verifies every parameter is decoded and typed, with '+' and %XX decoding.
  query_string_parser p;
  query_args a;
  auto r = p.parse(
      "q=rust+%22open%20source%22&limit=20&offset=40&since=1700000000"
      "&until=2024-05-01T00:00:00Z&sort=date&tags=lang,systems&tags=c%2B%2B",
      a);
  ASSERT_TRUE(r.has_value()) << r.error().argument << " " << r.error().rule;
  EXPECT_EQ(a.query, "rust \"open source\"");
  EXPECT_EQ(a.limit, 20u);
  EXPECT_EQ(a.offset, 40u);
  EXPECT_EQ(a.since, 1700000000);
  EXPECT_EQ(a.until, 1714521600);
  EXPECT_EQ(a.sort, sort_order::date);
  ASSERT_EQ(a.tag_count, 3u);
  EXPECT_EQ(a.tags[0], "lang");
  EXPECT_EQ(a.tags[1], "systems");
  EXPECT_EQ(a.tags[2], "c++");
}

TEST(query_args_test, defaults_apply) {
  // Verifies limit 10, offset 0, relevance and open time bounds by default.
  query_string_parser p;
  query_args a;
  ASSERT_TRUE(p.parse("q=x", a).has_value());
  EXPECT_EQ(a.limit, 10u);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.sort, sort_order::relevance);
  EXPECT_EQ(a.tag_count, 0u);
  EXPECT_LT(a.since, 0);
}

struct bad_case {
  const char* qs;
  std::string_view argument;
  std::string_view rule;
};

TEST(query_args_test, errors_name_the_argument_and_rule) {
  // Verifies each invalid input is rejected naming the argument and its rule.
  const bad_case cases[] = {
      {"", "q", rules::required},
      {"limit=5", "q", rules::required},
      {"q=", "q", rules::query},
      {"q=%FF", "q", rules::query_utf8},
      {"q=x&limit=0", "limit", rules::limit},
      {"q=x&limit=51", "limit", rules::limit},
      {"q=x&limit=ten", "limit", rules::limit},
      {"q=x&limit=", "limit", rules::limit},
      {"q=x&offset=1001", "offset", rules::offset},
      {"q=x&offset=-1", "offset", rules::offset},
      {"q=x&since=yesterday", "since", rules::time},
      {"q=x&until=2024-02-30", "until", rules::time},
      {"q=x&since=200&until=100", "until", rules::time_order},
      {"q=x&sort=best", "sort", rules::sort},
      {"q=x&tags=a,,b", "tags", rules::tags},
      {"q=x&tags=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "tags", rules::tags},
      {"q=x&colour=red", "colour", rules::unknown},
      {"q=x&%FF=1", rules::unknown_name_not_utf8, rules::unknown},  // the answer must stay JSON
      {"q=x&%C0%AF=1", rules::unknown_name_not_utf8, rules::unknown},
      {"q=x&caf%C3%A9=1", "caf\xC3\xA9", rules::unknown},
      {"q=x&limit=1&limit=2", "limit", rules::repeated},
      {"q=x&q=y", "q", rules::repeated},
      {"q=%zz", "q", rules::encoding},
      {"q=x&sort=%4", "sort", rules::encoding},
  };
  query_string_parser p;
  for (const bad_case& c : cases) {
    query_args a;
    auto r = p.parse(c.qs, a);
    ASSERT_FALSE(r.has_value()) << c.qs;
    EXPECT_EQ(r.error().argument, c.argument) << c.qs;
    EXPECT_EQ(r.error().rule, c.rule) << c.qs;
  }
}

TEST(query_args_test, query_length_counts_characters) {
  // Verifies the 500 limit counts code points, not bytes.
  std::string q;
  for (int i = 0; i < 500; ++i) {
    q += "é";
  }
  query_args a;
  a.query = q;
  EXPECT_TRUE(validate(a).has_value());
  q += "é";
  a.query = q;
  EXPECT_FALSE(validate(a).has_value());
}

TEST(query_args_test, count_phrases_counts_what_the_search_plans_as_phrases) {
  // Verifies count_phrases agrees with plan_terms (the search's own planner) on quoted runs of
  // two or more words, single quoted words, empty and unclosed quotes and punctuation.
  const char* const queries[] = {
      "rust",           "\"rust lang\"", "\"rust\"",        "x \"a b\" y \"c d e\"",
      "\"a b",          "\"\"",          "\" a  b \"",      "\"-- ,,\" \"a\"",
      "\"a b\"\"c d\"", "\"a\" b \"c",   "\"\"\"a b\"\"\"", "a \"b c\" \"b c\" \"b c\"",
      "\"é ü\" \"x-y\""};
  for (const char* q : queries) {
    out_buffer chars;
    std::vector<std::string_view> terms;
    std::vector<phrase_span> phrases;
    std::vector<uint32_t> phrase_terms;
    std::vector<uint8_t> alone;
    plan_terms(q, chars, terms, phrases, phrase_terms, alone);
    EXPECT_EQ(count_phrases(q), phrases.size()) << q;
  }
  EXPECT_EQ(count_phrases("x \"a b\" y \"c d e\""), 2u);
  EXPECT_EQ(count_phrases("\"a\" \"b\""), 0u);
}

TEST(query_args_test, a_query_holds_at_most_eight_phrases) {
  // Verifies 8 quoted phrases pass validation and a 9th is refused as a query error naming the
  // rule, while many plain words and single quoted words stay allowed.
  std::string q;
  for (int i = 0; i < 8; ++i) {
    q += "\"the a\" ";
  }
  query_args a;
  a.query = q;
  EXPECT_TRUE(validate(a).has_value()) << q;
  const std::string nine = q + "\"of the\"";
  a.query = nine;
  auto v = validate(a);
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().argument, "query");
  EXPECT_EQ(v.error().rule, rules::query_phrases);
  const std::string singles = q + "\"of\" \"the\" and more plain words";
  a.query = singles;
  EXPECT_TRUE(validate(a).has_value());
}

TEST(query_args_test, parse_time_accepts_unix_and_rfc3339) {
  // Verifies unix seconds, RFC 3339 with Z, offsets and fractions, and plain dates.
  EXPECT_EQ(parse_time("0"), 0);
  EXPECT_EQ(parse_time("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parse_time("2024-05-01T12:30:15Z"), 1714566615);
  EXPECT_EQ(parse_time("2024-05-01T14:30:15.123+02:00"), 1714566615);
  EXPECT_EQ(parse_time("2024-05-01t12:30:15z"), 1714566615);
  EXPECT_EQ(parse_time("2024-02-29"), 1709164800);
  EXPECT_EQ(parse_time("2000-03-01T00:00:00-01:00"), 951868800 + 3600);
}

TEST(query_args_test, parse_time_rejects_malformed_values) {
  // Verifies malformed dates and out-of-range values are rejected.
  for (std::string_view s :
       {"", "-5", "12a", "2023-02-29", "2024-13-01", "2024-05-01T12:00:00", "2024-05-01T25:00:00Z",
        "2024-05-01T12:00Z", "1969-12-31", "2024-05-01T12:00:00+0200", "2024-05-01T12:00:00Zjunk",
        "99999999999999999999"}) {
    EXPECT_FALSE(parse_time(s).has_value()) << s;
  }
}

TEST(query_args_test, parser_allocates_nothing_after_warm_up) {
  // Verifies the per-core parser reuses its decode buffer.
  query_string_parser p;
  query_args a;
  std::string qs = "q=some+long+query%20with%20escapes&limit=50&tags=a,b,c&since=2024-01-01";
  ASSERT_TRUE(p.parse(qs, a).has_value());
  test::alloc_scope scope;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(p.parse(qs, a).has_value());
  }
  EXPECT_EQ(scope.count(), 0u);
}

}  // namespace
}  // namespace tollgate::search
