// Remote shards without sockets: a gateway backend (L local slots + R remote slots) whose
// "remotes" are other backends answering through serve_fleet_request() in-process; the bodies
// go back and forth by hand, as the app's fleet client moves them over HTTP.
// The gateway's pages, totals and scores equal a single backend's; partial and unavailable
// answers; stories found locally or remotely; no allocation in the steady state.
#include "tollgate/search/fleet.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "search/fleet_fixture.h"
#include "search/fleet_impl.h"
#include "search/test_corpus.h"
#include "support/alloc_counter.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

using namespace test_support;

TEST(fleet_test, pages_match_a_single_backend) {
  // Verifies a gateway with local and remote slots returns what one backend over the union
  // corpus returns: the same totals, the very same page (ids and keys, bit for bit, relevance
  // and date alike) and the same payload bytes.
  fleet_fixture f(generated(1500, 11), 2, {3, 1});
  auto us = f.all->make_scratch();
  remote_query q(f.remotes());
  out_buffer mine, ref;
  size_t remote_hits = 0;
  for (const query_args& a : sample_queries()) {
    SCOPED_TRACE(std::string(a.query));
    f.fan_out(q, a);
    auto gr = f.gateway->search(a, *f.gs, &q);
    for (const hit& h : gr->stories) {
      remote_hits += h.shard >= 2 ? 1 : 0;
    }
    page got = page_of(gr);
    page want = page_of(f.all->search(a, *us));
    EXPECT_EQ(got.total, want.total);
    EXPECT_EQ(got.answered, 4u);
    EXPECT_EQ(got.shards, 4u);
    EXPECT_EQ(got.hits, want.hits);
    mine.clear();
    ref.clear();
    ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, mine, false, &q).has_value());
    ASSERT_TRUE(f.all->search_stories(a, *us, ref, false).has_value());
    EXPECT_EQ(mine.view(), ref.view());
  }
  EXPECT_GT(remote_hits, 200u);  // the pages mix local and remote hits
}

TEST(fleet_test, date_sorted_queries_skip_the_frequency_round) {
  // Verifies needs_df() is false exactly for sort=date, and that answering those in one round
  // trip (skip_df: idf 1) gives the same totals, ids, order and keys as the two phases.
  fleet_fixture f(generated(1500, 11), 2, {3, 1});
  remote_query both(f.remotes());
  remote_query one(f.remotes());
  size_t skipped = 0;
  for (const query_args& a : sample_queries()) {
    SCOPED_TRACE(std::string(a.query));
    both.start_search(*f.gateway, a);
    EXPECT_EQ(both.needs_df(), a.sort == sort_order::relevance);
    if (both.needs_df()) {
      continue;
    }
    ++skipped;
    f.fan_out(both, a);
    page want = page_of(f.gateway->search(a, *f.gs, &both));
    f.fan_out_skipping_df(one, a);
    page got = page_of(f.gateway->search(a, *f.gs, &one));
    EXPECT_EQ(got.total, want.total);
    EXPECT_EQ(got.answered, want.answered);
    ASSERT_EQ(got.hits.size(), want.hits.size());
    for (size_t i = 0; i < got.hits.size(); ++i) {
      EXPECT_EQ(got.hits[i].first, want.hits[i].first) << "rank " << i;
      if (a.sort == sort_order::date) {
        EXPECT_EQ(got.hits[i].second, want.hits[i].second);
      }
    }
  }
  EXPECT_GE(skipped, 11u);
}

TEST(fleet_test, relevance_equals_a_reference_merge_with_the_global_idf) {
  // Verifies relevance pages equal every node's own ranking under the global idf, merged by
  // (score desc, id): the gateway loses or reorders nothing across nodes.
  fleet_fixture f(generated(1500, 23), 2, {3, 1});
  remote_query q(f.remotes());
  size_t checked = 0;
  for (const query_args& a : sample_queries()) {
    if (a.sort != sort_order::relevance) {
      continue;
    }
    SCOPED_TRACE(std::string(a.query));
    f.fan_out(q, a);
    page got = page_of(f.gateway->search(a, *f.gs, &q));
    // reference: each node searched with the same plan and idf, all hits, sorted
    const planned pl(a.query);
    query_plan plan{};
    plan.terms = pl.terms;
    plan.idf = q.idf();
    plan.phrase_idf = q.phrase_idf();
    plan.avgdl = q.avgdl();
    plan.phrases = pl.phrases;
    plan.phrase_terms = pl.phrase_terms;
    plan.tags = std::span<const std::string_view>(a.tags.data(), a.tag_count);
    plan.since = a.since;
    plan.until = a.until;
    plan.sort = a.sort;
    plan.k = std::min(a.offset + a.limit, kMaxK);
    std::vector<std::pair<std::string, double>> all;
    uint64_t total = 0;
    std::vector<const backend*> members{f.gateway.get()};
    for (auto& n : f.nodes) {
      members.push_back(n.get());
    }
    for (const backend* b : members) {
      auto s = b->make_scratch();
      auto r = b->search_plan(plan, *s);
      ASSERT_TRUE(r.has_value());
      total += r->total;
      for (const hit& h : r->stories) {
        all.emplace_back(std::string(h.id), h.key);
      }
    }
    std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) {
      return x.second > y.second || (x.second == y.second && id_less(x.first, y.first));
    });
    if (all.size() > plan.k) {
      all.resize(plan.k);
    }
    all.erase(all.begin(), all.begin() + std::min<size_t>(a.offset, all.size()));
    EXPECT_EQ(got.total, total);
    EXPECT_EQ(got.hits, all);
    checked += got.hits.size();
  }
  EXPECT_GT(checked, 100u);
}

TEST(fleet_test, a_remote_failing_in_phase_one_or_two_makes_the_result_partial) {
  // Verifies a remote that fails phase 1 (then is not asked in phase 2) or phase 2 is counted
  // as not answered: partial, answered/total counts, and the total of the slots that answered.
  fleet_fixture f(generated(900, 3), 2, {2, 2});
  remote_query q(f.remotes());
  query_args a;
  a.query = "the";
  a.sort = sort_order::date;
  a.limit = 50;
  // the union total minus what remote 1 holds
  remote_query full(f.remotes());
  f.fan_out(full, a);
  const uint64_t everything = f.gateway->search(a, *f.gs, &full)->total;
  auto s1 = f.nodes[1]->make_scratch();
  const uint64_t on_remote1 = f.nodes[1]->search(a, *s1)->total;

  for (int phase : {1, 2}) {
    SCOPED_TRACE(phase);
    if (phase == 1) {
      f.fan_out(q, a, {1});
      EXPECT_FALSE(q.df_ok(1));
    } else {
      f.fan_out(q, a, {}, {1});
      EXPECT_TRUE(q.df_ok(1));
    }
    EXPECT_TRUE(q.df_ok(0));
    auto r = f.gateway->search(a, *f.gs, &q);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->partial());
    EXPECT_EQ(r->answered, 3u);
    EXPECT_EQ(r->shards, 4u);
    EXPECT_EQ(r->total, everything - on_remote1);
    for (const hit& h : r->stories) {
      EXPECT_EQ(std::find(f.ids_of[2].begin(), f.ids_of[2].end(), h.id), f.ids_of[2].end());
    }
    out_buffer out;
    ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, out, false, &q).has_value());
    EXPECT_NE(out.view().find(R"(,"partial":true,"shards":{"answered":3,"total":4}})"),
              std::string_view::npos);
  }
}

TEST(fleet_test, no_remote_query_counts_remote_slots_as_not_answered) {
  // Verifies a gateway searching without a fan-out reports its remote slots as not answered,
  // and one fanned out for other arguments is not used.
  fleet_fixture f(generated(600, 9), 2, {1, 1});
  query_args a;
  a.query = "the";
  auto r = f.gateway->search(a, *f.gs);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->answered, 2u);
  EXPECT_EQ(r->shards, 4u);
  remote_query q(f.remotes());
  f.fan_out(q, a);
  query_args other = a;
  other.limit = 11;
  EXPECT_FALSE(q.matches(other));
  r = f.gateway->search(other, *f.gs, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->answered, 2u);
}

TEST(fleet_test, unavailable_when_no_slot_answered) {
  // Verifies a gateway with no local shards is unavailable, never empty, when every remote
  // failed (in either phase) or no fan-out was made; one remote answering is enough.
  fleet_fixture f(generated(600, 4), 0, {2, 1});
  EXPECT_EQ(f.gateway->local_count(), 0u);
  EXPECT_EQ(f.gateway->shard_count(), 2u);
  query_args a;
  a.query = "the";
  auto r = f.gateway->search(a, *f.gs);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);
  remote_query q(f.remotes());
  f.fan_out(q, a, {0, 1});
  r = f.gateway->search(a, *f.gs, &q);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);
  f.fan_out(q, a, {}, {0, 1});
  r = f.gateway->search(a, *f.gs, &q);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);
  out_buffer out;
  EXPECT_FALSE(f.gateway->search_stories(a, *f.gs, out, true, &q).has_value());
  EXPECT_TRUE(out.empty());
  // a query nothing matches is still an answer (total 0), not an outage
  f.fan_out(q, a, {0});
  r = f.gateway->search(a, *f.gs, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->answered, 1u);
  EXPECT_TRUE(r->partial());
  query_args none;
  none.query = "zzzznotaword";
  f.fan_out(q, none);
  r = f.gateway->search(none, *f.gs, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->total, 0u);
  EXPECT_FALSE(r->partial());
}

TEST(fleet_test, find_story_local_remote_not_found_unavailable) {
  // Verifies get_story on a gateway: local ids need no remote; remote ids render the remote's
  // bytes (equal to a single node's); unknown ids are not_found only when every remote said so.
  fleet_fixture f(generated(600, 8), 2, {2, 1});
  remote_query q(f.remotes());
  const std::string local_id = f.ids_of[0][5];
  const std::string remote_id = f.ids_of[1][7];  // on remote 0
  auto r = f.gateway->find_story(local_id);
  ASSERT_TRUE(r.has_value());
  EXPECT_LT(r->shard, 2u);
  // not local, no fan-out: unavailable
  r = f.gateway->find_story(remote_id);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);

  f.fan_out_story(q, remote_id);
  r = f.gateway->find_story(remote_id, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->shard, 2u);  // slot L + 0
  for (bool nested : {false, true}) {
    out_buffer mine, ref;
    ASSERT_TRUE(f.gateway->get_story(remote_id, mine, nested, &q).has_value());
    ASSERT_TRUE(f.all->get_story(remote_id, ref, nested).has_value());
    EXPECT_EQ(mine.view(), ref.view());
  }
  // the fan-out was for another id: not used
  r = f.gateway->find_story(f.ids_of[2][0], &q);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);

  f.fan_out_story(q, "no-such-id");
  r = f.gateway->find_story("no-such-id", &q);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::not_found);

  f.fan_out_story(q, "no-such-id", {1});
  r = f.gateway->find_story("no-such-id", &q);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);

  f.fan_out_story(q, remote_id, {0});  // its node failed
  r = f.gateway->find_story(remote_id, &q);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);

  f.fan_out_story(q, remote_id, {1});  // another node failed: still found
  EXPECT_TRUE(f.gateway->find_story(remote_id, &q).has_value());
}

TEST(fleet_test, story_ids_with_reserved_characters) {
  // Verifies write_story_path() escapes every reserved byte, and that the node finds an id with
  // such bytes from the decoded path; escapes are not decoded a second time.
  std::vector<mini_story> stories = {
      {"a b/c?d%e", "Odd id", "text"}, {"42", "Plain", "text"}, {"4%2", "Percent", "text"}};
  auto node = make_backend(stories, 2);
  auto s = node->make_scratch();
  out_buffer path, out, ref, none;
  fleet_wire::write_story_path("a b/c?d%e\\x\xc3\xa9", path);
  EXPECT_EQ(path.view(), "/fleet/v1/stories/a%20b%2Fc%3Fd%25e%5Cx%C3%A9");
  path.clear();
  fleet_wire::write_story_path("Az09-._~", path);
  EXPECT_EQ(path.view(), "/fleet/v1/stories/Az09-._~");
  EXPECT_EQ(serve_fleet_request(*node, *s, "GET", "/fleet/v1/stories/a b/c?d%e", padded(none), out),
            200);
  ASSERT_TRUE(node->get_story("a b/c?d%e", ref, false).has_value());
  EXPECT_EQ(out.view(), ref.view());
  out.clear();
  EXPECT_EQ(serve_fleet_request(*node, *s, "GET", "/fleet/v1/stories/42", padded(none), out), 200);
  out.clear();
  EXPECT_EQ(serve_fleet_request(*node, *s, "GET", "/fleet/v1/stories/4%2", padded(none), out), 200);
  EXPECT_NE(out.view().find("Percent"), std::string_view::npos);
  out.clear();
  EXPECT_EQ(serve_fleet_request(*node, *s, "GET", "/fleet/v1/stories/", padded(none), out), 404);
  out.clear();
  EXPECT_EQ(serve_fleet_request(*node, *s, "GET", "/fleet/v1/stories/43", padded(none), out), 404);
  EXPECT_EQ(out.view(), R"({"code":"not_found"})");
}

// Decodes the text of a nested render (the inside of a JSON string) to its raw bytes.
std::string unescape(std::string_view nested) {
  std::string quoted = "\"" + std::string(nested) + "\"";
  simdjson::dom::parser p;
  simdjson::padded_string ps(quoted);
  std::string_view s;
  EXPECT_FALSE(p.parse(ps).get_string().get(s));
  return std::string(s);
}

TEST(fleet_test, nested_and_raw_renders_of_remote_hits_agree) {
  // Verifies the MCP (nested) render of a result with remote hits unescapes to the REST (raw)
  // bytes, with quotes, backslashes, control characters and non-ASCII text in the stories.
  std::vector<mini_story> stories;
  for (int i = 0; i < 40; ++i) {
    stories.push_back({std::to_string(i),
                       "Quotes \"and\" back\\slash rust " + std::to_string(i),
                       "line one\nline two\ttab \x01 ctrl — ünïcødé 東京 rust",
                       1600000000 + i,
                       {"c++", "say \"hi\""}});
  }
  fleet_fixture f(to_jsonl(stories), 1, {1, 2});
  remote_query q(f.remotes());
  query_args a;
  a.query = "rust";
  a.limit = 50;
  f.fan_out(q, a);
  out_buffer raw, nested, ref;
  ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, raw, false, &q).has_value());
  ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, nested, true, &q).has_value());
  EXPECT_EQ(unescape(nested.view()), std::string(raw.view()));
  auto us = f.all->make_scratch();
  a.sort = sort_order::date;
  f.fan_out(q, a);
  raw.clear();
  nested.clear();
  ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, raw, false, &q).has_value());
  ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, nested, true, &q).has_value());
  ASSERT_TRUE(f.all->search_stories(a, *us, ref, true).has_value());
  EXPECT_EQ(nested.view(), ref.view());
  EXPECT_EQ(unescape(nested.view()), std::string(raw.view()));
  // a story fetched whole, too
  f.fan_out_story(q, "3");
  raw.clear();
  nested.clear();
  ASSERT_TRUE(f.gateway->get_story("3", raw, false, &q).has_value());
  ASSERT_TRUE(f.gateway->get_story("3", nested, true, &q).has_value());
  EXPECT_EQ(unescape(nested.view()), std::string(raw.view()));
}

TEST(fleet_test, steady_state_fan_out_allocates_nothing) {
  // Verifies a warmed-up gateway core (remote_query reuse, search, render, story) and shard node
  // (df, search, story requests) allocate nothing per query.
  fleet_fixture f(generated(800, 2), 2, {2, 1});
  remote_query q(f.remotes());
  out_buffer out;
  out.reserve(1 << 20);
  const std::vector<query_args> queries = sample_queries();
  const std::string remote_id = f.ids_of[1][3];
  auto run = [&] {
    for (const query_args& a : queries) {
      f.fan_out(q, a);
      out.clear();
      ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, out, true, &q).has_value());
      out.clear();
      ASSERT_TRUE(f.gateway->search_stories(a, *f.gs, out, false, &q).has_value());
    }
    f.fan_out_story(q, remote_id);
    out.clear();
    ASSERT_TRUE(f.gateway->get_story(remote_id, out, true, &q).has_value());
  };
  run();
  run();
  test::alloc_scope scope;
  run();
  EXPECT_EQ(scope.count(), 0u);
}

}  // namespace
}  // namespace tollgate::search
