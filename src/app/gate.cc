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

gate::gate(const http::router& router, quota::core_ledger& quota, const cluster::agent* cluster,
           gate_oauth oauth, std::string_view webhook_path)
    : router_(router),
      quota_(quota),
      cluster_(cluster),
      oauth_(oauth),
      webhook_path_(webhook_path) {
  metadata_url_.reserve(400);
}

bool token_in_query(std::string_view q) noexcept {
  for (size_t i = 0; i < q.size();) {
    const size_t amp = q.find('&', i);
    const std::string_view part = q.substr(i, amp == std::string_view::npos ? q.npos : amp - i);
    if (part.substr(0, 13) == "access_token=") {
      return true;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    i = amp + 1;
  }
  return false;
}

std::string_view oauth_base(const http::request& req, std::string_view issuer, std::string& buf) {
  buf.clear();
  if (!issuer.empty()) {
    buf.append(issuer);
    return buf;
  }
  const std::string_view host = ascii::trim(req.field_value(http::field::host));
  bool ok = !host.empty() && host.size() <= 255;
  for (char c : host) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '-' || c == ':' || c == '[' || c == ']');
  }
  buf.append("http://");
  buf.append(ok ? host : std::string_view("localhost"));
  return buf;
}

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
  if (m.status == 405 && !webhook_path_.empty() && req.path == webhook_path_) {
    v.r = route::webhook;  // the same: the webhook answers every method (405 but for POST)
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

const quota::key_record* gate::credential(const http::request& req) {
  // A token in the query string is refused whatever the headers hold (MCP authorization).
  if (oauth_.on && token_in_query(req.query)) {
    return nullptr;
  }
  const std::string_view presented = presented_key(req);
  const quota::key_record* k = quota_.authenticate(presented);
  if (k == nullptr && oauth_.on && presented.substr(0, 5) == "tgat_") {
    // A token issued a moment ago on another core, before this core switched tables.
    k = quota_.authenticate_newest(presented);
  }
  return k;
}

void gate::admit(const http::request& req, gate_verdict& v, int64_t now_ns,
                 const carried_charge& carried) {
  const std::string_view presented = presented_key(req);
  const bool in_query = oauth_.on && token_in_query(req.query);
  v.key = credential(req);
  v.received_ns = now_ns;
  v.deadline_ms = deadline_of(req);
  if (v.key == nullptr) {
    if (oauth_.on) {
      (void)oauth_base(req, oauth_.issuer, metadata_url_);
      metadata_url_.append("/.well-known/oauth-protected-resource/mcp");
      v.refusal.resource_metadata = metadata_url_;
    }
    // Before a cluster node's first key load no key is known, so none is called invalid.
    v.refusal.row = cluster_ != nullptr && !cluster_->keys_loaded()
                        ? &envelope::row_named("keys not loaded yet")
                        : &envelope::row_of(outcome::invalid_key);
    v.refusal.key_presented = !presented.empty() || in_query;
    return;
  }
  if (carried.fig != nullptr) {
    v.fig = *carried.fig;
    v.received_ns = carried.received_ns;
    v.carried = true;
  } else if (quota_.check_rate(*v.key, now_ns, v.fig) == quota::rate_verdict::limited) {
    v.refusal.row = &envelope::row_of(outcome::rate_limited);
    v.refusal.retry_after_secs = v.fig.retry_after_secs;
    return;
  }
  if (v.r == route::rest_search || v.r == route::rest_story) {
    v.args = &rest_args_.decode(
        v.r == route::rest_search ? rest::resource::search : rest::resource::story, req.query,
        v.rest);
  }
}

}  // namespace tollgate::app
