// MCP endpoint tests over HTTP: every method per revision, every transport rule (status,
// headers, body), batches, schema validation, tool errors, sessions, 401/429, allocations.
#include "tollgate/mcp/endpoint.h"

#include <gtest/gtest.h>

#include "mcp/mcp_fixture.h"
#include "support/alloc_counter.h"
#include "tollgate/envelope/reference.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;
using envelope::revision;

class endpoint_test : public ::testing::Test {
 protected:
  std::shared_ptr<fake_search> search = std::make_shared<fake_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  endpoint ep{tools, env};
  fake_host h;
  out_buffer out;

  http_reply post(const std::string& body) {
    http_case c;
    c.body = body;
    return run(ep, h, c, out);
  }
  http_reply post(http_case c) { return run(ep, h, c, out); }
  static http_case modern(const std::string& method, const std::string& body) {
    http_case c;
    c.body = body;
    c.set("MCP-Protocol-Version", "2026-07-28").set("Mcp-Method", method);
    return c;
  }
  static std::string call(const std::string& args, const std::string& id = "7",
                          const std::string& name = "search_stories") {
    return R"({"jsonrpc":"2.0","id":)" + id + R"(,"method":"tools/call","params":{"name":")" +
           name + R"(","arguments":)" + args + "}}";
  }
};

// ---- initialize, ping, tools/list, discover ----

TEST_F(endpoint_test, initialize_answers_with_the_requested_supported_revision) {
  // Verifies initialize echoes each supported handshake revision and mints no session when off.
  for (const char* v : {"2025-03-26", "2025-06-18", "2025-11-25"}) {
    auto r =
        post(std::string(
                 R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":")") +
             v + R"(","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
    ASSERT_EQ(r.status, 200);
    json_doc d(r.body);
    ASSERT_TRUE(d.ok);
    EXPECT_EQ(d.str("/result/protocolVersion"), v);
    EXPECT_EQ(d.str("/result/serverInfo/name"), "tollgate");
    EXPECT_TRUE(d.has("/result/capabilities/tools"));
    EXPECT_EQ(r.header("Mcp-Session-Id"), "");
    EXPECT_EQ(r.header("X-Quota-Limit"), "1000");
  }
}

TEST_F(endpoint_test, initialize_with_unknown_revision_answers_latest_handshake_revision) {
  // Verifies an unsupported (or handshake-less 2026-07-28) requested version gets 2025-11-25.
  for (const char* v : {"2024-11-05", "2099-01-01", "2026-07-28"}) {
    auto r =
        post(std::string(
                 R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":")") +
             v + R"("}})");
    json_doc d(r.body);
    EXPECT_EQ(d.str("/result/protocolVersion"), "2025-11-25") << v;
  }
}

TEST_F(endpoint_test, initialized_notification_is_202_without_body) {
  // Verifies notifications get 202 with an empty body (and the host's headers).
  auto r = post(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(r.header("Content-Type"), "");
  EXPECT_EQ(r.header("X-Quota-Used"), "10");
  r = post(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}})");
  EXPECT_EQ(r.status, 202);
}

TEST_F(endpoint_test, responses_from_the_client_are_202) {
  // Verifies a JSON-RPC response posted by the client is acknowledged with 202 and no body.
  auto r = post(R"({"jsonrpc":"2.0","id":5,"result":{}})");
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body, "");
}

TEST_F(endpoint_test, ping_per_revision) {
  // Verifies ping returns {} for legacy revisions and {"resultType":"complete"} for 2026-07-28.
  auto r = post(R"({"jsonrpc":"2.0","id":"p","method":"ping"})");
  EXPECT_EQ(r.body, R"({"jsonrpc":"2.0","id":"p","result":{}})");
  r = post(modern(
      "ping",
      R"({"jsonrpc":"2.0","id":"p","method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"jsonrpc":"2.0","id":"p","result":{"resultType":"complete"}})");
}

TEST_F(endpoint_test, tools_list_renders_schema_without_output_schema) {
  // Verifies tools/list carries name, title, description and inputSchema (types, bounds,
  // defaults said in the description, enum, required) and never outputSchema.
  auto r = post(R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})");
  ASSERT_EQ(r.status, 200);
  json_doc d(r.body);
  ASSERT_TRUE(d.ok);
  EXPECT_EQ(d.str("/result/tools/0/name"), "search_stories");
  EXPECT_EQ(d.str("/result/tools/0/title"), "Search stories");
  EXPECT_EQ(d.str("/result/tools/0/inputSchema/type"), "object");
  EXPECT_EQ(d.num("/result/tools/0/inputSchema/properties/query/minLength"), 1);
  EXPECT_EQ(d.num("/result/tools/0/inputSchema/properties/query/maxLength"), 500);
  EXPECT_EQ(d.num("/result/tools/0/inputSchema/properties/limit/maximum"), 50);
  EXPECT_EQ(d.str("/result/tools/0/inputSchema/properties/limit/description"),
            "How many results. Default: 10.");
  EXPECT_EQ(d.str("/result/tools/0/inputSchema/properties/sort/enum/1"), "date");
  EXPECT_EQ(d.str("/result/tools/0/inputSchema/properties/tags/items/type"), "string");
  EXPECT_EQ(d.raw("/result/tools/0/inputSchema/required"), R"(["query"])");
  EXPECT_FALSE(d.has("/result/tools/0/inputSchema/additionalProperties"));
  EXPECT_EQ(d.str("/result/tools/1/name"), "get_usage");
  EXPECT_EQ(r.body.find("outputSchema"), std::string::npos);
  EXPECT_FALSE(d.has("/result/resultType"));
}

TEST_F(endpoint_test, tools_list_modern_has_result_type) {
  // Verifies tools/list under 2026-07-28 carries resultType complete.
  auto r = post(modern(
      "tools/list",
      R"({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})"));
  ASSERT_EQ(r.status, 200);
  json_doc d(r.body);
  EXPECT_EQ(d.str("/result/resultType"), "complete");
  EXPECT_EQ(d.str("/result/tools/0/name"), "search_stories");
}

TEST_F(endpoint_test, server_discover_lists_versions_and_identity) {
  // Verifies server/discover answers with resultType, supportedVersions, capabilities,
  // serverInfo and cache hints.
  auto r = post(modern(
      "server/discover",
      R"({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})"));
  ASSERT_EQ(r.status, 200);
  json_doc d(r.body);
  EXPECT_EQ(d.str("/result/resultType"), "complete");
  EXPECT_EQ(d.raw("/result/supportedVersions"), envelope::reference::supported_versions());
  EXPECT_EQ(d.str("/result/serverInfo/name"), "tollgate");
  EXPECT_TRUE(d.has("/result/ttlMs"));
  EXPECT_EQ(d.str("/result/cacheScope"), "public");
  EXPECT_EQ(d.str("/result/_meta/io.modelcontextprotocol~1serverInfo/name"), "tollgate");
}

// ---- tools/call ----

TEST_F(endpoint_test, tools_call_success_equals_reference_envelope) {
  // Verifies a successful call: HTTP 200, host headers, text = REST payload escaped once (equal
  // to the reference renderer), isError false, admitted once and settled as a success.
  auto r = post(call(R"({"query":"rust \"async\"\n","tags":["a","b"]})"));
  ASSERT_EQ(r.status, 200);
  std::string raw_payload =
      R"({"total":1,"stories":[{"id":"s1","title":"rust \"async\"\n","limit":10,"sort":"relevance","tags":["a","b"]}]})";
  EXPECT_EQ(r.body, envelope::reference::success("7", revision::v2025_03_26, raw_payload));
  EXPECT_EQ(r.header("X-Quota-Remaining"), "990");
  EXPECT_EQ(h.admits, 1);
  EXPECT_EQ(h.settled_ok, 1);
  EXPECT_EQ(h.settled_failed, 0);
}

TEST_F(endpoint_test, tools_call_modern_success_has_result_type) {
  // Verifies a 2026-07-28 call with matching Mcp-Method/Mcp-Name succeeds with resultType.
  auto c = modern(
      "tools/call",
      R"({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})");
  c.set("Mcp-Name", "search_stories");
  auto r = post(c);
  ASSERT_EQ(r.status, 200);
  json_doc d(r.body);
  EXPECT_EQ(d.str("/result/resultType"), "complete");
  EXPECT_EQ(d.raw("/result/isError"), "false");
}

TEST_F(endpoint_test, modern_meta_first_with_client_fields_is_read_correctly) {
  // Verifies a 2026-07-28 request whose params start with a full _meta (client info and
  // capabilities around the version) still finds name and arguments.
  auto c = modern(
      "tools/call",
      R"({"jsonrpc":"2.0","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"c","version":"2"},"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"x":[1,{"y":2}]}},"arguments":{"query":"deep","limit":3},"name":"search_stories"},"method":"tools/call","id":"m1"})");
  c.set("Mcp-Name", "search_stories");
  auto r = post(c);
  ASSERT_EQ(r.status, 200) << r.body;
  json_doc d(r.body);
  EXPECT_EQ(d.str("/id"), "m1");
  json_doc text(d.str("/result/content/0/text"));
  EXPECT_EQ(text.str("/stories/0/title"), "deep");
  EXPECT_EQ(text.num("/stories/0/limit"), 3);
}

TEST_F(endpoint_test, tool_failing_after_writing_is_rolled_back) {
  // Verifies a tool that wrote part of its payload and then failed yields only the tool error
  // (nothing of the partial payload) and gives the unit back (settle false).
  auto r = post(call(R"({"query":"fail-after-write"})"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, envelope::reference::tool_error_response(
                        "7", revision::v2025_03_26,
                        {envelope::tool_error_code::unavailable, -1, -1, -1, -1}));
  EXPECT_EQ(h.settled_failed, 1);
  EXPECT_EQ(h.settled_ok, 0);
}

TEST_F(endpoint_test, tool_reported_invalid_argument_is_32602_and_unbilled) {
  // Verifies a tool rejecting an argument by a rule the schema cannot express gets -32602 with
  // data naming it, its partial output rolled back, and the unit given back.
  auto r = post(call(R"({"query":"bad-date"})"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, envelope::reference::error_response(
                        "7", {envelope::rpc_error_kind::invalid_params, "since",
                              "must be unix seconds or an RFC 3339 date", 0}));
  EXPECT_EQ(h.settled_failed, 1);
  EXPECT_EQ(h.settled_ok, 0);
}

TEST_F(endpoint_test, unavailable_tool_error) {
  // Verifies a tool reporting no shard answered gives the unavailable tool error, not a result.
  auto r = post(call(R"({"query":"outage"})"));
  json_doc d(r.body);
  EXPECT_EQ(d.raw("/result/isError"), "true");
  json_doc text(d.str("/result/content/0/text"));
  EXPECT_EQ(text.str("/code"), "unavailable");
}

TEST_F(endpoint_test, suspended_account_is_a_tool_error_and_tool_does_not_run) {
  // Verifies admit → suspended yields the suspended tool error, HTTP 200, no tool run, no settle.
  h.next.outcome = admission::kind::suspended;
  auto r = post(call(R"({"query":"x"})"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, envelope::reference::tool_error_response(
                        "7", revision::v2025_03_26,
                        {envelope::tool_error_code::suspended, -1, -1, -1, -1}));
  EXPECT_EQ(search->calls, 0);
  EXPECT_EQ(h.settled_ok + h.settled_failed, 0);
}

TEST_F(endpoint_test, quota_exceeded_headers_carry_the_same_numbers) {
  // Verifies quota_exceeded: tool error with retry_after_secs and quota figures, and the
  // response headers carry the same figures (admit happens before headers are written).
  h.next = admission{admission::kind::quota_exceeded, 394200, 1000, 1000, 0};
  auto r = post(call(R"({"query":"x"})"));
  ASSERT_EQ(r.status, 200);
  json_doc d(r.body);
  json_doc text(d.str("/result/content/0/text"));
  EXPECT_EQ(text.str("/code"), "quota_exceeded");
  EXPECT_EQ(text.num("/retry_after_secs"), 394200);
  EXPECT_EQ(std::to_string(text.num("/quota_limit")), r.header("X-Quota-Limit"));
  EXPECT_EQ(std::to_string(text.num("/quota_used")), r.header("X-Quota-Used"));
  EXPECT_EQ(std::to_string(text.num("/quota_remaining")), r.header("X-Quota-Remaining"));
  EXPECT_EQ(search->calls, 0);
}

TEST_F(endpoint_test, non_billable_tool_is_never_admitted) {
  // Verifies get_usage (billable=false) runs without admit/settle.
  auto r = post(call("{}", "1", "get_usage"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(h.admits, 0);
  EXPECT_EQ(h.settled_ok, 0);
  EXPECT_EQ(r.body, envelope::reference::success("1", revision::v2025_03_26, R"({"used":1})"));
}

TEST_F(endpoint_test, unknown_tool_is_32602_with_name) {
  // Verifies an unknown tool is -32602 "Unknown tool: NAME" over HTTP 200, not billed.
  auto r = post(call("{}", "4", "nope"));
  ASSERT_EQ(r.status, 200);
  json_doc d(r.body);
  EXPECT_EQ(d.num("/error/code"), -32602);
  EXPECT_EQ(d.str("/error/message"), "Unknown tool: nope");
  EXPECT_EQ(d.num("/id"), 4);
  EXPECT_EQ(h.admits, 0);
}

struct schema_case {
  std::string args;
  const char* argument;
  const char* rule_fragment;
};

TEST_F(endpoint_test, schema_violations_are_32602_naming_argument_and_rule) {
  // Verifies missing, wrong type, out of range, unknown, bad enum and bad array arguments each
  // give -32602 with data.argument and data.rule, and the tool never runs.
  const schema_case cases[] = {
      {"{}", "query", "is required"},
      {R"({"limit":5})", "query", "is required"},
      {R"({"query":5})", "query", "must be a string"},
      {R"({"query":""})", "query", "between 1 and 500"},
      {std::string(R"({"query":")") + std::string(501, 'q') + "\"}", "query", "between 1 and 500"},
      {R"({"query":"x","limit":"5"})", "limit", "must be an integer"},
      {R"({"query":"x","limit":2.5})", "limit", "must be an integer"},
      {R"({"query":"x","limit":51})", "limit", "between 1 and 50"},
      {R"({"query":"x","limit":0})", "limit", "between 1 and 50"},
      {R"({"query":"x","limit":99999999999999999999})", "limit", "between 1 and 50"},
      {R"({"query":"x","sort":"random"})", "sort", "one of"},
      {R"({"query":"x","tags":"a"})", "tags", "array of strings"},
      {R"({"query":"x","tags":["a",1]})", "tags", "array of strings"},
      {R"({"query":"x","tags":["1","2","3","4","5","6","7","8","9"]})", "tags", "at most 8"},
      {R"({"query":"x","colour":"red"})", "colour", "not an argument"},
      {R"([1])", "arguments", "must be an object"},
  };
  for (const auto& sc : cases) {
    const std::string& args = sc.args;
    auto r = post(call(args));
    ASSERT_EQ(r.status, 200) << args;
    json_doc d(r.body);
    ASSERT_TRUE(d.ok) << r.body;
    EXPECT_EQ(d.num("/error/code"), -32602) << args;
    EXPECT_EQ(d.str("/error/data/argument"), sc.argument) << args;
    EXPECT_NE(d.str("/error/data/rule").find(sc.rule_fragment), std::string::npos)
        << args << " → " << d.str("/error/data/rule");
  }
  EXPECT_EQ(search->calls, 0);
  EXPECT_EQ(h.admits, 0);
}

TEST_F(endpoint_test, query_length_counts_characters_not_bytes) {
  // Verifies string length bounds count Unicode characters: 500 × "é" (1000 bytes) is valid.
  std::string q;
  for (int i = 0; i < 500; ++i) q += "\xc3\xa9";
  auto r = post(call(R"({"query":")" + q + "\"}"));
  json_doc d(r.body);
  EXPECT_EQ(d.raw("/result/isError"), "false") << r.body.substr(0, 200);
}

TEST_F(endpoint_test, escaped_keys_and_strings_are_read_as_their_text) {
  // Verifies keys and strings written with escapes mean what their unescaped text means: the
  // jsonrpc version, an argument's name and value. (Those without escapes are read in place.)
  auto plain = post(call(R"({"query":"rust","tags":["a"]})"));
  ASSERT_EQ(plain.status, 200);
  auto escaped = post(R"({"jsonrpc":"2\u002e0","id":7,"method":"tools/call","params":{"name":)"
                      R"("search_stories","arguments":{"qu\u0065ry":"r\u0075st","t\u0061gs":)"
                      R"(["\u0061"]}}})");
  EXPECT_EQ(escaped.status, 200);
  EXPECT_EQ(escaped.body, plain.body);
  EXPECT_EQ(h.admits, 2);
}

TEST_F(endpoint_test, member_names_the_method_reads_match_when_written_with_escapes) {
  // Verifies the members decide() looks up (params, name, arguments, protocolVersion, _meta and
  // its version key) are found by their unescaped names, as JSON defines member names: a key
  // written "n\u0061me" is the key "name".
  auto plain = post(call(R"({"query":"rust"})"));
  ASSERT_EQ(plain.status, 200);
  auto escaped = post(R"({"jsonrpc":"2.0","id":7,"method":"tools/call","p\u0061rams":)"
                      R"({"n\u0061me":"search_stories","\u0061rguments":{"query":"rust"}}})");
  EXPECT_EQ(escaped.status, 200);
  EXPECT_EQ(escaped.body, plain.body);

  auto init = post(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":)"
                   R"({"protocol\u0056ersion":"2025-06-18","capabilities":{},)"
                   R"("clientInfo":{"name":"t","version":"1"}}})");
  json_doc d(init.body);
  EXPECT_EQ(d.str("/result/protocolVersion"), "2025-06-18") << init.body;

  // 2026-07-28: the _meta version must match the header; a mismatch is found through escapes.
  auto meta = post(modern("tools/call",
                          R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"\u005fmeta":)"
                          R"({"io.modelcontextprotocol\/protocolVersion":"2025-06-18"},)"
                          R"("name":"search_stories","arguments":{"query":"rust"}}})")
                       .set("Mcp-Name", "search_stories"));
  EXPECT_EQ(meta.status, 400) << meta.body;
  json_doc dm(meta.body);
  EXPECT_EQ(dm.num("/error/code"), -32020) << meta.body;
}

TEST_F(endpoint_test, string_ids_are_echoed_raw) {
  // Verifies the id is copied exactly as sent, escapes included.
  auto r = post(R"({"jsonrpc":"2.0","id":"a\"b\u00e9","method":"ping"})");
  EXPECT_EQ(r.body, R"({"jsonrpc":"2.0","id":"a\"b\u00e9","result":{}})");
  r = post(R"({"jsonrpc":"2.0","id":  -12 ,"method":"ping"})");
  EXPECT_EQ(r.body, R"({"jsonrpc":"2.0","id":-12,"result":{}})");
}

// ---- JSON-RPC errors ----

TEST_F(endpoint_test, unknown_method_is_32601_http_200_legacy_404_modern) {
  // Verifies -32601 is HTTP 200 for legacy revisions and HTTP 404 under 2026-07-28 (where
  // initialize itself is unknown).
  auto r = post(R"({"jsonrpc":"2.0","id":1,"method":"resources/list"})");
  EXPECT_EQ(r.status, 200);
  json_doc d(r.body);
  EXPECT_EQ(d.num("/error/code"), -32601);
  r = post(modern(
      "resources/list",
      R"({"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})"));
  EXPECT_EQ(r.status, 404);
  json_doc d2(r.body);
  EXPECT_EQ(d2.num("/error/code"), -32601);
  r = post(modern(
      "initialize",
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28"}})"));
  EXPECT_EQ(r.status, 404);
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

// ---- batches ----

TEST_F(endpoint_test, batch_array_in_array_out_for_2025_03_26) {
  // Verifies a batch answers each request in order, skips notifications, and reports invalid
  // elements individually.
  auto r = post(
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},)"
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"q"}}},3])");
  ASSERT_EQ(r.status, 200);
  json_doc d(r.body);
  ASSERT_TRUE(d.ok) << r.body;
  EXPECT_EQ(d.num("/0/id"), 1);
  EXPECT_EQ(d.num("/1/id"), 2);
  EXPECT_EQ(d.raw("/1/result/isError"), "false");
  EXPECT_EQ(d.num("/2/error/code"), -32600);
  EXPECT_FALSE(d.has("/3"));
  EXPECT_EQ(h.settled_ok, 1);
}

TEST_F(endpoint_test, batch_of_notifications_is_202) {
  // Verifies a batch of only notifications and responses gets 202 with no body.
  auto r = post(
      R"([{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":3,"result":{}}])");
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body, "");
}

TEST_F(endpoint_test, a_batch_over_the_limit_says_so) {
  // Verifies a batch of max_batch + 1 messages is -32600 (HTTP 400, id null) with a message
  // that names the limit (it was the generic "not a valid JSON-RPC 2.0 request"), and one of
  // exactly max_batch is answered.
  auto batch = [](size_t n) {
    std::string b = "[";
    for (size_t i = 1; i <= n; ++i) {
      b += R"({"jsonrpc":"2.0","id":)" + std::to_string(i) + R"(,"method":"ping"},)";
    }
    b.back() = ']';
    return b;
  };
  const size_t limit = endpoint_options{}.max_batch;
  auto ok = post(batch(limit));
  EXPECT_EQ(ok.status, 200) << ok.body;
  auto over = post(batch(limit + 1));
  EXPECT_EQ(over.status, 400);
  json_doc d(over.body);
  ASSERT_TRUE(d.ok) << over.body;
  EXPECT_EQ(d.num("/error/code"), -32600);
  EXPECT_EQ(d.raw("/id"), "null");
  EXPECT_NE(over.body.find("a batch may hold at most " + std::to_string(limit) + " messages"),
            std::string::npos)
      << over.body;
}

TEST_F(endpoint_test, batch_refused_after_2025_03_26) {
  // Verifies batches under 2025-06-18 and later are -32600 with HTTP 400.
  http_case c;
  c.body = R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])";
  c.set("MCP-Protocol-Version", "2025-06-18");
  auto r = post(c);
  EXPECT_EQ(r.status, 400);
  json_doc d(r.body);
  EXPECT_EQ(d.num("/error/code"), -32600);
}

// ---- transport rules ----

TEST_F(endpoint_test, accept_must_list_json_and_event_stream) {
  // Verifies Accept without both media types (or absent) is 406; wildcards count.
  for (const char* accept : {"application/json", "text/event-stream", "text/html"}) {
    http_case c;
    c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
    c.set("Accept", accept);
    EXPECT_EQ(post(c).status, 406) << accept;
  }
  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  c.drop("Accept");
  EXPECT_EQ(post(c).status, 406);
  c.set("Accept", "text/event-stream;q=0.9, APPLICATION/JSON");
  EXPECT_EQ(post(c).status, 200);
  c.set("Accept", "*/*");
  EXPECT_EQ(post(c).status, 200);
  // Two Accept lines are one list (RFC 9110 §5.3): together they admit both.
  http_case two;
  two.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  two.drop("Accept");
  two.add("Accept", "application/json");
  two.add("Accept", "text/event-stream");
  EXPECT_EQ(post(two).status, 200);
  http_case two_json;
  two_json.body = two.body;
  two_json.drop("Accept");
  two_json.add("Accept", "application/json");
  two_json.add("Accept", "application/*");
  EXPECT_EQ(post(two_json).status, 406);
}

TEST_F(endpoint_test, content_type_must_be_json) {
  // Verifies a non-JSON Content-Type is 415 and a charset parameter is fine.
  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  c.set("Content-Type", "text/plain");
  EXPECT_EQ(post(c).status, 415);
  c.drop("Content-Type");
  EXPECT_EQ(post(c).status, 415);
  c.set("Content-Type", "application/json; charset=utf-8");
  EXPECT_EQ(post(c).status, 200);
}

TEST_F(endpoint_test, media_types_compare_case_insensitively_and_nothing_else_folds) {
  // Verifies the media-type comparisons fold only ASCII letters: every case mix is accepted, and
  // a byte that differs from the literal by bit 0x20 without being a letter's case is not
  // (e.g. '_' for '-', 'O' for '/', '\x0a' is never a header byte), in the first and the last
  // 8 bytes of the word-wise compare.
  auto status = [&](const char* accept, const char* type) {
    http_case c;
    c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
    c.set("Accept", accept);
    c.set("Content-Type", type);
    return post(c).status;
  };
  EXPECT_EQ(status("APPLICATION/JSON, TEXT/EVENT-STREAM", "Application/Json"), 200);
  EXPECT_EQ(status("application/jsoN,text/event-streaM", "APPLICATION/json;charset=UTF-8"), 200);
  EXPECT_EQ(status("Application/*, Text/*", "application/JSON\t"), 200);
  EXPECT_EQ(status("application/json, text/event_stream", "application/json"), 406);
  EXPECT_EQ(status("applicationOjson, text/event-stream", "application/json"), 406);
  EXPECT_EQ(status("application/json, text/event-streaM2", "application/json"), 406);
  EXPECT_EQ(status("application/json, text/event-stream", "applicationOjson"), 415);
  EXPECT_EQ(status("application/json, text/event-stream", "Application/jsom"), 415);
  EXPECT_EQ(status("application/json, text/event-stream", "application/jso"), 415);
  EXPECT_EQ(status("application/json, text/event-stream", "qpplication/json"), 415);
}

TEST_F(endpoint_test, get_and_delete_are_405_allow_post_when_stateless) {
  // Verifies GET and DELETE /mcp answer 405 with Allow: POST while sessions are off.
  for (const char* m : {"GET", "DELETE", "PUT"}) {
    http_case c;
    c.method = m;
    auto r = post(c);
    EXPECT_EQ(r.status, 405) << m;
    EXPECT_EQ(r.header("Allow"), "POST");
  }
}

TEST_F(endpoint_test, foreign_origin_is_403_loopback_allowed) {
  // Verifies a present, non-allowed Origin is 403 while loopback origins (any port) pass.
  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  for (const char* o : {"http://evil.example", "http://localhost.evil.example", "null",
                        "http://127.0.0.1:80x", "http://localhost:"}) {
    c.set("Origin", o);
    EXPECT_EQ(post(c).status, 403) << o;
  }
  for (const char* o : {"http://localhost", "http://localhost:6274", "http://127.0.0.1:8080",
                        "http://[::1]:3000", "https://localhost"}) {
    c.set("Origin", o);
    EXPECT_EQ(post(c).status, 200) << o;
  }
}

TEST(endpoint_options_test, configured_origin_is_allowed) {
  // Verifies an origin on the configured allow-list passes and loopback can be switched off.
  auto search = std::make_shared<fake_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  endpoint_options o;
  o.allowed_origins = {"https://app.example.com"};
  o.allow_loopback_origins = false;
  endpoint ep(tools, env, o);
  fake_host h;
  out_buffer out;
  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  c.set("Origin", "https://app.example.com");
  EXPECT_EQ(run(ep, h, c, out).status, 200);
  c.set("Origin", "http://localhost:3000");
  EXPECT_EQ(run(ep, h, c, out).status, 403);
}

TEST_F(endpoint_test, unsupported_protocol_version_header_is_400) {
  // Verifies an unsupported MCP-Protocol-Version is HTTP 400 with -32022 listing the supported
  // revisions; an absent header means 2025-03-26 (batches accepted).
  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  c.set("MCP-Protocol-Version", "2024-11-05");
  auto r = post(c);
  EXPECT_EQ(r.status, 400);
  json_doc d(r.body);
  EXPECT_EQ(d.num("/error/code"), -32022);
  EXPECT_EQ(d.str("/error/data/requested"), "2024-11-05");
  EXPECT_EQ(d.raw("/error/data/supported"), envelope::reference::supported_versions());
}

TEST_F(endpoint_test, body_too_large_is_413) {
  // Verifies a body over max_body_bytes is 413.
  auto r = post(call(R"({"query":")" + std::string(300 * 1024, 'a') + "\"}"));
  EXPECT_EQ(r.status, 413);
}

TEST_F(endpoint_test, connection_close_is_echoed) {
  // Verifies a request that does not keep the connection alive gets Connection: close.
  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  c.keep_alive = false;
  auto r = post(c);
  EXPECT_TRUE(r.close);
  EXPECT_EQ(r.header("Connection"), "close");
}

// ---- 2026-07-28 header/body agreement ----

TEST_F(endpoint_test, modern_mcp_method_mismatch_is_32020) {
  // Verifies Mcp-Method absent or different from the body's method is -32020 with HTTP 400.
  auto c = modern(
      "tools/list",
      R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})");
  auto r = post(c);
  EXPECT_EQ(r.status, 400);
  json_doc d(r.body);
  EXPECT_EQ(d.num("/error/code"), -32020);
  EXPECT_EQ(d.num("/id"), 1);
  c.drop("Mcp-Method");
  r = post(c);
  EXPECT_EQ(r.status, 400);
}

TEST_F(endpoint_test, modern_mcp_name_mismatch_is_32020) {
  // Verifies Mcp-Name absent or different from params.name on tools/call is -32020, unbilled.
  auto c = modern(
      "tools/call",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})");
  auto r = post(c);
  EXPECT_EQ(r.status, 400);
  c.set("Mcp-Name", "get_usage");
  r = post(c);
  EXPECT_EQ(r.status, 400);
  json_doc d(r.body);
  EXPECT_EQ(d.num("/error/code"), -32020);
  EXPECT_EQ(h.admits, 0);
}

TEST_F(endpoint_test, modern_meta_version_unsupported_is_32022) {
  // Verifies an unsupported _meta protocol version is -32022 (HTTP 400) with the supported
  // list, and a supported one that differs from the header is -32020.
  auto r = post(modern(
      "ping",
      R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2027-01-01"}}})"));
  EXPECT_EQ(r.status, 400);
  json_doc d(r.body);
  EXPECT_EQ(d.num("/error/code"), -32022);
  EXPECT_EQ(d.str("/error/data/requested"), "2027-01-01");
  EXPECT_EQ(d.str("/error/data/supported/3"), "2026-07-28");
  r = post(modern(
      "ping",
      R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}})"));
  EXPECT_EQ(r.status, 400);
  json_doc d2(r.body);
  EXPECT_EQ(d2.num("/error/code"), -32020);
}

// ---- sessions ----

TEST(endpoint_session_test, sessions_minted_required_ended_and_expired) {
  // Verifies with sessions on: initialize mints Mcp-Session-Id; a later request without one is
  // 400, with an unknown one 404, with the minted one 200; DELETE ends it (then 404); idle
  // sessions expire.
  auto search = std::make_shared<fake_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  session_store store(1'000'000'000);
  endpoint_options o;
  o.sessions = &store;
  endpoint ep(tools, env, o);
  fake_host h;
  out_buffer out;
  http_case init;
  init.body =
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})";
  auto r = run(ep, h, init, out, 0);
  ASSERT_EQ(r.status, 200);
  std::string sid = r.header("Mcp-Session-Id");
  ASSERT_EQ(sid.size(), 32u);

  http_case ping;
  ping.body = R"({"jsonrpc":"2.0","id":2,"method":"ping"})";
  EXPECT_EQ(run(ep, h, ping, out, 10).status, 400);
  ping.set("Mcp-Session-Id", "ffffffffffffffffffffffffffffffff");
  EXPECT_EQ(run(ep, h, ping, out, 10).status, 404);
  ping.set("Mcp-Session-Id", sid);
  EXPECT_EQ(run(ep, h, ping, out, 10).status, 200);

  http_case del;
  del.method = "DELETE";
  del.set("Mcp-Session-Id", sid);
  EXPECT_EQ(run(ep, h, del, out, 20).status, 204);
  EXPECT_EQ(run(ep, h, ping, out, 30).status, 404);
  EXPECT_EQ(run(ep, h, del, out, 30).status, 404);

  auto r2 = run(ep, h, init, out, 100);
  std::string sid2 = r2.header("Mcp-Session-Id");
  EXPECT_EQ(store.size(), 1u);
  store.expire(100 + 500'000'000);
  EXPECT_EQ(store.size(), 1u);
  store.expire(100 + 1'000'000'001);
  EXPECT_EQ(store.size(), 0u);
  ping.set("Mcp-Session-Id", sid2);
  EXPECT_EQ(run(ep, h, ping, out, 2'000'000'000).status, 404);
}

TEST(session_store_test, at_the_cap_a_new_session_ends_the_least_recently_used) {
  // Verifies the cap: with room for 3, a 4th mint ends the session used longest ago (a touch
  // counts as use), the count of evictions says so, and the store never holds more than 3.
  session_store store(1'000'000'000'000, 3);
  const auto rev = envelope::revision::v2025_06_18;
  std::string a = store.mint(rev, 1);
  std::string b = store.mint(rev, 2);
  std::string c = store.mint(rev, 3);
  EXPECT_EQ(store.size(), 3u);
  ASSERT_TRUE(store.touch(a, 4));  // a is now the most recent; b the least
  std::string d = store.mint(rev, 5);
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.evicted(), 1u);
  EXPECT_FALSE(store.touch(b, 6));
  EXPECT_TRUE(store.touch(a, 7));
  EXPECT_TRUE(store.touch(c, 8));
  EXPECT_TRUE(store.touch(d, 9));
  for (int i = 0; i < 1000; ++i) {
    store.mint(rev, 10 + i);
  }
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.evicted(), 1001u);
  EXPECT_FALSE(store.touch(d, 2000));
}

TEST(session_store_test, expiry_ends_only_the_idle_and_end_frees_room) {
  // Verifies idle expiry by last use (not by mint time), and that DELETE's end() frees a slot
  // without counting as an eviction.
  session_store store(100, 2);
  const auto rev = envelope::revision::v2025_03_26;
  std::string a = store.mint(rev, 0);
  std::string b = store.mint(rev, 10);
  ASSERT_TRUE(store.touch(a, 90));
  store.expire(150);  // b idle 140 > 100; a idle 60
  EXPECT_EQ(store.size(), 1u);
  EXPECT_FALSE(store.touch(b, 151));
  EXPECT_TRUE(store.touch(a, 152));
  EXPECT_TRUE(store.end(a));
  EXPECT_FALSE(store.end(a));
  EXPECT_EQ(store.size(), 0u);
  store.mint(rev, 160);
  store.mint(rev, 161);
  EXPECT_EQ(store.evicted(), 0u);
  EXPECT_EQ(std::string(store.mint(rev, 162)).size(), session_store::id_len);
  EXPECT_EQ(store.evicted(), 1u);
}

// ---- 401 / 429 entry points ----

TEST_F(endpoint_test, render_unauthorized_is_bearer_realm_without_envelope) {
  // Verifies the 401 entry point: WWW-Authenticate Bearer realm, invalid_key body, no JSON-RPC.
  http::request req;
  out.clear();
  auto info = ep.render_unauthorized(req, out);
  EXPECT_EQ(info.status, 401);
  EXPECT_EQ(out.view(), envelope::reference::unauthorized(false));
  EXPECT_EQ(out.view().find("jsonrpc"), std::string_view::npos);
}

TEST_F(endpoint_test, render_rate_limited_echoes_id_when_body_parses) {
  // Verifies the 429 entry point: Retry-After, host headers, JSON-RPC error code 429 with the
  // rate_limited data, id echoed when the body parses and null otherwise.
  std::string body = R"({"jsonrpc":"2.0","id":"r1","method":"tools/list"})";
  std::string padded = body + std::string(64, ' ');
  http::request req;
  req.body = std::string_view(padded.data(), body.size());
  out.clear();
  auto info = ep.render_rate_limited(req, h, out, 3);
  EXPECT_EQ(info.status, 429);
  std::string expect_body = envelope::reference::error_response(
      "\"r1\"", {envelope::rpc_error_kind::rate_limited, {}, {}, 3});
  std::string extra =
      "Retry-After: 3\r\nX-Quota-Limit: 1000\r\nX-Quota-Used: 10\r\nX-Quota-Remaining: 990\r\n";
  EXPECT_EQ(out.view(), envelope::reference::http(429, false, extra, expect_body));

  std::string bad = "{oops" + std::string(64, ' ');
  req.body = std::string_view(bad.data(), 5);
  out.clear();
  (void)ep.render_rate_limited(req, h, out, 0);
  EXPECT_NE(out.view().find(R"({"jsonrpc":"2.0","id":null,"error":{"code":429)"),
            std::string_view::npos);
  EXPECT_NE(out.view().find("Retry-After: 1\r\n"), std::string_view::npos);
}

// ---- allocations ----

TEST_F(endpoint_test, tools_call_allocates_nothing_after_warm_up) {
  // Verifies decode + dispatch + tool + envelope of a tools/call (and a -32602 and a tool
  // error) make zero allocations once buffers are warm.
  std::string ok_body = call(R"({"query":"rust","limit":5,"tags":["a","b"]})");
  std::string bad_body = call(R"({"query":"rust","limit":500})");
  std::string err_body = call(R"({"query":"outage"})");
  std::vector<std::string> padded;
  std::vector<http::request> reqs;
  for (const auto& b : {ok_body, bad_body, err_body}) {
    padded.push_back(b + std::string(64, ' '));
  }
  for (size_t i = 0; i < padded.size(); ++i) {
    http::request req;
    req.method = "POST";
    req.path = "/mcp";
    req.add_header("Accept", "application/json, text/event-stream");
    req.add_header("Content-Type", "application/json");
    req.body = std::string_view(padded[i].data(), padded[i].size() - 64);
    reqs.push_back(req);
  }
  struct quiet_host : host {
    void write_headers(out_buffer& o) override { o.append("X-Quota-Used: 1\r\n"); }
    admission admit(std::string_view) override { return {}; }
    void settle(bool) override {}
  } qh;
  out_buffer o(64 * 1024);
  for (int warm = 0; warm < 3; ++warm) {
    for (auto& req : reqs) {
      o.clear();
      (void)ep.handle_http(req, qh, o);
    }
  }
  test::alloc_scope scope;
  for (int i = 0; i < 200; ++i) {
    for (auto& req : reqs) {
      o.clear();
      (void)ep.handle_http(req, qh, o);
    }
  }
  EXPECT_EQ(scope.count(), 0u);
  EXPECT_NE(o.view().find("unavailable"), std::string_view::npos);
}

}  // namespace
}  // namespace tollgate::mcp
