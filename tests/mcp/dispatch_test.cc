// Deciding replies (dispatch.cc): initialize, ping, tools/list and server/discover per revision,
// tools/call through admission to the tool and its errors, method routing, the members decide()
// reads, and the 2026-07-28 header/body agreement.
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
                        {envelope::tool_error_code::unavailable, -1, -1, -1, -1, {}}));
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
  h.next.refusal = envelope::tool_error_code::suspended;
  auto r = post(call(R"({"query":"x"})"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, envelope::reference::tool_error_response(
                        "7", revision::v2025_03_26,
                        {envelope::tool_error_code::suspended, -1, -1, -1, -1, {}}));
  EXPECT_EQ(search->calls, 0);
  EXPECT_EQ(h.settled_ok + h.settled_failed, 0);
}

TEST_F(endpoint_test, quota_exceeded_headers_carry_the_same_numbers) {
  // Verifies quota_exceeded: tool error with retry_after_secs and quota figures, and the
  // response headers carry the same figures (admit happens before headers are written).
  h.next = admission{envelope::tool_error_code::quota_exceeded, 394200, 1000, 1000, 0};
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
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})"));
  EXPECT_EQ(r.status, 404);
}

TEST_F(endpoint_test, modern_request_without_a_string_meta_version_is_32602) {
  // Verifies a 2026-07-28 request (over HTTP, by its header) whose _meta lacks
  // io.modelcontextprotocol/protocolVersion, or holds it as a number, or has no _meta or no
  // params at all, is refused: -32602 naming _meta, HTTP 400, nothing run. On stdio, where the
  // _meta version alone selects the revision, a number is refused the same way and a message
  // without one is a legacy message.
  const char* bodies[] = {
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":"2026-07-28"}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}})",
  };
  for (const char* body : bodies) {
    auto r = post(modern("tools/list", body));
    EXPECT_EQ(r.status, 400) << body;
    json_doc d(r.body);
    ASSERT_TRUE(d.ok) << r.body;
    EXPECT_EQ(d.num("/error/code"), -32602) << body;
    EXPECT_EQ(d.str("/error/data/argument"), "_meta") << body;
    EXPECT_NE(d.str("/error/data/rule").find("io.modelcontextprotocol/protocolVersion"),
              std::string::npos)
        << r.body;
  }
  auto call = modern(
      "tools/call",
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"x"}}})");
  call.set("Mcp-Name", "search_stories");
  EXPECT_EQ(post(call).status, 400);
  EXPECT_EQ(h.admits, 0);
  EXPECT_EQ(search->calls, 0);
  // stdio: a numeric version is refused; none at all is a legacy message.
  out_buffer o;
  std::string numeric =
      R"({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}})";
  numeric.append(body_padding, ' ');
  ep.handle_message(std::string_view(numeric).substr(0, numeric.size() - body_padding), h, o);
  json_doc sd(std::string(o.view()));
  EXPECT_EQ(sd.num("/error/code"), -32602) << o.view();
  o.clear();
  std::string legacy = R"({"jsonrpc":"2.0","id":4,"method":"tools/list"})";
  legacy.append(body_padding, ' ');
  ep.handle_message(std::string_view(legacy).substr(0, legacy.size() - body_padding), h, o);
  json_doc ld(std::string(o.view()));
  EXPECT_TRUE(ld.ok) << o.view();
  EXPECT_FALSE(ld.has("/error")) << o.view();
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

}  // namespace
}  // namespace tollgate::mcp
