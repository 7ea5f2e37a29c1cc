// endpoint::decide_calls: the tool calls a request holds, as handle_http() would decide them,
// handed back without admitting, running or writing anything (a gateway starts its remote
// queries from them).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mcp/mcp_fixture.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;

// What one decided call said, copied out of the visit (its views end with it).
struct seen_call {
  std::string tool;
  std::string query;
  int64_t limit = 0;
  std::string sort;
  std::vector<std::string> tags;
  bool operator==(const seen_call&) const = default;
};

seen_call copy_of(const tool_def& t, const arguments& a) {
  seen_call c;
  c.tool = t.name;
  if (t.name == "search_stories") {
    c.query = std::string(a[0].str);
    c.limit = a[1].num;
    c.sort = std::string(a[2].str);
    for (size_t i = 0; i < a[3].num_items; ++i) {
      c.tags.emplace_back(a[3].items[i]);
    }
  }
  return c;
}

struct recorder final : call_visitor {
  std::vector<seen_call> calls;
  void on_call(const decided_call& call) override {
    calls.push_back(copy_of(call.tool, call.args));
  }
};

// A search tool that records the arguments handle_http() runs it with.
class recording_search : public fake_search {
 public:
  std::vector<seen_call> runs;
  const tool_def* def = nullptr;
  tool_result call(const arguments& a, json_out& out, call_context& ctx) override {
    runs.push_back(copy_of(*def, a));
    return fake_search::call(a, out, ctx);
  }
};

class decide_calls_test : public ::testing::Test {
 protected:
  std::shared_ptr<recording_search> search = std::make_shared<recording_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  fake_host h;

  decide_calls_test() { search->def = tools.find("search_stories"); }

  // The calls decide_calls() hands back for `c` on a fresh endpoint with `o`.
  std::vector<seen_call> decided(const http_case& c, endpoint_options o = {}) {
    endpoint ep(tools, env, std::move(o));
    std::string padded = c.body + std::string(body_padding, ' ');
    http::request req;
    req.method = c.method;
    req.target = "/mcp";
    req.path = "/mcp";
    for (const auto& kv : c.headers) {
      req.add_header(kv.first, kv.second);
    }
    req.body = std::string_view(padded.data(), c.body.size());
    req.keep_alive = true;
    recorder r;
    ep.decide_calls(req, r);
    return r.calls;
  }
  std::vector<seen_call> decided(const std::string& body) {
    http_case c;
    c.body = body;
    return decided(c);
  }
  static std::string call(const std::string& args, const std::string& id = "1",
                          const std::string& name = "search_stories") {
    return R"({"jsonrpc":"2.0","id":)" + id + R"(,"method":"tools/call","params":{"name":")" +
           name + R"(","arguments":)" + args + "}}";
  }
};

TEST_F(decide_calls_test, a_single_call_is_handed_back_with_its_arguments_and_nothing_runs) {
  // Verifies one tools/call comes back as its tool and validated arguments (defaults filled in),
  // while the host is never asked and the tool never runs.
  auto calls = decided(call(R"({"query":"rust","tags":["a","b"]})"));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (seen_call{"search_stories", "rust", 10, "relevance", {"a", "b"}}));
  EXPECT_EQ(search->calls, 0);
  EXPECT_EQ(h.admits, 0);
  EXPECT_EQ(h.header_calls, 0);
}

TEST_F(decide_calls_test, the_calls_equal_what_handle_http_runs_single_and_batch) {
  // Verifies, for a single call and for a batch mixing calls, a ping, a notification, an unknown
  // tool and a schema violation, that decide_calls hands back exactly the calls handle_http
  // then runs, in the same order and with the same arguments.
  const std::vector<std::string> bodies = {
      call(R"({"query":"linux","limit":3,"sort":"date"})"),
      "[" + call(R"({"query":"one"})", "1") + R"(,{"jsonrpc":"2.0","id":2,"method":"ping"},)" +
          R"({"jsonrpc":"2.0","method":"notifications/initialized"},)" +
          call(R"({"query":"x"})", "3", "no_such_tool") + "," +
          call(R"({"query":"two","limit":99})", "4") + "," + call("{}", "5", "get_usage") + "," +
          call(R"({"query":"three","tags":["t"]})", "6") + "]",
  };
  for (const std::string& body : bodies) {
    search->runs.clear();
    auto calls = decided(body);
    endpoint ep(tools, env);
    out_buffer out;
    http_case c;
    c.body = body;
    ASSERT_EQ(run(ep, h, c, out).status, 200) << body;
    std::vector<seen_call> searches;
    for (const auto& s : calls) {
      if (s.tool == "search_stories") {
        searches.push_back(s);
      }
    }
    EXPECT_EQ(searches, search->runs) << body;
    EXPECT_FALSE(searches.empty()) << body;
  }
}

TEST_F(decide_calls_test, the_batch_hands_back_each_call_in_order) {
  // Verifies a batch's calls come back in message order, a free tool's too, and refused ones
  // (unknown tool, argument out of range) not at all.
  auto calls =
      decided("[" + call(R"({"query":"a"})", "1") + "," + call("{}", "2", "get_usage") + "," +
              call(R"({"query":"b","limit":0})", "3") + "," +
              call(R"({"query":"c"})", "4", "nope") + "," + call(R"({"query":"d"})", "5") + "]");
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].query, "a");
  EXPECT_EQ(calls[1].tool, "get_usage");
  EXPECT_EQ(calls[2].query, "d");
}

TEST_F(decide_calls_test, nothing_is_handed_back_for_a_request_handle_http_refuses_whole) {
  // Verifies no call comes back when handle_http would refuse the request before its messages:
  // a foreign Origin, GET, an Accept that excludes JSON, a bad protocol header, malformed JSON, a
  // batch under 2026-07-28, a missing or unknown session, or a header/body mismatch.
  const std::string body = call(R"({"query":"rust"})");
  http_case ok;
  ok.body = body;
  ASSERT_EQ(decided(ok).size(), 1u);

  http_case origin = ok;
  origin.set("Origin", "https://evil.example");
  EXPECT_TRUE(decided(origin).empty());
  http_case get = ok;
  get.method = "GET";
  EXPECT_TRUE(decided(get).empty());
  http_case accept = ok;
  accept.set("Accept", "text/event-stream");  // excludes JSON (JSON alone is served)
  EXPECT_TRUE(decided(accept).empty());
  http_case version = ok;
  version.set("MCP-Protocol-Version", "1999-01-01");
  EXPECT_TRUE(decided(version).empty());
  EXPECT_TRUE(decided(body.substr(0, body.size() - 1)).empty());

  http_case modern_batch;
  modern_batch.body = "[" + body + "]";
  modern_batch.set("MCP-Protocol-Version", "2025-06-18");
  EXPECT_TRUE(decided(modern_batch).empty());

  http_case mismatch = ok;
  mismatch.body =
      R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_stories",)"
      R"("arguments":{"query":"rust"},"_meta":{"io.modelcontextprotocol/protocolVersion":)"
      R"("2026-07-28"}}})";
  mismatch.set("MCP-Protocol-Version", "2026-07-28").set("Mcp-Method", "tools/call");
  mismatch.set("Mcp-Name", "get_usage");
  EXPECT_TRUE(decided(mismatch).empty());
  mismatch.set("Mcp-Name", "search_stories");
  EXPECT_EQ(decided(mismatch).size(), 1u);

  session_store store(1'000'000'000);
  endpoint_options with_sessions;
  with_sessions.sessions = &store;
  EXPECT_TRUE(decided(ok, with_sessions).empty());
  http_case unknown = ok;
  unknown.set("Mcp-Session-Id", "ffffffffffffffffffffffffffffffff");
  EXPECT_TRUE(decided(unknown, with_sessions).empty());
  http_case live = ok;
  live.set("Mcp-Session-Id", store.mint(envelope::revision::v2025_03_26, 0));
  EXPECT_EQ(decided(live, with_sessions).size(), 1u);
}

}  // namespace
}  // namespace tollgate::mcp
