// Duplicate JSON member names: refused, naming the member, the same way over HTTP and stdio,
// rather than resolved first-wins here and last-wins there (a proxy in front that reads the
// other one would see a different request).
#include <gtest/gtest.h>

#include <string>

#include "mcp/mcp_fixture.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;

class duplicates_test : public ::testing::Test {
 protected:
  std::shared_ptr<fake_search> search = std::make_shared<fake_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  endpoint ep{tools, env};
  fake_host h;
  out_buffer out;

  // The answer over HTTP (status, body) and over stdio (body) to `body`.
  std::pair<int, std::string> http(const std::string& body) {
    http_case c;
    c.body = body;
    http_reply r = run(ep, h, c, out);
    return {r.status, r.body};
  }
  std::string stdio(const std::string& body) {
    std::string padded = body + std::string(body_padding, ' ');
    out_buffer o;
    ep.handle_message(std::string_view(padded.data(), body.size()), h, o);
    return std::string(o.view());
  }
};

TEST_F(duplicates_test, envelope_members_given_twice_are_an_invalid_request_naming_them) {
  // Verifies a message object holding id, method, jsonrpc or params twice (also when one of
  // the two is written with an escape) is -32600 naming the member, over HTTP (400) and stdio
  // alike, with id null when the id itself was doubled, and no tool runs.
  const struct {
    const char* body;
    const char* member;
    const char* id;
  } cases[] = {
      {R"({"jsonrpc":"2.0","id":1,"id":2,"method":"ping"})", "id", "null"},
      {R"({"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"get_usage"}})",
       "method", "1"},
      {R"({"jsonrpc":"2.0","jsonrpc":"2.0","id":"a","method":"ping"})", "jsonrpc", "\"a\""},
      {R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_usage"},"params":{"name":"search_stories","arguments":{"query":"x"}}})",
       "params", "3"},
      {R"({"jsonrpc":"2.0","id":4,"method":"ping","x":1,"x":2})", "x", "4"},
      {R"({"jsonrpc":"2.0","id":5,"m\u0065thod":"ping","method":"ping"})", "method", "5"},
  };
  for (const auto& c : cases) {
    const std::string want =
        std::string(R"({"jsonrpc":"2.0","id":)") + c.id +
        R"(,"error":{"code":-32600,"message":"Invalid Request: the member \")" + c.member +
        R"(\" appears more than once in the message."}})";
    auto [status, body] = http(c.body);
    EXPECT_EQ(status, 400) << c.body;
    EXPECT_EQ(body, want) << c.body;
    EXPECT_EQ(stdio(c.body), want) << c.body;
  }
  EXPECT_EQ(search->calls, 0);
  EXPECT_EQ(h.admits, 0);
}

TEST_F(duplicates_test, params_and_arguments_members_given_twice_are_invalid_params_naming_them) {
  // Verifies name, arguments or _meta twice in params, a member twice in _meta, and an argument
  // twice in arguments, is -32602 naming the member (HTTP 200 and stdio alike), and no tool
  // runs.
  const struct {
    const char* params;
    const char* member;
    const char* rule;
  } cases[] = {
      {R"({"name":"get_usage","name":"search_stories","arguments":{"query":"x"}})", "name",
       "must not appear more than once in params"},
      {R"({"name":"search_stories","arguments":{"query":"x"},"arguments":{"query":"y"}})",
       "arguments", "must not appear more than once in params"},
      {R"({"_meta":{},"name":"get_usage","_meta":{}})", "_meta",
       "must not appear more than once in params"},
      {R"({"name":"search_stories","arguments":{"query":"x","limit":5,"query":"y"}})", "query",
       "must not appear more than once in arguments"},
      {R"({"name":"search_stories","arguments":{"query":"x","qu\u0065ry":"y"}})", "query",
       "must not appear more than once in arguments"},
      {R"({"name":"get_usage","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18","io.modelcontextprotocol/protocolVersion":"2026-07-28"}})",
       "io.modelcontextprotocol/protocolVersion", "must not appear more than once in _meta"},
      {R"({"_meta":{"a":1,"b":{"c":1,"c":2},"a":2},"name":"get_usage"})", "a",
       "must not appear more than once in _meta"},
  };
  for (const auto& c : cases) {
    const std::string body =
        std::string(R"({"jsonrpc":"2.0","id":9,"method":"tools/call","params":)") + c.params + "}";
    const std::string want =
        std::string(
            R"({"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"Invalid params: )") +
        c.member + ": " + c.rule + R"(","data":{"argument":")" + c.member + R"(","rule":")" +
        c.rule + R"("}}})";
    auto [status, got] = http(body);
    EXPECT_EQ(status, 200) << body;
    EXPECT_EQ(got, want) << body;
    EXPECT_EQ(stdio(body), want) << body;
  }
  EXPECT_EQ(search->calls, 0);
  // A duplicate in a nested value that is not a member of params or arguments is left alone.
  auto [status, got] = http(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","clientInfo":{"name":"a","name":"b"}}})");
  EXPECT_EQ(status, 200) << got;
}

TEST_F(duplicates_test, a_large_object_of_distinct_members_is_accepted) {
  // Verifies the check holds for objects past the pairwise size (sorted there): 5,000 distinct
  // extra members pass, and one repeated among them is named.
  std::string extra;
  for (int i = 0; i < 5000; ++i) {
    extra += ",\"k" + std::to_string(i) + "\":" + std::to_string(i);
  }
  auto [ok_status, ok_body] = http(R"({"jsonrpc":"2.0","id":1,"method":"ping")" + extra + "}");
  EXPECT_EQ(ok_status, 200) << ok_body.substr(0, 200);
  auto [dup_status, dup_body] =
      http(R"({"jsonrpc":"2.0","id":1,"method":"ping")" + extra + R"(,"k4321":0})");
  EXPECT_EQ(dup_status, 400);
  EXPECT_NE(dup_body.find(R"(the member \"k4321\" appears)"), std::string::npos) << dup_body;
}

}  // namespace
}  // namespace tollgate::mcp
