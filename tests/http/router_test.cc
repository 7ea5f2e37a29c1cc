// Tests for the HTTP router: exact and prefix routes, 404, 405 with Allow, HEAD via GET, and
// allocation-free matching.
#include "tollgate/http/router.h"

#include <gtest/gtest.h>

#include "support/alloc_counter.h"

namespace tollgate::http {
namespace {

enum : route_id {
  r_mcp_post = 1,
  r_mcp_get,
  r_mcp_delete,
  r_health,
  r_story,
  r_stories,
  r_special
};

router make_router() {
  router r;
  r.add("POST", "/mcp", r_mcp_post);
  r.add("GET", "/mcp", r_mcp_get);
  r.add("DELETE", "/mcp", r_mcp_delete);
  r.add("GET", "/healthz", r_health);
  r.add("GET", "/v1/stories", r_stories);
  r.add_prefix("GET", "/v1/stories/", r_story);
  r.add_prefix("POST", "/v1/stories/special/", r_special);
  return r;
}

TEST(http_router_test, exact_route_matches_method) {
  // Verifies (method, exact path) resolves to the registered id.
  const router r = make_router();
  route_match m = r.match("POST", "/mcp");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.id, r_mcp_post);
  m = r.match("DELETE", "/mcp");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.id, r_mcp_delete);
  EXPECT_EQ(r.match("GET", "/healthz").id, r_health);
}

TEST(http_router_test, unknown_path_is_404) {
  // Verifies paths that match nothing, including near misses, are 404.
  const router r = make_router();
  EXPECT_EQ(r.match("GET", "/healthz/").status, 404);
  EXPECT_EQ(r.match("GET", "/mc").status, 404);
  EXPECT_EQ(r.match("GET", "/").status, 404);
  EXPECT_EQ(r.match("GET", "/v1/storiesX").status, 404);
}

TEST(http_router_test, wrong_method_is_405_with_allow) {
  // Verifies a known path with an unsupported method lists the path's methods in Allow.
  const router r = make_router();
  route_match m = r.match("PUT", "/mcp");
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.allow, "GET, HEAD, POST, DELETE");
  EXPECT_EQ(m.allow_line, "Allow: GET, HEAD, POST, DELETE\r\n");
  m = r.match("POST", "/healthz");
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.allow, "GET, HEAD");
  m = r.match("BREW", "/healthz");
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.allow, "GET, HEAD");
  EXPECT_EQ(r.match("get", "/healthz").status, 405);  // methods are case-sensitive
}

TEST(http_router_test, prefix_route_returns_rest_and_longest_wins) {
  // Verifies prefix routes expose the remainder and the longest matching prefix decides.
  const router r = make_router();
  route_match m = r.match("GET", "/v1/stories/abc123");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.id, r_story);
  EXPECT_EQ(m.rest, "abc123");
  m = r.match("POST", "/v1/stories/special/x");
  EXPECT_EQ(m.id, r_special);
  EXPECT_EQ(m.rest, "x");
  m = r.match("GET", "/v1/stories/special/x");  // the longer prefix only allows POST
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.allow, "POST");
  m = r.match("GET", "/v1/stories");  // exact route, not the prefix
  EXPECT_EQ(m.id, r_stories);
  EXPECT_EQ(m.rest, "");
}

TEST(http_router_test, head_falls_back_to_get) {
  // Verifies HEAD is served by the GET route with head set, so the answer omits the body.
  const router r = make_router();
  const route_match m = r.match("HEAD", "/healthz");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.id, r_health);
  EXPECT_TRUE(m.head);
  EXPECT_FALSE(r.match("GET", "/healthz").head);
}

TEST(http_router_test, matching_allocates_nothing) {
  // Verifies lookups (hits, 404s and 405s) allocate nothing.
  const router r = make_router();
  test::alloc_scope scope;
  int sum = 0;
  for (int i = 0; i < 1000; ++i) {
    sum += r.match("POST", "/mcp").status + r.match("GET", "/nope").status +
           r.match("PATCH", "/mcp").status + r.match("GET", "/v1/stories/42").status;
  }
  EXPECT_EQ(sum, 1000 * (200 + 404 + 405 + 200));
  EXPECT_EQ(scope.count(), 0u);
}

TEST(http_router_test, duplicate_route_aborts) {
  // Verifies registering the same (method, path) twice is a fatal start-up bug.
  EXPECT_DEATH(
      {
        router r;
        r.add("GET", "/a", 1);
        r.add("GET", "/a", 2);
      },
      "check failed");
}

}  // namespace
}  // namespace tollgate::http
