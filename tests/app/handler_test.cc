#include "app/handler.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "app/access_log.h"
#include "app/metrics.h"
#include "app/request_record.h"
#include "tollgate/http/parser.h"

namespace tollgate::app {
namespace {

// Parses `raw` (a full request) into `req`; `buf` keeps the bytes the views point into.
http::request parse(std::string& buf) {
  http::request req;
  http::limits lim;
  buf.append(64, '\0');  // padding, as the engine's buffers have
  auto r = http::parse_request(buf.data(), buf.size() - 64, lim, req);
  EXPECT_EQ(r.status, http::parse_status::complete);
  return req;
}

TEST(handler_test, bearer_key_is_taken_from_authorization) {
  // Verifies the Bearer scheme is matched case-insensitively and the key trimmed.
  std::string b = "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: bearer  tg_live_abc\r\n\r\n";
  EXPECT_EQ(presented_key(parse(b)), "tg_live_abc");
  std::string trailing = "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer tg_live_abc  \r\n\r\n";
  EXPECT_EQ(presented_key(parse(trailing)), "tg_live_abc");
  std::string no_token = "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \r\n\r\n";
  EXPECT_EQ(presented_key(parse(no_token)), "");
}

TEST(handler_test, x_api_key_is_accepted) {
  // Verifies the X-API-Key header form.
  std::string b = "GET / HTTP/1.1\r\nHost: t\r\nX-API-Key: tg_live_xyz\r\n\r\n";
  EXPECT_EQ(presented_key(parse(b)), "tg_live_xyz");
  std::string blanks = "GET / HTTP/1.1\r\nHost: t\r\nX-API-Key:  tg_live_x \r\n\r\n";
  EXPECT_EQ(presented_key(parse(blanks)), "tg_live_x");
}

TEST(handler_test, other_authorization_schemes_present_no_key) {
  // Verifies Basic credentials are not mistaken for an API key (and X-API-Key is not consulted
  // when Authorization is present but not Bearer).
  std::string b =
      "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Basic dXNlcjpwYXNz\r\nX-API-Key: k\r\n\r\n";
  EXPECT_EQ(presented_key(parse(b)), "");
  std::string none = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
  EXPECT_EQ(presented_key(parse(none)), "");
}

TEST(handler_test, routes_cover_design_surfaces) {
  // Verifies the router sends each design §1 route to its handler, GET /mcp reaches the MCP
  // endpoint (which answers 405 itself), and unknown methods get 405 with Allow.
  shared_state s;
  register_routes(s);
  EXPECT_EQ(s.router.match("GET", "/healthz").id, static_cast<http::route_id>(route::healthz));
  EXPECT_EQ(s.router.match("POST", "/mcp").id, static_cast<http::route_id>(route::mcp));
  EXPECT_EQ(s.router.match("GET", "/mcp").id, static_cast<http::route_id>(route::mcp));
  auto story = s.router.match("GET", "/v1/stories/123");
  EXPECT_EQ(story.id, static_cast<http::route_id>(route::rest_story));
  EXPECT_EQ(story.rest, "123");
  EXPECT_EQ(s.router.match("GET", "/.well-known/oauth-protected-resource").id,
            static_cast<http::route_id>(route::well_known));
  auto bad = s.router.match("POST", "/v1/usage");
  EXPECT_EQ(bad.status, 405);
  EXPECT_NE(bad.allow.find("GET"), std::string_view::npos);
  EXPECT_EQ(s.router.match("GET", "/nope").status, 404);
}

TEST(handler_test, counters_sum_cores_by_route_and_status) {
  // Verifies /metrics sums every core's counts per route and status.
  request_counters c(2);
  c.count(0, route::mcp, 200);
  c.count(1, route::mcp, 200);
  c.count(1, route::mcp, 429);
  c.count(0, route::healthz, 299);  // not a listed status: "other"
  out_buffer out;
  c.render(out);
  std::string text(out.view());
  EXPECT_NE(text.find("tollgate_requests_total{route=\"mcp\",status=\"200\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("tollgate_requests_total{route=\"mcp\",status=\"429\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("tollgate_requests_total{route=\"healthz\",status=\"other\"} 1\n"),
            std::string::npos);
}

TEST(handler_test, request_metrics_sum_cores_into_cumulative_histograms_and_plans) {
  // Verifies the per-core rows are summed at render: answers by route and outcome, histogram
  // buckets cumulative (a 60 µs and a 20 s answer: le=0.0001 holds 1, +Inf holds 2), and
  // billed and overage calls by plan across cores.
  request_metrics m(2, {"search_stories", "get_story"});
  m.observe(0, route::mcp, 1, outcome::ok, 60'000);
  m.observe(1, route::mcp, 1, outcome::quota_exceeded, 20'000'000'000);
  m.bill(0, "pro", 3, 1);
  m.bill(1, "pro", 2, 2);
  m.bill(1, "free", 1, 0);
  out_buffer out;
  m.render(out);
  const std::string t(out.view());
  auto has = [&](const std::string& line) {
    EXPECT_NE(t.find("\n" + line + "\n"), std::string::npos) << line << "\n" << t;
  };
  has(R"(tollgate_answers_total{route="mcp",outcome="ok"} 1)");
  has(R"(tollgate_answers_total{route="mcp",outcome="quota_exceeded"} 1)");
  has(R"(tollgate_request_duration_seconds_bucket{route="mcp",tool="search_stories",le="5e-05"} 0)");
  has(R"(tollgate_request_duration_seconds_bucket{route="mcp",tool="search_stories",le="0.0001"} 1)");
  has(R"(tollgate_request_duration_seconds_bucket{route="mcp",tool="search_stories",le="10"} 1)");
  has(R"(tollgate_request_duration_seconds_bucket{route="mcp",tool="search_stories",le="+Inf"} 2)");
  has(R"(tollgate_request_duration_seconds_count{route="mcp",tool="search_stories"} 2)");
  has(R"(tollgate_billed_calls_total{plan="pro"} 5)");
  has(R"(tollgate_overage_calls_total{plan="pro"} 3)");
  has(R"(tollgate_billed_calls_total{plan="free"} 1)");
  has("# TYPE tollgate_request_duration_seconds histogram");
}

TEST(handler_test, request_metrics_past_max_plans_count_as_other) {
  // Verifies a core keeps max_plans plan names and counts the rest under plan="other".
  request_metrics m(1, {});
  for (size_t i = 0; i < request_metrics::max_plans + 3; ++i) {
    m.bill(0, "p" + std::to_string(i), 1, 0);
  }
  out_buffer out;
  m.render(out);
  const std::string t(out.view());
  EXPECT_NE(t.find("tollgate_billed_calls_total{plan=\"other\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tollgate_billed_calls_total{plan=\"p0\"} 1\n"), std::string::npos);
}

TEST(handler_test, access_line_is_json_with_rfc3339_microseconds_and_escaped_text) {
  // Verifies one line's time format, its escaping of a client-sent MCP method, the partial
  // shards object, and that it ends in exactly one newline.
  request_record r;
  r.time_ns = 1764801139'123456789;  // 2025-12-03T22:32:19.123456789Z
  r.status = 200;
  r.r = route::mcp;
  r.method.set("POST");
  r.mcp_method.set("a\"b\nc");
  r.shards_answered = 2;
  r.shards_total = 3;
  r.bytes_in = 10;
  r.bytes_out = 20;
  out_buffer out;
  format_access_line(out, r, 1, 1'500'000);
  EXPECT_EQ(std::string(out.view()),
            R"({"time":"2025-12-03T22:32:19.123456Z","core":1,"remote":"","method":"POST",)"
            R"("route":"mcp","mcp_method":"a\"b\nc","status":200,"outcome":"ok","billed":false,)"
            R"("overage":false,"latency_us":1500,"bytes_in":10,"bytes_out":20,)"
            R"("shards":{"answered":2,"total":3}})"
            "\n");
}

}  // namespace
}  // namespace tollgate::app
