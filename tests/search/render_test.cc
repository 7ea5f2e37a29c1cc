#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>

#include "search/local_shard.h"
#include "search/test_corpus.h"
#include "tollgate/search/backend.h"

namespace tollgate::search {
namespace {

using namespace test_support;

std::string escape(std::string_view raw) {
  out_buffer b;
  append_json_escaped(b, raw);
  return std::string(b.view());
}

bool valid_json(std::string_view s) {
  simdjson::dom::parser p;
  simdjson::padded_string ps(s);
  simdjson::dom::element e;
  return !p.parse(ps).get(e);
}

std::vector<mini_story> tricky() {
  return {
      {"1",
       "Quotes \"and\" back\\slashes",
       "line one\nline two\ttab \x01 ctrl — ünïcødé 東京",
       1600000000,
       {"c++", "say \"hi\""}},
      {"2", "Plain rust story", "rust text", 1600000001, {}},
  };
}

TEST(render_test, search_payload_shape) {
  // Verifies the search payload is
  // {"total":N,"stories":[{id,title,url,by,time,score,comments,tags}]}.
  auto b = make_backend({{"7", "Hello rust", "body", 1234, {"lang"}}}, 2);
  auto s = b->make_scratch();
  query_args a;
  a.query = "rust";
  out_buffer out;
  ASSERT_TRUE(b->search_stories(a, *s, out, false).has_value());
  EXPECT_EQ(out.view(),
            R"({"total":1,"stories":[{"id":"7","title":"Hello rust","url":"https://example.com/7",)"
            R"("by":"alice","time":1234,"score":1,"comments":0,"tags":["lang"]}]})");
}

TEST(render_test, get_story_payload_includes_text) {
  // Verifies get_story renders the story with its text field last.
  auto b = make_backend({{"7", "Hello", "the body", 1234, {}}}, 2);
  out_buffer out;
  ASSERT_TRUE(b->get_story("7", out, false).has_value());
  EXPECT_EQ(out.view(),
            R"({"id":"7","title":"Hello","url":"https://example.com/7","by":"alice","time":1234,)"
            R"("score":1,"comments":0,"tags":[],"text":"the body"})");
}

TEST(render_test, unknown_id_is_not_found) {
  // Verifies an unknown id yields not_found and writes nothing.
  auto b = make_backend(tricky(), 3);
  out_buffer out;
  auto r = b->get_story("999", out, false);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::not_found);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(code(errc::not_found), "not_found");
}

TEST(render_test, nested_is_escaped_raw_for_search_and_get) {
  // Verifies the MCP (nested) bytes equal the REST (raw) bytes escaped once, and raw is JSON.
  auto b = make_backend(tricky(), 2);
  auto s = b->make_scratch();
  query_args a;
  a.query = "line";
  out_buffer raw, nested;
  ASSERT_TRUE(b->search_stories(a, *s, raw, false).has_value());
  ASSERT_TRUE(b->search_stories(a, *s, nested, true).has_value());
  EXPECT_TRUE(valid_json(raw.view())) << raw.view();
  EXPECT_EQ(nested.view(), escape(raw.view()));
  EXPECT_NE(raw.view().find("\"total\":1"), std::string_view::npos);

  out_buffer sraw, snested;
  ASSERT_TRUE(b->get_story("1", sraw, false).has_value());
  ASSERT_TRUE(b->get_story("1", snested, true).has_value());
  EXPECT_TRUE(valid_json(sraw.view())) << sraw.view();
  EXPECT_EQ(snested.view(), escape(sraw.view()));
}

TEST(render_test, every_field_escaped_and_nested_unescapes_to_raw) {
  // Verifies stories whose id, title, url, by, tags and text hold quotes, backslashes, control
  // characters and non-ASCII render as JSON giving back the stored values, and that the nested
  // (MCP) form, read as a JSON string, is exactly the raw (REST) form, for search and get_story.
  const std::string jsonl =
      R"({"id":"q\"1\\","title":"T \"q\" \\ \u0001 \u00e9 rust","url":"https://x/\"u\\",)"
      R"("by":"b\"y\\\t","time":-5,"score":-3,"comments":1234567890123,)"
      R"("tags":["a\\b","\u001f","東京","plain"],"text":"rust \"t\" \\ \n\u0002 東京"})"
      "\n"
      R"({"id":"p2","title":"Plain rust","url":"https://e.com/p","by":"bob","time":7,)"
      R"("score":1,"comments":0,"tags":[],"text":"rust"})"
      "\n";
  load_options o;
  o.shards = 2;
  load_report rep;
  auto b = load_jsonl(jsonl, o, rep);
  ASSERT_TRUE(b.has_value());
  auto unnest = [](std::string_view nested) {
    simdjson::dom::parser p;
    simdjson::padded_string ps("\"" + std::string(nested) + "\"");
    std::string_view v;
    EXPECT_FALSE(p.parse(ps).get(v)) << nested;
    return std::string(v);
  };
  auto s = (*b)->make_scratch();
  query_args a;
  a.query = "rust";
  out_buffer raw, nested;
  ASSERT_TRUE((*b)->search_stories(a, *s, raw, false).has_value());
  ASSERT_TRUE((*b)->search_stories(a, *s, nested, true).has_value());
  EXPECT_EQ(unnest(nested.view()), raw.view());

  simdjson::dom::parser p;
  simdjson::padded_string ps(raw.view());
  simdjson::dom::element root;
  ASSERT_FALSE(p.parse(ps).get(root)) << raw.view();
  auto str = [](simdjson::dom::element e, const char* key) {
    std::string_view v;
    EXPECT_FALSE(e[key].get(v)) << key;
    return std::string(v);
  };
  auto num = [](simdjson::dom::element e, const char* key) {
    int64_t v = 0;
    EXPECT_FALSE(e[key].get(v)) << key;
    return v;
  };
  simdjson::dom::array stories;
  ASSERT_FALSE(root["stories"].get(stories));
  bool seen = false;
  for (simdjson::dom::element st : stories) {
    if (str(st, "id") != "q\"1\\") {
      continue;
    }
    seen = true;
    EXPECT_EQ(str(st, "title"), "T \"q\" \\ \x01 \xc3\xa9 rust");
    EXPECT_EQ(str(st, "url"), "https://x/\"u\\");
    EXPECT_EQ(str(st, "by"), "b\"y\\\t");
    EXPECT_EQ(num(st, "time"), -5);
    EXPECT_EQ(num(st, "comments"), 1234567890123);
    simdjson::dom::array tag_array;
    ASSERT_FALSE(st["tags"].get(tag_array));
    std::vector<std::string> tags;
    for (simdjson::dom::element t : tag_array) {
      std::string_view v;
      EXPECT_FALSE(t.get(v));
      tags.emplace_back(v);
    }
    EXPECT_EQ(tags, (std::vector<std::string>{"a\\b", "\x1f", "東京", "plain"}));
  }
  EXPECT_TRUE(seen) << raw.view();

  out_buffer sraw, snested;
  ASSERT_TRUE((*b)->get_story("q\"1\\", sraw, false).has_value());
  ASSERT_TRUE((*b)->get_story("q\"1\\", snested, true).has_value());
  EXPECT_EQ(unnest(snested.view()), sraw.view());
  simdjson::padded_string ps2(sraw.view());
  ASSERT_FALSE(p.parse(ps2).get(root)) << sraw.view();
  EXPECT_EQ(str(root, "text"), "rust \"t\" \\ \n\x02 東京");
}

// A shard that forwards to a real one, or fails every call while `down` is set.
class flaky_shard final : public shard_source {
 public:
  flaky_shard(std::unique_ptr<shard_source> inner, const bool* down)
      : inner_(std::move(inner)), down_(down) {}
  shard_stats stats() const override { return inner_->stats(); }
  void finalize(const shard_stats& g) override { inner_->finalize(g); }
  bool add_doc_freqs(const query_plan& p, shard_workspace& ws, uint64_t* df) const override {
    return !*down_ && inner_->add_doc_freqs(p, ws, df);
  }
  bool search(const query_plan& p, shard_workspace& ws, shard_answer& out) const override {
    return !*down_ && inner_->search(p, ws, out);
  }
  result<uint32_t, errc> find(std::string_view id) const override {
    if (*down_) {
      return unexpected(errc::unavailable);
    }
    return inner_->find(id);
  }
  result<void, errc> render_story(uint32_t doc, bool t, json_out& out,
                                  pending_read* nowait) const override {
    return inner_->render_story(doc, t, out, nowait);
  }

 private:
  std::unique_ptr<shard_source> inner_;
  const bool* down_;
};

struct fleet {
  bool down[4] = {false, false, false, false};
  std::unique_ptr<backend> b;
  fleet() {
    std::vector<mini_story> c;
    for (int i = 0; i < 40; ++i) {
      c.push_back({std::to_string(i + 1), "fleet story", "text", 1000 + i});
    }
    load_options o;
    o.shards = 4;
    load_report rep;
    auto shards = build_shards(to_jsonl(c), o, rep);
    EXPECT_TRUE(shards.has_value());
    std::vector<std::unique_ptr<shard_source>> wrapped;
    for (size_t i = 0; i < shards->size(); ++i) {
      wrapped.push_back(std::make_unique<flaky_shard>(std::move((*shards)[i]), &down[i]));
    }
    b = std::make_unique<backend>(std::move(wrapped));
  }
};

TEST(render_test, partial_answer_is_reported_in_the_payload) {
  // Verifies one failing shard gives "partial":true and shards answered/total, with the total
  // counting only the shards that answered.
  fleet f;
  auto s = f.b->make_scratch();
  query_args a;
  a.query = "fleet";
  a.limit = 50;
  auto full = f.b->search(a, *s);
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->total, 40u);
  EXPECT_FALSE(full->partial());

  f.down[2] = true;
  out_buffer out;
  ASSERT_TRUE(f.b->search_stories(a, *s, out, false).has_value());
  std::string body(out.view());
  EXPECT_NE(body.find(",\"partial\":true,\"shards\":{\"answered\":3,\"total\":4}}"),
            std::string::npos)
      << body;
  EXPECT_TRUE(valid_json(body));
  auto part = f.b->search(a, *s);
  ASSERT_TRUE(part.has_value());
  EXPECT_LT(part->total, 40u);
  EXPECT_EQ(part->stories.size(), part->total);
}

TEST(render_test, no_shard_answering_is_unavailable_not_empty) {
  // Verifies all shards failing yields errc::unavailable and writes nothing.
  fleet f;
  for (bool& d : f.down) {
    d = true;
  }
  auto s = f.b->make_scratch();
  query_args a;
  a.query = "fleet";
  out_buffer out;
  auto r = f.b->search_stories(a, *s, out, true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);
  EXPECT_TRUE(out.empty());
  // a query that matches nothing is still unavailable, never an empty result
  a.query = "zzzz";
  EXPECT_FALSE(f.b->search(a, *s).has_value());
}

TEST(render_test, get_story_on_a_down_shard_is_unavailable) {
  // Verifies get_story reports unavailable when the story's shard does not answer.
  fleet f;
  uint32_t slot = shard_of("5", 4);
  f.down[slot] = true;
  out_buffer out;
  auto r = f.b->get_story("5", out, false);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unavailable);
  f.down[slot] = false;
  EXPECT_TRUE(f.b->get_story("5", out, false).has_value());
}

}  // namespace
}  // namespace tollgate::search
