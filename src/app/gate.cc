#include "gate.h"

#include <strings.h>

#include <charconv>

#include "tollgate/cluster/agent.h"
#include "tollgate/common/ascii.h"

namespace tollgate::app {
namespace {

// The request's Tollgate-Deadline: the unix time in milliseconds after which its client has
// given up (the stdio bridge sends it; design §5). 0 when absent or not a plain number, which
// leaves the call without a deadline rather than refusing it.
int64_t deadline_of(const http::request& req) noexcept {
  const std::string_view v = ascii::trim(req.field_value(http::field::tollgate_deadline));
  int64_t ms = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  return ec == std::errc() && p == v.data() + v.size() && ms > 0 ? ms : 0;
}

}  // namespace

std::string_view presented_key(const http::request& req) noexcept {
  std::string_view a = req.field_value(http::field::authorization);
  if (!a.empty()) {
    if (a.size() > 7 && strncasecmp(a.data(), "bearer ", 7) == 0) {
      a.remove_prefix(7);
      while (!a.empty() && a.front() == ' ') {
        a.remove_prefix(1);
      }
      return a;
    }
    return {};
  }
  return req.field_value(http::field::x_api_key);
}

gate_verdict gate::match(const http::request& req) const {
  gate_verdict v;
  const http::route_match m = router_.match(req.method, req.path);
  if (m.status == 405 && req.path == "/mcp") {
    // Any other method on the MCP endpoint: the endpoint's own 405 (`Allow: POST`, a JSON-RPC
    // body), as GET gets, rather than the router's list of every method some /mcp route takes.
    v.r = route::mcp;
    v.status = 405;
    return v;
  }
  if (m.status != 200) {
    v.status = m.status;
    v.allow = m.allow;
    return v;
  }
  v.r = static_cast<route>(m.id);
  v.rest = m.rest;
  v.keyed = v.r == route::rest_search || v.r == route::rest_story || v.r == route::rest_usage ||
            (v.r == route::mcp && req.method == "POST");
  return v;
}

void gate::admit(const http::request& req, gate_verdict& v, int64_t now_ns,
                 const carried_charge& carried) {
  const std::string_view presented = presented_key(req);
  v.key = quota_.authenticate(presented);
  v.received_ns = now_ns;
  v.deadline_ms = deadline_of(req);
  if (v.key == nullptr) {
    // Before a cluster node's first key load no key is known, so none is called invalid.
    v.refusal.row = cluster_ != nullptr && !cluster_->keys_loaded()
                        ? &envelope::row_named("keys not loaded yet")
                        : &envelope::row_of(outcome::invalid_key);
    v.refusal.key_presented = !presented.empty();
    return;
  }
  if (carried.fig != nullptr) {
    v.fig = *carried.fig;
    v.received_ns = carried.received_ns;
    v.carried = true;
    return;
  }
  if (quota_.check_rate(*v.key, now_ns, v.fig) == quota::rate_verdict::limited) {
    v.refusal.row = &envelope::row_of(outcome::rate_limited);
    v.refusal.retry_after_secs = v.fig.retry_after_secs;
  }
}

}  // namespace tollgate::app
