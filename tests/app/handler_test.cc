#include "app/handler.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "app/metrics.h"
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
  std::string b = "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Basic dXNlcjpwYXNz\r\nX-API-Key: k\r\n\r\n";
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

}  // namespace
}  // namespace tollgate::app
