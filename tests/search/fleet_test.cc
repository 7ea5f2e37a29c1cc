// Remote shards without sockets: a gateway backend (L local slots + R remote slots) whose
// "remotes" are other backends answering through serve_fleet_request() in-process; the bodies
// go back and forth by hand, as the app's fleet client moves them over HTTP.
#include "tollgate/search/fleet.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "search/fleet_impl.h"
#include "search/test_corpus.h"
#include "support/alloc_counter.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

using namespace test_support;

// A body followed by 64 readable bytes (simdjson padding), as the HTTP layer hands them over.
std::string_view padded(out_buffer& b) {
  b.reserve(b.size() + simdjson::SIMDJSON_PADDING);
  return b.view();
}

// One corpus split over a gateway (slice 0) and remote nodes (slices 1..R), plus a single
// backend over the whole (the union) as the reference.
struct fleet_fixture {
  std::unique_ptr<backend> all;
  std::unique_ptr<backend> gateway;
  std::vector<std::unique_ptr<backend>> nodes;
  std::vector<std::unique_ptr<scratch>> node_scratch;
  std::unique_ptr<scratch> gs;
  std::vector<std::string> slices;
  std::vector<std::string> ids;  // every id, by slice: ids_of[slice]
  std::vector<std::vector<std::string>> ids_of;

  // local: the gateway's shard count (0: a gateway with only remotes; its slice then is empty)
  fleet_fixture(std::string_view jsonl, uint32_t local, std::vector<uint32_t> node_shards) {
    const uint32_t parts = static_cast<uint32_t>(node_shards.size()) + 1;
    slices.assign(parts, {});
    ids_of.assign(parts, {});
    simdjson::dom::parser p;
    while (!jsonl.empty()) {
      size_t nl = jsonl.find('\n');
      std::string_view line = jsonl.substr(0, nl);
      jsonl = nl == std::string_view::npos ? std::string_view() : jsonl.substr(nl + 1);
      if (line.empty()) {
        continue;
      }
      simdjson::padded_string ps(line);
      std::string_view id;
      EXPECT_FALSE(p.parse(ps)["id"].get_string().get(id));
      uint32_t part = shard_of(id, local == 0 ? parts - 1 : parts) + (local == 0 ? 1 : 0);
      slices[part].append(line);
      slices[part].push_back('\n');
      ids_of[part].emplace_back(id);
      ids.emplace_back(id);
    }
    load_options o;
    o.shards = 4;
    o.skip_bad_lines = false;
    o.threads = 1;
    load_report rep;
    std::string whole;
    for (const std::string& s : slices) {
      whole += s;
    }
    all = load_jsonl(whole, o, rep).value();
    if (local > 0) {
      o.shards = local;
      auto shards = build_shards(slices[0], o, rep);
      EXPECT_TRUE(shards.has_value());
      gateway =
          std::make_unique<backend>(std::move(*shards), static_cast<uint32_t>(node_shards.size()));
    } else {
      gateway = std::make_unique<backend>(std::vector<std::unique_ptr<shard_source>>{},
                                          static_cast<uint32_t>(node_shards.size()));
    }
    for (size_t r = 0; r < node_shards.size(); ++r) {
      o.shards = node_shards[r];
      nodes.push_back(load_jsonl(slices[r + 1], o, rep).value());
      node_scratch.push_back(nodes.back()->make_scratch());
    }
    gs = gateway->make_scratch();
  }

  uint32_t remotes() const { return static_cast<uint32_t>(nodes.size()); }

  // Runs a node's side of a request: returns its status, its body in `resp` (padded).
  int serve(uint32_t r, std::string_view method, std::string_view path, out_buffer& req,
            out_buffer& resp) {
    resp.clear();
    return serve_fleet_request(*nodes[r], *node_scratch[r], method, path, padded(req), resp);
  }

  // Both phases of a search; remotes in fail1 / fail2 fail (status 0) in that phase.
  void fan_out(remote_query& q, const query_args& a, std::vector<uint32_t> fail1 = {},
               std::vector<uint32_t> fail2 = {}) {
    auto failing = [](const std::vector<uint32_t>& v, uint32_t r) {
      return std::find(v.begin(), v.end(), r) != v.end();
    };
    q.start_search(*gateway, a);
    req_.clear();
    q.write_df_body(req_);
    for (uint32_t r = 0; r < remotes(); ++r) {
      if (failing(fail1, r)) {
        EXPECT_FALSE(q.on_df(r, 0, {}));
        continue;
      }
      int st = serve(r, "POST", fleet_wire::df_path, req_, resp_);
      EXPECT_EQ(st, 200) << resp_.view();
      EXPECT_TRUE(q.on_df(r, st, padded(resp_)));
    }
    q.finish_df();
    req_.clear();
    q.write_search_body(req_);
    for (uint32_t r = 0; r < remotes(); ++r) {
      if (!q.df_ok(r) || failing(fail2, r)) {
        EXPECT_FALSE(q.on_search(r, 0, {}));
        continue;
      }
      int st = serve(r, "POST", fleet_wire::search_path, req_, resp_);
      EXPECT_EQ(st, 200) << resp_.view();
      EXPECT_TRUE(q.on_search(r, st, padded(resp_))) << resp_.view();
    }
  }

  // One round trip: skip_df() instead of phase 1 (only for queries with !needs_df()).
  void fan_out_skipping_df(remote_query& q, const query_args& a) {
    q.start_search(*gateway, a);
    EXPECT_FALSE(q.needs_df());
    q.skip_df();
    req_.clear();
    q.write_search_body(req_);
    for (uint32_t r = 0; r < remotes(); ++r) {
      ASSERT_TRUE(q.df_ok(r));
      int st = serve(r, "POST", fleet_wire::search_path, req_, resp_);
      EXPECT_EQ(st, 200) << resp_.view();
      EXPECT_TRUE(q.on_search(r, st, padded(resp_))) << resp_.view();
    }
  }

  // A story look-up on every remote; remotes in fail answer 503.
  void fan_out_story(remote_query& q, std::string_view id, std::vector<uint32_t> fail = {}) {
    q.start_story(id);
    // as the node's HTTP side hands it over: decoded
    out_buffer& path = path_;
    path.clear();
    path.append(fleet_wire::story_prefix);
    path.append(id);
    for (uint32_t r = 0; r < remotes(); ++r) {
      if (std::find(fail.begin(), fail.end(), r) != fail.end()) {
        EXPECT_FALSE(q.on_story(r, 503, "{}"));
        continue;
      }
      req_.clear();
      int st = serve(r, "GET", path.view(), req_, resp_);
      EXPECT_TRUE(st == 200 || st == 404) << st;
      EXPECT_TRUE(q.on_story(r, st, padded(resp_)));
    }
  }

  out_buffer req_, resp_, path_;
};

std::vector<mini_story> small_corpus_for_fleet() {
  return {
      {"1", "Rust compiler news", "the borrow checker got faster this year"},
      {"2", "Go and Rust compared", "the rust compiler story"},
      {"3", "Databases", "postgres and sqlite compared"},
  };
}

std::string generated(uint64_t count, uint64_t seed) {
  std::string s;
  generate_corpus(count, seed, [&s](std::string_view c) { s.append(c); });
  return s;
}

struct page {
  uint64_t total = 0;
  std::vector<std::pair<std::string, double>> hits;
  uint32_t answered = 0, shards = 0;
};

page page_of(const result<search_result, errc>& r) {
  page p;
  EXPECT_TRUE(r.has_value());
  if (!r) {
    return p;
  }
  p.total = r->total;
  p.answered = r->answered;
  p.shards = r->shards;
  for (const hit& h : r->stories) {
    p.hits.emplace_back(std::string(h.id), h.key);
  }
  return p;
}

// A query planned as the backend plans it (plan_terms), with its own storage.
struct planned {
  out_buffer chars;
  std::vector<std::string_view> terms;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  std::vector<uint8_t> alone;
  explicit planned(std::string_view query) {
    plan_terms(query, chars, terms, phrases, phrase_terms, alone);
  }
};

std::vector<query_args> sample_queries() {
  std::vector<query_args> v;
  auto add = [&v](std::string_view q, sort_order so, uint32_t offset,
                  uint32_t limit) -> query_args& {
    query_args a;
    a.query = q;
    a.sort = so;
    a.offset = offset;
    a.limit = limit;
    v.push_back(a);
    return v.back();
  };
  for (sort_order so : {sort_order::relevance, sort_order::date}) {
    add("the", so, 0, 10);
    add("the", so, 37, 50);
    add("rust", so, 0, 20);
    add("linux kernel", so, 0, 50);
    add("the and of", so, 5, 10);
    add("\"of the\"", so, 0, 25);
    add("rust \"of the\"", so, 0, 25);
    add("\"of the\" \"in a\" linux", so, 0, 25);
    add("the the linux", so, 0, 25);
    add("python", so, 1000, 50);
    add("the", so, 0, 50).since = 1600000000;
    add("of", so, 3, 7).until = 1600000000;
    add("a", so, 0, 50).add_tag("rust");
    add("zzzznotaword", so, 0, 10);
  }
  return v;
}

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

TEST(fleet_test, global_idf_equals_the_union_backends) {
  // Verifies the idf a gateway sends in phase 2 is bit-identical to the idf a single node over
  // the union corpus computes from its own document frequencies.
  fleet_fixture f(generated(1200, 5), 2, {2, 2});
  remote_query q(f.remotes());
  remote_query whole(0);
  for (const query_args& a : sample_queries()) {
    f.fan_out(q, a);
    whole.start_search(*f.all, a);
    whole.finish_df();
    ASSERT_EQ(q.idf().size(), whole.idf().size());
    for (size_t i = 0; i < q.idf().size(); ++i) {
      EXPECT_EQ(q.idf()[i], whole.idf()[i]) << a.query << " term " << i;
    }
    ASSERT_EQ(q.phrase_idf().size(), whole.phrase_idf().size());
    for (size_t i = 0; i < q.phrase_idf().size(); ++i) {
      EXPECT_EQ(q.phrase_idf()[i], whole.phrase_idf()[i]) << a.query << " phrase " << i;
    }
    EXPECT_EQ(q.avgdl(), whole.avgdl()) << a.query;
    EXPECT_EQ(q.avgdl(), average_length(f.all->local_stats()));
    // and that is FTS5's formula over the union's frequencies (0 for a phrase-only term)
    auto s = f.all->make_scratch();
    query_plan dp{};
    dp.terms = q.terms();
    std::vector<uint64_t> df(q.terms().size(), 0);
    ASSERT_TRUE(f.all->add_local_doc_freqs(dp, *s, df.data()));
    const planned pl(a.query);
    for (size_t i = 0; i < df.size(); ++i) {
      const double n = static_cast<double>(f.all->story_count());
      const double d = static_cast<double>(df[i]);
      const double idf = std::log((n - d + 0.5) / (d + 0.5));
      EXPECT_EQ(q.idf()[i], pl.alone[i] * std::max(idf, 1e-6)) << a.query;
    }
  }
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
    plan.k = std::min(a.offset + a.limit, max_k);
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

TEST(fleet_test, shard_node_rejects_malformed_bodies) {
  // Verifies the shard node answers 400 (with a JSON error body) to every malformed df and
  // search body of a table, and never crashes.
  auto node = make_backend(small_corpus_for_fleet(), 2);
  auto s = node->make_scratch();
  const std::vector<std::string> bad_df = {
      "",
      "nul",
      "[]",
      "{}",
      "{\"terms\":\"rust\"}",
      "{\"terms\":[1]}",
      "{\"terms\":[\"\"]}",
      "{\"terms\":[\"a\"],\"terms\":[\"b\"]}",
      "{\"terms\":[\"a\"]",
      "{\"terms\":[\"a\"]}x",
      "{\"terms\":[" + std::string(300, 'x') + "]}",
  };
  std::string many = "{\"terms\":[";
  for (int i = 0; i < 257; ++i) {
    many += (i ? ",\"t" : "\"t") + std::to_string(i) + "\"";
  }
  many += "]}";
  std::vector<std::string> bad_dfs = bad_df;
  bad_dfs.push_back(many);
  out_buffer in, out;
  for (const std::string& b : bad_dfs) {
    in.clear();
    in.append(b);
    out.clear();
    EXPECT_EQ(serve_fleet_request(*node, *s, "POST", fleet_wire::df_path, padded(in), out), 400)
        << b;
    EXPECT_NE(out.view().find("invalid_request"), std::string_view::npos);
  }
  const std::string ok =
      R"({"terms":["rust","compiler"],"idf":[1.5,2],"phrases":[[0,2]],"phrase_terms":[0,1],)"
      R"("tags":[],"since":0,"until":2000000000,"sort":"relevance","k":10})";
  in.clear();
  in.append(ok);
  out.clear();
  EXPECT_EQ(serve_fleet_request(*node, *s, "POST", fleet_wire::search_path, padded(in), out), 200)
      << out.view();
  auto with = [&ok](std::string_view from, std::string_view to) {
    std::string b = ok;
    size_t at = b.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return b.replace(at, from.size(), to);
  };
  const std::vector<std::string> bad_search = {
      "",
      "{}",
      "[1]",
      ok.substr(0, ok.size() - 1),
      with("\"idf\":[1.5,2]", "\"idf\":[1.5]"),        // lengths mismatched
      with("\"idf\":[1.5,2]", "\"idf\":[1.5,\"2\"]"),  // wrong type
      with("\"idf\":[1.5,2]", "\"idf\":[1.5,-2]"),     // negative
      with("\"idf\":[1.5,2]", "\"idf\":[1.5,1e999]"),  // not finite
      with("[[0,2]]", "[[1,2]]"),                      // phrase out of range
      with("[[0,2]]", "[[0,1]]"),                      // one-term phrase
      with("[[0,2]]", "[[0]]"),
      with("[[0,2]]", "[[4294967295,2]]"),
      with("[[0,2]]", "[[-1,2]]"),
      with("\"phrase_terms\":[0,1]", "\"phrase_terms\":[0,2]"),  // term index out of range
      with("\"k\":10", "\"k\":1051"),
      with("\"k\":10", "\"k\":0"),
      with("\"k\":10", "\"k\":-1"),
      with("\"k\":10", "\"k\":1.5"),
      with(",\"k\":10", ""),  // missing
      with("\"sort\":\"relevance\"", "\"sort\":\"best\""),
      with("\"sort\":\"relevance\"", "\"sort\":1"),
      with("\"since\":0", "\"since\":\"0\""),
      with("\"until\":2000000000", "\"until\":99999999999999999999"),
      with("\"tags\":[]", "\"tags\":[\"\"]"),
      with("\"tags\":[]", "\"tags\":[1]"),
      with("\"tags\":[]", "\"tags\":{}"),
      with("[\"rust\",\"compiler\"]", "[\"rust\",\"rust\"]"),  // duplicate terms
      with("[\"rust\",\"compiler\"]", "[\"rust\",null]"),
      with("\"k\":10", "\"k\":10,\"k\":11"),
  };
  for (const std::string& b : bad_search) {
    in.clear();
    in.append(b);
    out.clear();
    EXPECT_EQ(serve_fleet_request(*node, *s, "POST", fleet_wire::search_path, padded(in), out), 400)
        << b;
  }
  // wrong method or path
  out.clear();
  EXPECT_EQ(serve_fleet_request(*node, *s, "GET", fleet_wire::df_path, padded(in), out), 404);
  out.clear();
  EXPECT_EQ(serve_fleet_request(*node, *s, "POST", "/fleet/v1/other", padded(in), out), 404);
}

TEST(fleet_test, gateway_rejects_malformed_answers) {
  // Verifies unusable phase 1, phase 2 and story answers (bad status, malformed or inconsistent
  // bodies) return false and leave the remote counted as not answered, without crashing.
  fleet_fixture f(to_jsonl(small_corpus_for_fleet()), 1, {1});
  remote_query q(1);
  query_args a;
  a.query = "rust compiler";
  a.limit = 2;
  auto feed = [](std::string_view body, out_buffer& b) {
    b.clear();
    b.append(body);
    return padded(b);
  };
  out_buffer b;
  const std::vector<std::string> bad_df = {
      "",
      "{}",
      "[]",
      R"({"docs":3,"title_tokens":1,"text_tokens":1})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2,3]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,4]})",
      R"({"docs":-3,"title_tokens":1,"text_tokens":1,"df":[1,2]})",
      R"({"docs":"3","title_tokens":1,"text_tokens":1,"df":[1,2]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2.5]})",
      R"({"docs":3,"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]}])",
      R"({"docs":99999999999999,"title_tokens":1,"text_tokens":1,"df":[1,2]})",
  };
  q.start_search(*f.gateway, a);
  EXPECT_FALSE(q.on_df(0, 0, {}));
  EXPECT_FALSE(
      q.on_df(0, 500, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  for (const std::string& body : bad_df) {
    EXPECT_FALSE(q.on_df(0, 200, feed(body, b))) << body;
  }
  EXPECT_FALSE(
      q.on_df(1, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  EXPECT_TRUE(
      q.on_df(0, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  EXPECT_FALSE(
      q.on_df(0, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  q.finish_df();
  EXPECT_TRUE(q.df_ok(0));
  const std::string good = R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},)"
                           R"({"key":1.5,"id":"9","story":{"id":"9","t":"x"}}]})";
  const std::vector<std::string> bad_search = {
      "",
      "{}",
      "[]",
      R"({"total":2})",
      R"({"hits":[]})",
      R"({"total":-1,"hits":[]})",
      R"({"total":1,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},{"key":1.5,"id":"9","story":{"id":"9"}}]})",
      R"({"total":5,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},{"key":1.5,"id":"9","story":{"id":"9"}},{"key":1,"id":"10","story":{"id":"10"}}]})",
      R"({"total":2,"hits":[{"key":1.5,"id":"8","story":{"id":"8"}},{"key":2.5,"id":"9","story":{"id":"9"}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},{"key":2.5,"id":"8","story":{"id":"8"}}]})",
      R"({"total":2,"hits":[{"key":"2.5","id":"8","story":{"id":"8"}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"","story":{"id":""}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":"{}"}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"7"}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8"}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8",}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8","x":tru}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}}]} x)",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}})",
      R"({"total":2,"hits":{}})",
  };
  for (const std::string& body : bad_search) {
    EXPECT_FALSE(q.on_search(0, 200, feed(body, b))) << body;
  }
  EXPECT_FALSE(q.on_search(0, 503, feed(good, b)));
  auto r = f.gateway->search(a, *f.gs, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->answered, 1u);
  EXPECT_TRUE(r->partial());
  // the well-formed answer is taken (once), with its stories as received
  EXPECT_TRUE(q.on_search(0, 200, feed(good, b)));
  EXPECT_FALSE(q.on_search(0, 200, feed(good, b)));
  b.clear();
  b.append("garbage that overwrites the body buffer");
  r = f.gateway->search(a, *f.gs, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->partial());
  out_buffer out;
  json_out j(out, false);
  f.gateway->render(*r, j);
  EXPECT_NE(out.view().find(R"({"id":"9","t":"x"})"), std::string_view::npos) << out.view();

  // stories: 404 is an answer, anything else is not; a 200 must be the story asked for
  q.start_story("8");
  EXPECT_FALSE(q.on_story(0, 200, feed(R"({"id":"7"})", b)));
  EXPECT_FALSE(q.on_story(0, 200, feed(R"({"id":"8")", b)));
  EXPECT_FALSE(q.on_story(0, 200, feed(R"(["id","8"])", b)));
  EXPECT_FALSE(q.on_story(0, 0, {}));
  EXPECT_FALSE(q.on_df(0, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[]})", b)));
  EXPECT_TRUE(q.on_story(0, 200, feed(R"({"id":"8","title":"x"} )", b)));
  EXPECT_FALSE(q.on_story(0, 404, {}));
  auto s = f.gateway->find_story("8", &q);
  ASSERT_TRUE(s.has_value());
  out.clear();
  ASSERT_TRUE(f.gateway->get_story("8", out, false, &q).has_value());
  EXPECT_EQ(out.view(), R"({"id":"8","title":"x"})");
}

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
