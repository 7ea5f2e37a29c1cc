// The stdio bridge's protocol half (app/remote_bridge.h): what it reads from a client's line and
// what it writes for every row of the issue 18 table, with made-up HTTP answers; and the
// --remote command line.
#include "app/remote_bridge.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/stdio_remote.h"
#include "tollgate/envelope/reference.h"

namespace tollgate::app::remote {
namespace {

const envelope::cache& env() {
  static const envelope::cache c(envelope::server_identity{});
  return c;
}

// inspect() needs 64 readable bytes past the line: keep the line in a padded string.
line_facts facts(std::string line) {
  const size_t n = line.size();
  line.resize(n + 64, ' ');
  return inspect(std::string_view(line.data(), n));
}

struct rendered {
  verdict v;
  std::string out;
  std::string reason;
};

rendered run(std::string line, const http_answer& a,
             envelope::revision negotiated = envelope::revision::v2025_03_26) {
  const line_facts f = facts(std::move(line));
  out_buffer out;
  rendered r;
  r.v = translate(f, a, bridge_view{env(), "http://127.0.0.1:1/mcp", negotiated}, out, r.reason);
  r.out = std::string(out.view());
  return r;
}

http_answer json(long status, std::string_view body) {
  http_answer a;
  a.status = status;
  a.content_type = "application/json";
  a.body = body;
  return a;
}

http_answer refused() {
  http_answer a;
  a.transport_failed = true;
  a.not_sent = true;
  a.failure = "Couldn't connect to server";
  return a;
}

constexpr std::string_view kCall =
    R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"x"}}})";
constexpr std::string_view kList = R"({"jsonrpc":"2.0","id":"a\"b","method":"tools/list"})";

TEST(remote_bridge_test, inspect_reads_id_method_tool_and_meta_version) {
  // Verifies the facts the bridge needs: raw id, method, tool name, _meta revision.
  line_facts f = facts(
      R"({"method":"tools/call","params":{"name":"get_story","arguments":{"id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"jsonrpc":"2.0","id":"s-1"})");
  ASSERT_TRUE(f.parsed);
  ASSERT_EQ(f.messages.size(), 1u);
  EXPECT_EQ(f.messages[0].id, R"("s-1")");
  EXPECT_EQ(f.messages[0].method, "tools/call");
  EXPECT_EQ(f.messages[0].tool, "get_story");
  EXPECT_EQ(f.messages[0].meta_version, "2026-07-28");
  EXPECT_TRUE(f.messages[0].is_tools_call());
}

TEST(remote_bridge_test, inspect_tells_notifications_responses_batches_and_garbage) {
  // Verifies a notification and a response are not requests, a batch lists its messages, and
  // a line that is not JSON is marked unparsed (the server answers it).
  EXPECT_FALSE(facts(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").any_request());
  EXPECT_FALSE(facts(R"({"jsonrpc":"2.0","id":3,"result":{}})").any_request());
  line_facts b =
      facts(R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}])");
  ASSERT_TRUE(b.parsed);
  EXPECT_TRUE(b.batch);
  ASSERT_EQ(b.messages.size(), 2u);
  EXPECT_TRUE(b.messages[0].is_request());
  EXPECT_FALSE(b.messages[1].is_request());
  EXPECT_FALSE(facts("{not json").parsed);
}

TEST(remote_bridge_test, a_200_answer_passes_byte_for_byte) {
  // Verifies row 1: the server's message is written unchanged, on one line.
  const std::string body =
      R"({"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"{\"total\":0,\"stories\":[]}"}],"isError":false}})";
  rendered r = run(std::string(kCall), json(200, body));
  EXPECT_EQ(r.v, verdict::answered);
  EXPECT_EQ(r.out, body + "\n");
}

TEST(remote_bridge_test, an_error_status_with_a_jsonrpc_body_passes_through) {
  // Verifies a 400 (-32700) and a 404 (-32601 on 2026-07-28) are forwarded as the client's
  // answer, since their bodies are the JSON-RPC errors the server means.
  const std::string body =
      R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}})";
  rendered r = run("{oops", json(400, body));
  EXPECT_EQ(r.v, verdict::answered);
  EXPECT_EQ(r.out, body + "\n");
}

TEST(remote_bridge_test, a_null_id_refusal_of_a_request_is_written_under_its_id) {
  // Verifies a transport-level error (id null: the server did not read the request) answering
  // one request is written with that request's id, code, message and data unchanged; and that a
  // null-id answer to a line that is not a request (unparsable) passes as it is.
  const std::string body =
      R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found: start a new one with initialize.","data":{"x":[1,"y"]}}})";
  rendered r = run(std::string(kList), json(404, body));
  EXPECT_EQ(r.v, verdict::answered);
  EXPECT_EQ(
      r.out,
      R"({"jsonrpc":"2.0","id":"a\"b","error":{"code":-32600,"message":"Session not found: start a new one with initialize.","data":{"x":[1,"y"]}}})"
      "\n");
  rendered garbage = run("{oops", json(400, body));
  EXPECT_EQ(garbage.out, body + "\n");
}

TEST(remote_bridge_test, event_stream_messages_are_each_written) {
  // Verifies a text/event-stream answer: every event's data is one line, multi-line data joined.
  http_answer a;
  a.status = 200;
  a.content_type = "text/event-stream; charset=utf-8";
  const std::string body =
      ": comment\r\nevent: message\r\ndata: "
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n"
      "id: 2\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{}}\n\n";
  a.body = body;
  rendered r = run(std::string(kCall), a);
  EXPECT_EQ(r.v, verdict::answered);
  EXPECT_EQ(r.out,
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n"
            "{\"jsonrpc\":\"2.0\", \"id\":7,\"result\":{}}\n");
}

TEST(remote_bridge_test, a_202_prints_nothing_for_a_notification) {
  // Verifies 202 with no body writes nothing.
  rendered r = run(R"({"jsonrpc":"2.0","method":"notifications/initialized"})", json(202, ""));
  EXPECT_EQ(r.v, verdict::answered);
  EXPECT_EQ(r.out, "");
}

TEST(remote_bridge_test, a_429_on_tools_call_is_the_rate_limited_tool_error) {
  // Verifies row 2: retry_after_secs from Retry-After, figures from the body's data, the seed's
  // tool-error shape (the envelope's own rendering).
  http_answer a = json(
      429,
      R"({"jsonrpc":"2.0","id":7,"error":{"code":429,"message":"Rate limit exceeded","data":{"code":"rate_limited","message":"m","retry_after_secs":2,"quota_limit":1000,"quota_used":10,"quota_remaining":990}}})");
  a.retry_after_secs = 3;
  rendered r = run(std::string(kCall), a);
  EXPECT_EQ(r.v, verdict::answered);
  envelope::tool_error te;
  te.code = envelope::tool_error_code::rate_limited;
  te.retry_after_secs = 3;
  te.quota_limit = 1000;
  te.quota_used = 10;
  te.quota_remaining = 990;
  EXPECT_EQ(
      r.out,
      envelope::reference::tool_error_response("7", envelope::revision::v2025_03_26, te) + "\n");
}

TEST(remote_bridge_test, a_429_on_tools_call_of_2026_carries_result_type) {
  // Verifies the tool error is shaped for the message's own revision (_meta 2026-07-28).
  http_answer a = json(429, "not json");
  a.retry_after_secs = 1;
  rendered r = run(
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_usage","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}})",
      a);
  envelope::tool_error te;
  te.code = envelope::tool_error_code::rate_limited;
  te.retry_after_secs = 1;
  EXPECT_EQ(
      r.out,
      envelope::reference::tool_error_response("1", envelope::revision::v2026_07_28, te) + "\n");
}

TEST(remote_bridge_test, a_429_on_another_method_is_the_body_error) {
  // Verifies row 3: the JSON-RPC error of the 429 body, unchanged.
  const std::string body =
      R"({"jsonrpc":"2.0","id":"a\"b","error":{"code":429,"message":"Rate limit exceeded","data":{"code":"rate_limited","retry_after_secs":1}}})";
  http_answer a = json(429, body);
  a.retry_after_secs = 1;
  rendered r = run(std::string(kList), a);
  EXPECT_EQ(r.v, verdict::answered);
  EXPECT_EQ(r.out, body + "\n");
}

TEST(remote_bridge_test, a_401_writes_nothing) {
  // Verifies rows 4-5: a refused key is the caller's to act on (exit 2); nothing is written.
  rendered r = run(std::string(kCall), json(401, R"({"code":"invalid_key","message":"m"})"));
  EXPECT_EQ(r.v, verdict::unauthorized);
  EXPECT_EQ(r.out, "");
}

TEST(remote_bridge_test, unreachable_is_unavailable_for_tools_call) {
  // Verifies row 6 for tools/call: tool error unavailable with retry_after_secs, never an empty
  // result, whose message names the server and the cause (not "no shard answered": the bridge
  // cannot know that), for get_usage as for a search.
  for (std::string_view line :
       {kCall,
        std::string_view(
            R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_usage"}})")}) {
    rendered r = run(std::string(line), refused());
    EXPECT_EQ(r.v, verdict::failed);
    envelope::tool_error te;
    te.code = envelope::tool_error_code::unavailable;
    te.retry_after_secs = 1;
    te.message =
        "The tollgate server at http://127.0.0.1:1/mcp cannot be reached (Couldn't connect to "
        "server), so this call was not sent and not billed. This is an outage, not an empty "
        "result; retry in 1 second(s).";
    EXPECT_EQ(
        r.out,
        envelope::reference::tool_error_response("7", envelope::revision::v2025_03_26, te) + "\n");
    EXPECT_EQ(r.out.find("shard"), std::string::npos) << r.out;
    EXPECT_NE(r.reason.find("Couldn't connect"), std::string::npos);
  }
}

TEST(remote_bridge_test, unreachable_is_internal_error_naming_the_server_for_others) {
  // Verifies row 6 for other requests: -32603 whose message names the server and the reason.
  rendered r = run(std::string(kList), refused());
  EXPECT_EQ(r.v, verdict::failed);
  envelope::rpc_error e{envelope::rpc_error_kind::internal_error,
                        "The tollgate server at http://127.0.0.1:1/mcp cannot be reached "
                        "(Couldn't connect to server), so this call was not sent and not billed. "
                        "This is an outage, not an empty result; retry in 1 second(s).",
                        {},
                        0};
  EXPECT_EQ(r.out, envelope::reference::error_response(R"("a\"b")", e) + "\n");
}

TEST(remote_bridge_test, each_transport_failure_says_its_cause) {
  // Verifies a timeout says the bridge gave up and cancelled the call, and a connection broken
  // after the request left says so, each with retry_after_secs.
  http_answer t;
  t.transport_failed = true;
  t.timed_out = true;
  t.failure = "no answer within 2000 ms: Operation timed out";
  rendered r = run(std::string(kCall), t);
  EXPECT_EQ(r.v, verdict::failed);
  EXPECT_NE(r.out.find("did not answer in time (no answer within 2000 ms"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cancelled it"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(R"(\"retry_after_secs\":1)"), std::string::npos) << r.out;
  http_answer reset;
  reset.transport_failed = true;
  reset.failure = "Empty reply from server";
  r = run(std::string(kCall), reset);
  EXPECT_NE(r.out.find("failed before an answer came back (Empty reply from server)"),
            std::string::npos)
      << r.out;
}

TEST(remote_bridge_test, a_5xx_uses_its_retry_after) {
  // Verifies a 503 is a failure whose retry_after_secs is the server's Retry-After, and whose
  // message carries the server's own.
  http_answer a =
      json(503, R"({"code":"unavailable","message":"This node has not loaded its keys."})");
  a.retry_after_secs = 9;
  rendered r = run(std::string(kCall), a);
  EXPECT_EQ(r.v, verdict::failed);
  EXPECT_NE(r.out.find(R"(\"retry_after_secs\":9)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("answered HTTP 503: This node has not loaded its keys."), std::string::npos)
      << r.out;
  EXPECT_NE(r.reason.find("HTTP 503"), std::string::npos);
}

TEST(remote_bridge_test, a_malformed_answer_is_a_failure) {
  // Verifies a truncated JSON body and a request answered 202 are failures, never forwarded.
  EXPECT_EQ(run(std::string(kCall), json(200, R"({"jsonrpc":"2.0","id":7,"result":{)")).v,
            verdict::failed);
  rendered r = run(std::string(kList), json(202, ""));
  EXPECT_EQ(r.v, verdict::failed);
  EXPECT_NE(r.out.find("-32603"), std::string::npos);
}

TEST(remote_bridge_test, a_refusal_no_retry_mends_is_a_jsonrpc_error_without_retry_after) {
  // Verifies a 4xx (or 3xx) whose body is not JSON-RPC (a URL without /mcp: 404; a proxy's
  // 413 in plain text) is a -32603 for every request, tools/call included, naming the status
  // and what to fix, with no retry_after_secs.
  struct refusal_case {
    long status;
    std::string_view content_type;
    std::string_view body;
    std::string_view says;
  };
  const refusal_case cases[] = {
      {404, "application/json", R"({"code":"not_found","message":"There is no such route."})",
       "HTTP 404: There is no such route.; is the URL the server's MCP endpoint"},
      {413, "text/plain", "request entity too large",
       "HTTP 413; the message is larger than the server accepts"},
      {301, "text/html", "<html>moved</html>", "HTTP 301; the server redirects elsewhere"},
  };
  for (const refusal_case& c : cases) {
    for (std::string_view line : {kCall, kList}) {
      http_answer a = json(c.status, c.body);
      a.content_type = c.content_type;
      rendered r = run(std::string(line), a);
      EXPECT_EQ(r.v, verdict::refused) << c.status;
      EXPECT_NE(r.out.find(R"("error":{"code":-32603)"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("Retrying will not help."), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("retry_after_secs"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("isError"), std::string::npos) << r.out;
      EXPECT_EQ(r.reason, "HTTP " + std::to_string(c.status));
    }
  }
}

TEST(remote_bridge_test, a_failed_batch_answers_each_request_in_one_array) {
  // Verifies a batch: one array with an answer per request, none for its notification.
  rendered r = run(
      R"([{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_usage"}},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"method":"ping"}])",
      refused());
  ASSERT_EQ(r.out.front(), '[');
  ASSERT_EQ(r.out.substr(r.out.size() - 2), "]\n");
  EXPECT_NE(r.out.find(R"({"jsonrpc":"2.0","id":1,"result":{"isError":true)"), std::string::npos);
  EXPECT_NE(r.out.find(R"(,{"jsonrpc":"2.0","id":2,"error":{"code":-32603)"), std::string::npos);
}

TEST(remote_bridge_test, nothing_is_written_for_a_failed_notification) {
  // Verifies a notification that could not be delivered gets no answer (it never has one).
  rendered r = run(R"({"jsonrpc":"2.0","method":"notifications/initialized"})", refused());
  EXPECT_EQ(r.v, verdict::failed);
  EXPECT_EQ(r.out, "");
}

TEST(remote_bridge_test, negotiated_version_is_read_from_initialize) {
  // Verifies the revision an initialize result names is found (JSON and SSE bodies).
  EXPECT_EQ(negotiated_version(
                json(200, R"({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18"}})")),
            "2025-06-18");
  http_answer a;
  a.status = 200;
  a.content_type = "text/event-stream";
  a.body =
      "data: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-11-25\"}}\n\n";
  EXPECT_EQ(negotiated_version(a), "2025-11-25");
  EXPECT_EQ(negotiated_version(refused()), "");
}

TEST(remote_bridge_test, header_values_that_cannot_be_sent_are_base64_wrapped) {
  // Verifies Mcp-Name values: ASCII as is; CR/LF (a header injection), non-ASCII and edge
  // blanks wrapped the way the MCP clients do.
  EXPECT_EQ(header_value("search_stories"), "search_stories");
  EXPECT_EQ(header_value("a\r\nX-Evil: 1"), "=?base64?YQ0KWC1FdmlsOiAx?=");
  EXPECT_EQ(header_value("é"), "=?base64?w6k=?=");
  EXPECT_EQ(header_value(" x"), "=?base64?IHg=?=");
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (auto& a : args) {
    v.push_back(a.data());
  }
  return v;
}

TEST(remote_bridge_test, remote_flags_are_parsed_and_checked) {
  // Verifies --remote URL, --timeout-ms, and clear errors for a bad URL, a bad number, an
  // unreadable --cacert and a local-corpus flag next to --remote.
  std::vector<std::string> ok = {"--remote", "https://api.example.com/mcp", "--timeout-ms", "1500"};
  auto v = argv_of(ok);
  auto o = parse_remote_args(static_cast<int>(v.size()), v.data());
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->url, "https://api.example.com/mcp");
  EXPECT_EQ(o->timeout_ms, 1500);
  EXPECT_TRUE(wants_remote(static_cast<int>(v.size()), v.data()));

  auto error_of = [](std::vector<std::string> args) {
    auto a = argv_of(args);
    auto r = parse_remote_args(static_cast<int>(a.size()), a.data());
    return r ? std::string() : r.error().message;
  };
  EXPECT_NE(error_of({"--remote", "ftp://x/mcp"}).find("not an http:// or https:// URL"),
            std::string::npos);
  EXPECT_NE(error_of({"--remote"}).find("--remote: needs a URL"), std::string::npos);
  EXPECT_NE(error_of({"--remote", "http://x/mcp", "--timeout-ms", "0"}).find("--timeout-ms"),
            std::string::npos);
  EXPECT_NE(error_of({"--remote", "http://x/mcp", "--cacert", "/no/such/ca.pem"})
                .find("--cacert: cannot read"),
            std::string::npos);
  EXPECT_NE(error_of({"--remote", "http://x/mcp", "--data-dir", "d"})
                .find("--data-dir: not with --remote"),
            std::string::npos);
}

}  // namespace
}  // namespace tollgate::app::remote
