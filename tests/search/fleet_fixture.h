// The fleet tests' shared fixture: one corpus split over a gateway and in-process "remote" nodes
// (answering through serve_fleet_request(), bodies moved by hand as the app's fleet client moves
// them over HTTP), a single backend over the whole as the reference, and sample queries.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "search/fleet_impl.h"
#include "search/test_corpus.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/fleet.h"

namespace tollgate::search::test_support {

// A body followed by 64 readable bytes (simdjson padding), as the HTTP layer hands them over.
inline std::string_view padded(out_buffer& b) {
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

inline std::vector<mini_story> small_corpus_for_fleet() {
  return {
      {"1", "Rust compiler news", "the borrow checker got faster this year"},
      {"2", "Go and Rust compared", "the rust compiler story"},
      {"3", "Databases", "postgres and sqlite compared"},
  };
}

inline std::string generated(uint64_t count, uint64_t seed) {
  std::string s;
  generate_corpus(count, seed, [&s](std::string_view c) { s.append(c); });
  return s;
}

struct page {
  uint64_t total = 0;
  std::vector<std::pair<std::string, double>> hits;
  uint32_t answered = 0, shards = 0;
};

inline page page_of(const result<search_result, errc>& r) {
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

inline std::vector<query_args> sample_queries() {
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

}  // namespace tollgate::search::test_support
