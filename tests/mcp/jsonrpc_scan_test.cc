// Pass 1 of the JSON-RPC decoder (jsonrpc_scan.cc): malformed JSON anywhere is -32700, nesting
// is bounded, non-requests are -32600, ids are echoed as sent.
#include <gtest/gtest.h>

#include <string>

#include "mcp/endpoint_fixture.h"
#include "mcp/mcp_fixture.h"
#include "tollgate/envelope/reference.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;
using envelope::revision;

// ---- JSON-RPC errors ----

TEST_F(endpoint_test, string_ids_are_echoed_raw) {
  // Verifies the id is copied exactly as sent, escapes included.
  auto r = post(R"({"jsonrpc":"2.0","id":"a\"b\u00e9","method":"ping"})");
  EXPECT_EQ(r.body, R"({"jsonrpc":"2.0","id":"a\"b\u00e9","result":{}})");
  r = post(R"({"jsonrpc":"2.0","id":  -12 ,"method":"ping"})");
  EXPECT_EQ(r.body, R"({"jsonrpc":"2.0","id":-12,"result":{}})");
}

TEST_F(endpoint_test, malformed_json_is_32700_http_400_id_null) {
  // Verifies malformed JSON anywhere (including inside params the method never reads, and
  // trailing bytes) is -32700 with HTTP 400 and id null.
  for (
      const char* body :
      {"{", "not json", R"({"jsonrpc":"2.0","id":1,"method":"ping")",
       R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":[1,2,}})",
       R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":tru}})",
       R"({"jsonrpc":"2.0","id":1,"method":"ping"} x)",
       R"({"jsonrpc":"2.0","id":1,"method":"p\q"})",
       // A bad escape in a key or a string the method never reads is still malformed JSON
       // (keys and strings without escapes are read in place, not unescaped).
       R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"a\q"}})",
       R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"a\q":1}})",
       R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":["ok","\u12"]}})",
       R"({"jsonrpc\x":"2.0","id":1,"method":"ping"})",
       R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"r\ust"}}})",
       R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories","arguments":{"q\uery":"rust"}}})",
       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"a\tb\"}}", ""}) {
    auto r = post(std::string(body));
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.body, envelope::reference::error_response(
                          "null", {envelope::rpc_error_kind::parse_error, {}, {}, 0}))
        << body;
  }
}

TEST_F(endpoint_test, nesting_past_128_levels_is_32700_and_no_depth_overflows_the_stack) {
  // Verifies 128 levels of arrays and objects (the message object included) are accepted, 129
  // are refused as a parse error (HTTP 400, id null), in a single message and in a batch, and
  // that 120,000 levels (a 240 KB body; the validating walk recursed once per level, and a
  // server died of 200,000) are refused the same way.
  auto nested = [](int levels) {  // params.x holds `levels` arrays
    return R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":)" + std::string(levels, '[') +
           std::string(levels, ']') + "}}";
  };
  const auto parse_error = envelope::reference::error_response(
      "null", {envelope::rpc_error_kind::parse_error, {}, {}, 0});
  auto ok = post(nested(126));  // message, params, 126 arrays: 128 levels
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.body, R"({"jsonrpc":"2.0","id":1,"result":{}})");
  auto deep = post(nested(127));
  EXPECT_EQ(deep.status, 400);
  EXPECT_EQ(deep.body, parse_error);
  auto batch_ok = post("[" + nested(125) + "]");
  EXPECT_EQ(batch_ok.status, 200) << batch_ok.body;
  auto batch_deep = post("[" + nested(126) + "]");
  EXPECT_EQ(batch_deep.status, 400);
  EXPECT_EQ(batch_deep.body, parse_error);
  auto very_deep = post(nested(120000));
  EXPECT_EQ(very_deep.status, 400);
  EXPECT_EQ(very_deep.body, parse_error);
}

TEST_F(endpoint_test, non_requests_are_32600_http_400) {
  // Verifies valid JSON that is not a JSON-RPC request gets -32600 with HTTP 400.
  for (const char* body :
       {"5", "\"x\"", "null", R"({"jsonrpc":"1.0","id":1,"method":"ping"})",
        R"({"id":1,"method":"ping"})", R"({"jsonrpc":"2.0","id":1})",
        R"({"jsonrpc":"2.0","id":{},"method":"ping"})", R"({"jsonrpc":"2.0","id":1,"method":3})",
        R"({"jsonrpc":"2.0","id":1,"method":"ping","params":"x"})", "[]"}) {
    auto r = post(std::string(body));
    EXPECT_EQ(r.status, 400) << body;
    json_doc d(r.body);
    EXPECT_EQ(d.num("/error/code"), -32600) << body;
  }
}

}  // namespace
}  // namespace tollgate::mcp
