// A shard node's answers to the fleet requests (shard_node.cc): malformed bodies refused.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <vector>

#include "search/fleet_fixture.h"
#include "search/fleet_impl.h"
#include "search/test_corpus.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/fleet.h"

namespace tollgate::search {
namespace {

using namespace test_support;

// Over 80 lines on purpose: one table of malformed bodies per fleet request (df, search).
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

}  // namespace
}  // namespace tollgate::search
