// The Streamable HTTP transport of /mcp (http_transport.cc): 202 for notifications and
// responses, batches, Accept/Content-Type/Origin/method/version/size rules, legacy sessions, and
// the 401 and 429 answers.
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

TEST_F(endpoint_test, accept_is_406_only_when_it_excludes_json) {
  // Verifies the server, which answers application/json only, serves every Accept that admits
  // JSON (alone, absent, wildcards, beside text/event-stream) and is 406 only when Accept
  // excludes it: no JSON range at all, or the most specific matching range at q=0.
  auto status = [&](std::initializer_list<const char*> accepts) {
    http_case c;
    c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
    c.drop("Accept");
    for (const char* a : accepts) {
      c.add("Accept", a);
    }
    return post(c).status;
  };
  for (const char* ok :
       {"application/json", "APPLICATION/JSON", "application/json, text/event-stream",
        "text/event-stream;q=0.9, APPLICATION/JSON", "*/*", "application/*", "text/html, */*;q=0.1",
        "application/json;q=0.5", "application/json;q=0.001",
        "application/json;q=0, application/json", "*/*;q=0, application/json",
        "application/*;q=0, application/json;q=1", ""}) {
    EXPECT_EQ(status({ok}), 200) << ok;
  }
  EXPECT_EQ(status({}), 200) << "no Accept field";
  for (const char* bad : {"text/event-stream", "text/html", "text/*", "application/json;q=0",
                          "application/json; q=0.000", "*/*;q=0", "application/*;Q=0",
                          "application/json;q=0, */*", "application/jsonx", "*/*;q=0, text/html"}) {
    EXPECT_EQ(status({bad}), 406) << bad;
  }
  // Two Accept lines are one list (RFC 9110 §5.3).
  EXPECT_EQ(status({"text/event-stream", "application/json"}), 200);
  EXPECT_EQ(status({"text/event-stream", "text/html"}), 406);
  EXPECT_EQ(status({"*/*", "application/json;q=0"}), 406);
  // The 406 says why, as a JSON-RPC error.
  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  c.set("Accept", "text/event-stream");
  auto r = post(c);
  json_doc d(r.body);
  ASSERT_TRUE(d.ok) << r.body;
  EXPECT_EQ(d.num("/error/code"), -32600);
  EXPECT_NE(d.str("/error/message").find("application/json only"), std::string::npos) << r.body;
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
  EXPECT_EQ(status("application/jsoN", "APPLICATION/json;charset=UTF-8"), 200);
  EXPECT_EQ(status("application_json, text/event-stream", "application/json"), 406);
  EXPECT_EQ(status("applicationOjson, text/event-stream", "application/json"), 406);
  EXPECT_EQ(status("application/json2, text/event-stream", "application/json"), 406);
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

TEST(endpoint_options_test, cors_preflight_and_answers_for_allowed_origins) {
  // Verifies a CORS preflight (OPTIONS with an allowed Origin) is 204 allowing the methods, the
  // MCP headers and Authorization and exposing the session, challenge, rate and quota headers;
  // an answer to an allowed Origin gains Access-Control-Allow-Origin (that origin) and the
  // exposed list after its status line, framing intact; a foreign Origin gets 403 and no CORS.
  auto search = std::make_shared<fake_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  endpoint_options o;
  o.allowed_origins = {"https://app.example.com"};
  endpoint ep(tools, env, o);
  fake_host h;
  out_buffer out;
  http_case pre;
  pre.method = "OPTIONS";
  pre.drop("Content-Type").drop("Accept");
  pre.set("Origin", "https://app.example.com");
  pre.set("Access-Control-Request-Method", "POST");
  pre.set("Access-Control-Request-Headers", "authorization, content-type, mcp-protocol-version");
  http_reply p = run(ep, h, pre, out);
  EXPECT_EQ(p.status, 204) << p.raw;
  EXPECT_EQ(p.header("Access-Control-Allow-Origin"), "https://app.example.com");
  const std::string allow_headers = p.header("Access-Control-Allow-Headers");
  for (const char* name : {"Authorization", "Content-Type", "Accept", "Mcp-Session-Id",
                           "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"}) {
    EXPECT_NE(allow_headers.find(name), std::string::npos) << name << " in " << allow_headers;
  }
  EXPECT_NE(p.header("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  const std::string exposed = p.header("Access-Control-Expose-Headers");
  for (const char* name : {"Mcp-Session-Id", "WWW-Authenticate", "Retry-After", "X-RateLimit-Limit",
                           "X-Quota-Remaining", "RateLimit-Policy", "RateLimit"}) {
    EXPECT_NE(exposed.find(name), std::string::npos) << name << " in " << exposed;
  }
  EXPECT_EQ(h.admits, 0);

  http_case c;
  c.body = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  c.set("Origin", "https://app.example.com");
  std::string padded = c.body + std::string(body_padding, ' ');
  http::request req;
  req.method = "POST";
  req.target = req.path = "/mcp";
  for (const auto& kv : c.headers) {
    req.add_header(kv.first, kv.second);
  }
  req.body = std::string_view(padded.data(), c.body.size());
  out.clear();
  out.append("previous response bytes");
  const size_t start = out.size();
  ep.handle_http(req, h, out, 0);
  const std::string plain(out.view().substr(start));
  ep.add_cors_headers(req, out, start);
  const std::string with(out.view().substr(start));
  EXPECT_EQ(std::string(out.view().substr(0, start)), "previous response bytes");
  const size_t line = plain.find("\r\n") + 2;
  EXPECT_EQ(with.substr(0, line), plain.substr(0, line));
  EXPECT_EQ(with.substr(with.size() - (plain.size() - line)), plain.substr(line))
      << "the rest of the response is unchanged";
  EXPECT_NE(with.find("\r\nAccess-Control-Allow-Origin: https://app.example.com\r\n"),
            std::string::npos)
      << with;
  EXPECT_NE(with.find("Access-Control-Expose-Headers: Mcp-Session-Id"), std::string::npos);
  EXPECT_NE(with.find("\r\nVary: Origin\r\n"), std::string::npos);

  // No Origin (an agent), or a foreign one (403): nothing added.
  for (const char* origin : {"", "https://evil.example"}) {
    http::request r2;
    r2.method = "POST";
    r2.target = r2.path = "/mcp";
    r2.add_header("Accept", "application/json");
    r2.add_header("Content-Type", "application/json");
    if (*origin != '\0') {
      r2.add_header("Origin", origin);
    }
    r2.body = req.body;
    out.clear();
    const http::response_info info = ep.handle_http(r2, h, out, 0);
    EXPECT_EQ(info.status, *origin != '\0' ? 403 : 200);
    const std::string before(out.view());
    ep.add_cors_headers(r2, out, 0);
    EXPECT_EQ(std::string(out.view()), before) << origin;
  }
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

// ---- the gate's refusals, through answer() ----

TEST_F(endpoint_test, render_unauthorized_is_bearer_realm_without_envelope) {
  // Verifies the gate's 401: WWW-Authenticate Bearer realm, invalid_key body, no JSON-RPC.
  http::request req;
  out.clear();
  auto info = ep.answer(req, {&envelope::row_of(outcome::invalid_key)}, h, out);
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
  const envelope::gate_refusal limited{&envelope::row_of(outcome::rate_limited), false, 3};
  auto info = ep.answer(req, limited, h, out);
  EXPECT_EQ(info.status, 429);
  std::string expect_body = envelope::reference::error_response(
      "\"r1\"", {envelope::rpc_error_kind::rate_limited, {}, {}, 3});
  std::string extra =
      "Retry-After: 3\r\nX-Quota-Limit: 1000\r\nX-Quota-Used: 10\r\nX-Quota-Remaining: 990\r\n";
  EXPECT_EQ(out.view(), envelope::reference::http(429, false, extra, expect_body));

  std::string bad = "{oops" + std::string(64, ' ');
  req.body = std::string_view(bad.data(), 5);
  out.clear();
  (void)ep.answer(req, {&envelope::row_of(outcome::rate_limited), false, 0}, h, out);
  EXPECT_NE(out.view().find(R"({"jsonrpc":"2.0","id":null,"error":{"code":429)"),
            std::string_view::npos);
  EXPECT_NE(out.view().find("Retry-After: 1\r\n"), std::string_view::npos);
}

TEST_F(endpoint_test, keys_not_loaded_is_a_whole_503_with_retry_after) {
  // Verifies the gate's third whole refusal (cluster mode before the first key load): 503,
  // Retry-After: 1, the unavailable body, no JSON-RPC, and its outcome reported to the host.
  http::request req;
  out.clear();
  auto info = ep.answer(req, {&envelope::row_named("keys not loaded yet")}, h, out);
  EXPECT_EQ(info.status, 503);
  EXPECT_NE(out.view().find("Retry-After: 1\r\n"), std::string_view::npos);
  EXPECT_NE(out.view().find(R"({"code":"unavailable")"), std::string_view::npos);
  EXPECT_EQ(out.view().find("jsonrpc"), std::string_view::npos);
}

}  // namespace
}  // namespace tollgate::mcp
