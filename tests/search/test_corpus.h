// Helpers for search tests: build a backend from hand-written stories.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/search/backend.h"

namespace tollgate::search::test_support {

struct mini_story {
  std::string id;
  std::string title;
  std::string text;
  int64_t time = 1600000000;
  std::vector<std::string> tags = {};
};

inline std::string to_jsonl(const std::vector<mini_story>& stories) {
  out_buffer b;
  json_out j(b, false);
  for (const mini_story& s : stories) {
    j.raw("{\"id\":");
    j.string(s.id);
    j.raw(",\"title\":");
    j.string(s.title);
    j.raw(",\"url\":\"https://example.com/");
    j.raw(s.id);
    j.raw("\",\"by\":\"alice\",\"time\":");
    j.number(s.time);
    j.raw(",\"score\":");
    j.number(static_cast<int64_t>(s.id.size()));
    j.raw(",\"comments\":0,\"tags\":[");
    for (size_t i = 0; i < s.tags.size(); ++i) {
      j.raw(i ? "," : "");
      j.string(s.tags[i]);
    }
    j.raw("],\"text\":");
    j.string(s.text);
    j.raw("}\n");
  }
  return std::string(b.view());
}

inline std::unique_ptr<backend> make_backend(const std::vector<mini_story>& stories,
                                             uint32_t shards = 3) {
  load_options o;
  o.shards = shards;
  o.skip_bad_lines = false;
  load_report rep;
  auto b = load_jsonl(to_jsonl(stories), o, rep);
  EXPECT_TRUE(b.has_value());
  return b ? std::move(*b) : nullptr;
}

/// Ids of the page for `query` (with optional tweaks applied to the args).
template <class Tweak>
std::vector<std::string> ids_for(const backend& b, std::string_view query, Tweak&& tweak,
                                 uint64_t* total = nullptr) {
  query_args a;
  a.query = query;
  a.limit = 50;
  tweak(a);
  auto s = b.make_scratch();
  auto r = b.search(a, *s);
  EXPECT_TRUE(r.has_value());
  std::vector<std::string> ids;
  if (!r) {
    return ids;
  }
  for (const hit& h : r->stories) {
    ids.emplace_back(h.id);
  }
  if (total) {
    *total = r->total;
  }
  return ids;
}

inline std::vector<std::string> ids_for(const backend& b, std::string_view query,
                                        uint64_t* total = nullptr) {
  return ids_for(
      b, query, [](query_args&) {}, total);
}

using ids = std::vector<std::string>;

}  // namespace tollgate::search::test_support
