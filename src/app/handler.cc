#include "handler.h"

#include <fmt/format.h>
#include <strings.h>

#include <charconv>
#include <chrono>
#include <iterator>

#include "admin_api.h"
#include "reload.h"
#include "tollgate/common/ascii.h"
#include "tollgate/common/json_out.h"
#include "tollgate/common/percent.h"
#include "tollgate/net/server.h"
#include "tools.h"

namespace tollgate::app {
namespace {

constexpr http::route_id id_of(route r) { return static_cast<http::route_id>(r); }

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

namespace {
http::response_info ops_text(const http::request& req, int status, std::string_view body,
                             std::string_view content_type, out_buffer& out) {
  auto head = http::head_for(req, status);
  head.content_type = content_type;
  http::write_response(out, head, body);
  return {status, head.close};
}

// The usage journals' health, per core (design §6: a billed call that cannot be recorded).
void journal_metrics(quota::service& q, out_buffer& out) {
  auto it = std::back_inserter(out);
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  auto per_core = [&](std::string_view name, std::string_view help, std::string_view type,
                      auto value) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (int c = 0; c < q.cores(); ++c) {
      fmt::format_to(it, "{}{{core=\"{}\"}} {}\n", name, c, value(q.ledger(c).health()));
    }
  };
  per_core("tollgate_journal_write_errors_total",
           "Usage journal write, fdatasync, open and space-reservation failures.", "counter",
           [](const quota::journal_health& h) { return h.errors.load(std::memory_order_relaxed); });
  per_core(
      "tollgate_journal_refused_total",
      "Billed calls refused as unavailable because their usage could not be recorded.", "counter",
      [](const quota::journal_health& h) { return h.refused.load(std::memory_order_relaxed); });
  per_core("tollgate_journal_failing", "1 while the core's usage journal cannot be written.",
           "gauge", [](const quota::journal_health& h) {
             return h.failing.load(std::memory_order_relaxed) ? 1 : 0;
           });
  per_core("tollgate_journal_oldest_unwritten_seconds",
           "Age of the oldest usage record not yet written (0: none).", "gauge",
           [now](const quota::journal_health& h) {
             const int64_t since = h.unwritten_since_ns.load(std::memory_order_relaxed);
             return since == 0 || now <= since ? 0.0 : static_cast<double>(now - since) / 1e9;
           });
  fmt::format_to(it,
                 "# HELP tollgate_snapshot_write_errors_total Usage snapshots not written (the "
                 "journals they would compact are kept).\n"
                 "# TYPE tollgate_snapshot_write_errors_total counter\n"
                 "tollgate_snapshot_write_errors_total {}\n",
                 q.snapshot_errors());
}

// The engine's per-core series: a flat table, one metric a row.
struct core_series {
  std::string_view name;
  std::string_view help;
  std::string_view type;
  std::atomic<uint64_t> net::core_stats::*field;
};
constexpr core_series k_core_series[] = {
    {"tollgate_open_connections", "Connections open now.", "gauge",
     &net::core_stats::open_connections},
    {"tollgate_loop_passes_total", "Event-loop passes.", "counter", &net::core_stats::loop_passes},
    {"tollgate_completions_total", "io_uring completions reaped.", "counter",
     &net::core_stats::completions},
    {"tollgate_connections_accepted_total", "Connections accepted.", "counter",
     &net::core_stats::accepted},
    {"tollgate_connection_timeouts_total", "Connections closed by a timeout.", "counter",
     &net::core_stats::timeouts},
    {"tollgate_requests_handled_total", "Requests handed to the handler.", "counter",
     &net::core_stats::requests},
    {"tollgate_connections_closed_total", "Connections closed (any reason).", "counter",
     &net::core_stats::closed},
    {"tollgate_connections_rejected_total",
     "Connections answered 503 and closed at once: every core at max_connections.", "counter",
     &net::core_stats::rejected},
    {"tollgate_accept_errors_total", "accept() failures (EMFILE, ENFILE, ...).", "counter",
     &net::core_stats::accept_errors},
    {"tollgate_connections_handed_off_total",
     "Connections accepted by a core at max_connections and served by another core.", "counter",
     &net::core_stats::handed_off},
    {"tollgate_connections_rejected_no_fd_total",
     "Connections answered 503 and closed to keep descriptors for the admin listener and the "
     "data files.",
     "counter", &net::core_stats::rejected_no_fd},
    {"tollgate_parse_errors_total", "Requests refused by the HTTP parser.", "counter",
     &net::core_stats::parse_errors},
    {"tollgate_journal_held_responses", "Connections whose answers wait for a usage journal write.",
     "gauge", &net::core_stats::journal_held},
};

void engine_metrics(const net::server& engine, out_buffer& out) {
  auto it = std::back_inserter(out);
  const int n = engine.threads();
  for (const core_series& m : k_core_series) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} {}\n", m.name, m.help, m.name, m.type);
    for (int c = 0; c < n; ++c) {
      fmt::format_to(it, "{}{{core=\"{}\"}} {}\n", m.name, c,
                     (engine.stats(c).*m.field).load(std::memory_order_relaxed));
    }
  }
}

// The answer caches' per-core counters: a flat table, one metric a row.
struct cache_series {
  std::string_view name;
  std::string_view help;
  std::atomic<uint64_t> search_cache_stats::*field;
};
constexpr cache_series k_cache_series[] = {
    {"tollgate_search_cache_hits_total",
     "search_stories answers served from the core's answer cache.", &search_cache_stats::hits},
    {"tollgate_search_cache_misses_total",
     "search_stories answers searched and rendered (not in the cache).",
     &search_cache_stats::misses},
    {"tollgate_search_cache_inserts_total", "Answers stored in the cache.",
     &search_cache_stats::inserts},
    {"tollgate_search_cache_evictions_total", "Cached answers replaced by newer ones.",
     &search_cache_stats::evictions},
    {"tollgate_search_cache_oversize_total",
     "Answers too large for a cache entry (served uncached).", &search_cache_stats::oversize},
};

void cache_metrics(const shared_state& s_, out_buffer& out) {
  auto it = std::back_inserter(out);
  for (const cache_series& m : k_cache_series) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} counter\n", m.name, m.help, m.name);
    for (int c = 0; c < s_.cores; ++c) {
      fmt::format_to(
          it, "{}{{core=\"{}\"}} {}\n", m.name, c,
          (s_.search_cache[static_cast<size_t>(c)].*m.field).load(std::memory_order_relaxed));
    }
  }
}

void session_metrics(const shared_state& s_, out_buffer& out) {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP tollgate_mcp_sessions Legacy MCP sessions live now.\n"
                 "# TYPE tollgate_mcp_sessions gauge\ntollgate_mcp_sessions {}\n"
                 "# HELP tollgate_mcp_sessions_evicted_total Sessions ended to make room for a "
                 "new one at [mcp] max_sessions.\n"
                 "# TYPE tollgate_mcp_sessions_evicted_total counter\n"
                 "tollgate_mcp_sessions_evicted_total {}\n",
                 s_.sessions->size(), s_.sessions->evicted());
}

void fleet_metrics(const shared_state& s_, out_buffer& out) {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP tollgate_fleet_shard_up Whether a remote shard is taking queries (0: "
                 "marked down after failures, probed again later).\n"
                 "# TYPE tollgate_fleet_shard_up gauge\n");
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  for (uint32_t r = 0; r < s_.fleet->remotes.size(); ++r) {
    const auto& e = s_.fleet->remotes[r];
    fmt::format_to(it, "tollgate_fleet_shard_up{{shard=\"{}:{}\"}} {}\n", e.host, e.port,
                   s_.fleet->health->is_down(r, now) ? 0 : 1);
  }
}

void cluster_metrics(const shared_state& s_, out_buffer& out) {
  auto it = std::back_inserter(out);
  const cluster::agent_stats c = s_.cluster->stats();
  const std::string node = s_.cluster->config().node;
  auto one = [&](std::string_view name, std::string_view help, std::string_view type, auto value) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} {}\n{}{{node=\"{}\"}} {}\n", name, help, name, type,
                   name, node, value);
  };
  one("tollgate_cluster_redis_up", "Whether the node reaches Redis now.", "gauge",
      c.redis_up ? 1 : 0);
  one("tollgate_cluster_keys_loaded", "Whether keys were loaded from Redis at least once.", "gauge",
      c.keys_loaded ? 1 : 0);
  one("tollgate_cluster_lease_grants_total", "Leases of quota units granted by Redis.", "counter",
      c.lease_grants);
  one("tollgate_cluster_lease_units_total", "Quota units leased from Redis.", "counter",
      c.lease_units);
  one("tollgate_cluster_lease_waits_total",
      "Times a core asked for a lease (its node's pool of the key was empty; the request parked).",
      "counter", c.lease_waits);
  one("tollgate_cluster_units_returned_total", "Unused quota units handed back to Redis.",
      "counter", c.units_returned);
  one("tollgate_cluster_units_held", "Quota units leased to this node and not yet used.", "gauge",
      c.units_held);
  one("tollgate_cluster_push_lag_seconds",
      "Seconds since every key's usage was last pushed to Redis.", "gauge", c.push_lag_secs);
  one("tollgate_cluster_outage_seconds_total", "Seconds Redis could not be reached.", "counter",
      c.outage_secs);
  one("tollgate_cluster_redis_commands_total", "Commands this node sent to Redis.", "counter",
      c.redis_commands);
  one("tollgate_cluster_idle_keys_skipped_total",
      "Key pushes skipped because nothing changed (idle keys cost Redis nothing).", "counter",
      c.idle_skipped);
  one("tollgate_cluster_restores_total",
      "Times this node put its copy of the keys back into a Redis that lost its data.", "counter",
      c.restores);
}

http::response_info metrics(const shared_state& s_, const http::request& req, out_buffer& scratch_,
                            out_buffer& out) {
  scratch_.clear();
  s_.counters->render(scratch_);
  if (s_.metrics) {
    s_.metrics->render(scratch_);
  }
  if (s_.engine != nullptr) {
    engine_metrics(*s_.engine, scratch_);
  }
  if (s_.quota) {
    journal_metrics(*s_.quota, scratch_);
  }
  if (s_.search_cache) {
    cache_metrics(s_, scratch_);
  }
  if (s_.sessions) {
    session_metrics(s_, scratch_);
  }
  if (s_.fleet) {
    fleet_metrics(s_, scratch_);
  }
  if (s_.cluster) {
    cluster_metrics(s_, scratch_);
  }
  if (s_.admin) {
    s_.admin->render_metrics(scratch_);
  }
  return ops_text(req, 200, scratch_.view(), "text/plain; version=0.0.4", out);
}

}  // namespace

http::response_info handle_ops(const shared_state& s, route r, const http::request& req,
                               out_buffer& scratch, out_buffer& out) {
  switch (r) {
    case route::healthz:
      return ops_text(req, 200, "ok\n", "text/plain", out);
    case route::readyz:
      if (!s.ready.load(std::memory_order_acquire)) {
        return ops_text(req, 503, "starting\n", "text/plain", out);
      }
      if (s.cluster && !s.cluster->keys_loaded()) {
        return ops_text(req, 503, "not ready: keys not loaded from redis yet\n", "text/plain", out);
      }
      // Not ready while billed calls cannot be recorded (they are refused as unavailable).
      if (s.quota && !s.quota->journals_ok()) {
        return ops_text(req, 503, "usage journal failing\n", "text/plain", out);
      }
      return ops_text(req, 200, "ready\n", "text/plain", out);
    default:
      return metrics(s, req, scratch, out);
  }
}

http::response_info ops_handler::handle(const http::request& req, out_buffer& out,
                                        int64_t /*now_ns*/) {
  if (req.path == "/admin/reload") {  // the admin listener only: never on the public one
    if (req.method != "POST") {
      auto head = http::head_for(req, 405);
      head.content_type = "application/json";
      head.extra_headers = "Allow: POST\r\n";
      http::write_response(
          out, head,
          R"({"code":"method_not_allowed","message":"Reload with POST /admin/reload."})");
      return {405, head.close};
    }
    const reload_result r = reload_plans_and_keys(s_, "admin reload");
    scratch_.clear();
    if (r.ok) {
      fmt::format_to(std::back_inserter(scratch_), R"({{"reloaded":true,"plans":{},"keys":{}}})",
                     r.plans, r.keys);
    } else {
      scratch_.append(R"({"code":"reload_failed","message":")");
      append_json_escaped(scratch_,
                          "Nothing was reloaded; the previous plans and keys stay in "
                          "force: " +
                              r.message);
      scratch_.append("\"}");
    }
    return ops_text(req, r.ok ? 200 : 422, scratch_.view(), "application/json", out);
  }
  http::route_match m = s_.router.match(req.method, req.path);
  if (m.status == 200) {
    auto r = static_cast<route>(m.id);
    if (r == route::healthz || r == route::readyz || r == route::metrics) {
      return handle_ops(s_, r, req, scratch_, out);
    }
  }
  if (s_.admin && req.path.substr(0, 7) == "/admin/") {  // accounts, keys, usage, webhook
    return s_.admin->handle(req, out);
  }
  auto head = http::head_for(req, 404);
  head.content_type = "application/json";
  http::write_response(out, head, k_no_such_route);
  return {404, head.close};
}

void register_routes(shared_state& s) {
  auto& r = s.router;
  r.add("GET", "/healthz", id_of(route::healthz));
  r.add("GET", "/readyz", id_of(route::readyz));
  r.add("GET", "/metrics", id_of(route::metrics));
  // GET and DELETE reach the endpoint too: it answers 405 `Allow: POST` while stateless and
  // ends a session on DELETE when sessions are on.
  r.add("POST", "/mcp", id_of(route::mcp));
  r.add("GET", "/mcp", id_of(route::mcp));
  r.add("DELETE", "/mcp", id_of(route::mcp));
  r.add("GET", "/v1/stories", id_of(route::rest_search));
  r.add_prefix("GET", "/v1/stories/", id_of(route::rest_story));
  r.add("GET", "/v1/usage", id_of(route::rest_usage));
  r.add_prefix("GET", "/.well-known/", id_of(route::well_known));
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

core_handler::core_handler(shared_state& s, int core)
    : s_(s),
      core_(core),
      quota_(s.quota->ledger(core)),
      endpoint_(s.tools, *s.envelopes,
                mcp::endpoint_options{s.settings->allowed_origins, true, s.sessions.get(),
                                      s.settings->max_body_bytes, 32}),
      host_(quota_, *s.backend),
      rest_(*s.backend, *s.envelopes),
      observer_(core, s.metrics.get(), s.access.get(), s.tools) {
  scratch_.reserve(16384);
  // The cache holds whole in-process answers only: never on a gateway (remote shards answer
  // per request and may be partial).
  if (s.search_cache && !s.fleet && s.backend->remote_count() == 0) {
    cache_ =
        std::make_unique<search_cache>(search_cache_options{s.settings->search_cache_entries,
                                                            s.settings->search_cache_entry_bytes},
                                       &s.search_cache[static_cast<size_t>(core)]);
    host_.tools()->set_search_cache(cache_.get());
  }
  host_.tools()->use_jobs(&light_jobs_);
  host_.set_cancels(&s.cancels);
  if (s.fleet) {
    fleet_ = std::make_unique<fleet_client>(*s.backend, *s.fleet);
    host_.tools()->set_fleet(fleet_.get());
  }
}

void core_handler::attach(http::engine_io& io) {
  io_ = &io;
  // Searches in slices need the engine to park requests: only once attached to one.
  if (!s_.fleet && s_.backend->remote_count() == 0) {
    host_.tools()->set_search_slice(s_.settings->search_slice_postings);
  }
  observer_.attach(io);
  if (fleet_) {
    fleet_->attach(io);
  }
  if (s_.cluster) {
    s_.cluster->set_waker(core_, io.waker());  // a lease attempt's end wakes parked requests
  }
}

void core_handler::on_upstream(uint64_t tag, const http::upstream_reply& reply) {
  if (fleet_) {
    fleet_->on_upstream(tag, reply);
  }
}

bool core_handler::fan_out(const http::request& req, app::route r, std::string_view rest_id,
                           int64_t now_ns, const quota::figures& fig) {
  fleet_->begin_collect();
  switch (r) {
    case route::mcp: {
      fleet_calls calls(*fleet_);
      endpoint_.decide_calls(req, calls, now_ns);
      break;
    }
    case route::rest_search: {
      search::query_args args;
      if (fleet_qs_.parse(req.query, args) && search::validate(args)) {
        fleet_->collect_search(args);
      }
      break;
    }
    default:
      // The id as rest::api::story reads it: percent-decoded (a malformed one is answered 400
      // without the remotes).
      if (!rest_id.empty() && rest_id.find('/') == std::string_view::npos) {
        fleet_id_.clear();
        if (percent_decode(rest_id, fleet_id_, /*plus_is_space=*/false)) {
          fleet_->collect_story(fleet_id_.view());
        }
      }
      break;
  }
  if (!fleet_->end_collect()) {
    return false;
  }
  fleet_->launch(fig, now_ns);
  // launch() may find nothing to wait for (every remote down): then this same call answers.
  return !fleet_->activate();
}

http::response_info core_handler::json_error(const http::request& req, int status,
                                             std::string_view body, std::string_view extra_headers,
                                             out_buffer& out) {
  auto head = http::head_for(req, status);
  head.content_type = "application/json";
  head.extra_headers = extra_headers;
  http::write_response(out, head, body);
  return {status, head.close};
}

http::response_info core_handler::keyless_mcp(const http::request& req, out_buffer& out,
                                              int64_t now_ns) {
  host_.begin_keyless();
  return endpoint_.handle_http(req, host_, out, now_ns);  // HEAD: handle() drops the body
}

http::response_info core_handler::route(const http::request& req, out_buffer& out, int64_t now_ns,
                                        app::route& counted) {
  http::route_match m = s_.router.match(req.method, req.path);
  if (m.status == 404) {
    counted = route::not_found;
    return json_error(req, 404, k_no_such_route, {}, out);
  }
  if (m.status == 405 && req.path == "/mcp") {
    // Any other method on the MCP endpoint: its own 405 (`Allow: POST`, a JSON-RPC body), as
    // GET gets, rather than the router's list of every method some /mcp route takes.
    counted = route::mcp;
    return keyless_mcp(req, out, now_ns);
  }
  if (m.status == 405) {
    counted = route::not_found;
    scratch_.clear();
    scratch_.append("Allow: ");
    scratch_.append(m.allow);
    scratch_.append("\r\n");
    return json_error(req, 405, k_method_not_allowed, scratch_.view(), out);
  }
  counted = static_cast<app::route>(m.id);
  switch (counted) {
    case route::healthz:
    case route::readyz:
    case route::metrics:
      if (!s_.ops_on_main || (counted == route::metrics && !s_.public_metrics)) {
        return json_error(req, 404, k_no_such_route, {}, out);
      }
      return handle_ops(s_, counted, req, scratch_, out);
    case route::well_known:
      // Never an OAuth discovery document: key-only server. Not rated, not billed.
      return json_error(req, 404, k_no_such_route, {}, out);
    default:
      break;
  }
  if (counted == route::mcp && req.method != "POST") {
    return keyless_mcp(req, out, now_ns);
  }
  // Authenticated surfaces: key, then rate limit (every request counts), then the call.
  const std::string_view presented = presented_key(req);
  const quota::key_record* key = quota_.authenticate(presented);
  key_ = key;
  if (key == nullptr) {
    if (s_.cluster && !s_.cluster->keys_loaded()) {  // no key is known yet: not a 401
      return json_error(req, 503,
                        R"({"code":"unavailable","message":"This node has not loaded its keys )"
                        R"(from the quota service yet (Redis cannot be reached). Retry shortly )"
                        R"(or use another node."})",
                        "Retry-After: 1\r\n", out);
    }
    if (counted == route::mcp) {
      return endpoint_.render_unauthorized(req, out, !presented.empty());
    }
    http::response_info info{401, !req.keep_alive};
    s_.envelopes->unauthorized(out, info.close, !presented.empty());
    return info;
  }
  const bool fleet_route = fleet_ && (counted == route::mcp || counted == route::rest_search ||
                                      counted == route::rest_story);
  quota::figures fig;
  bool limited;
  int64_t received_ns = now_ns;  // when the request was first read
  if (fleet_route && fleet_->activate()) {
    // The re-delivery of a request deferred for its remote answers: its rate was charged on
    // the first delivery (a 429 never reaches the remotes), and its figures were kept.
    fig = fleet_->figures();
    received_ns = fleet_->received_ns();
    limited = false;
  } else if (resuming_ != nullptr) {
    fig = resuming_->fig;  // charged on its first delivery
    received_ns = resuming_->received_ns;
    limited = false;
  } else {
    limited = quota_.check_rate(*key, now_ns, fig) == quota::rate_verdict::limited;
    rate_refused_ = limited;
    if (!limited && fleet_route && fan_out(req, counted, m.rest, now_ns, fig)) {
      return {0, false, true};  // deferred: delivered again once the remotes answered
    }
  }
  if (counted == route::mcp) {
    if (limited) {
      // The endpoint writes the 429's Retry-After; the host's rate headers must not repeat it.
      quota::figures f = fig;
      f.retry_after_secs = 0;
      host_.begin(*key, now_ns, f);
      return endpoint_.render_rate_limited(req, host_, out, fig.retry_after_secs, now_ns);
    }
    host_.begin(*key, now_ns, fig);
    host_.set_may_wait_lease(may_wait_lease());
    host_.set_deadline_ms(deadline_of(req));
    host_.set_received_ns(received_ns);
    if (resuming_ != nullptr) {
      host_.set_continuing();
    }
    const size_t mark = out.size();
    http::response_info info = endpoint_.handle_http(req, host_, out, now_ns);
    if (host_.tools()->yielded() && io_ != nullptr) {
      out.resize(mark);  // answered for real once its searches are done (or its units came)
      return park(resuming_, fig, host_.lease_pending(), host_.tools()->jobs_used(), received_ns);
    }
    return info;
  }
  if (limited) {
    quota_.fill_quota(*key, now_ns, fig);
    return rest_.rate_limited(req, fig, out);
  }
  rest::caller c{quota_, *key, fig, now_ns, fleet_ ? fleet_->single() : nullptr};
  c.may_wait_lease = may_wait_lease();
  http::response_info info;
  switch (counted) {
    case route::rest_search:
      info = rest_.search(req, c, out);
      break;
    case route::rest_story:
      info = rest_.story(req, m.rest, c, out);
      break;
    default:
      info = rest_.usage(req, c, out);
      break;
  }
  if (c.lease_pending) {
    return park(resuming_, fig, true, 0, received_ns);
  }
  return info;
}

bool core_handler::may_wait_lease() const {
  if (!s_.cluster || io_ == nullptr) {
    return false;
  }
  return resuming_ == nullptr || resuming_->lease_deadline == 0 ||
         io_->now_mono() < resuming_->lease_deadline;
}

core_handler::parked* core_handler::find_parked() {
  if (parked_.empty() || io_ == nullptr) {
    return nullptr;
  }
  const http::deferral_token t = io_->current();
  for (parked& p : parked_) {
    if (p.token.slot == t.slot && p.token.gen == t.gen) {
      return &p;
    }
  }
  return nullptr;
}

void core_handler::keep_spare(tool_context::job_group&& jobs) {
  if (spare_.size() < max_spare_job_groups) {
    spare_.push_back(std::move(jobs));
  }  // else freed here: a burst of parked requests does not hold its memory for good
}

http::response_info core_handler::park(parked* p, const quota::figures& fig, bool for_lease,
                                       size_t used, int64_t received_ns) {
  if (p == nullptr) {
    // First park: the request takes the light jobs (its searches' state) with it.
    parked_.emplace_back();
    p = &parked_.back();
    p->jobs.swap(light_jobs_);
    if (!spare_.empty()) {
      light_jobs_.swap(spare_.back());
      spare_.pop_back();
    }
    p->fig = fig;
    p->received_ns = received_ns;
  }
  p->used = used;
  p->token = io_->defer();
  p->lease_wait = for_lease;
  if (fleet_) {
    fleet_->deactivate();  // a gateway's remote answers wait with it for its next delivery
  }
  if (for_lease) {
    // Delivered again when the agent wakes this core, or at the bound (set once: the whole
    // wait of a request is bounded, however often other cores take the units it was after).
    if (p->lease_deadline == 0) {
      p->lease_deadline = io_->now_mono() + s_.cluster->options().lease_wait_ms * 1000000;
    }
    io_->wake_at(p->lease_deadline);
  } else {
    io_->resume(p->token);  // delivered again next pass: one slice each pass
  }
  return {0, false, true};
}

void core_handler::on_wake(int64_t /*now_ns*/) {
  // The agent ended a lease attempt (units, a spent budget, an outage) or a bound came: every
  // request waiting for units is admitted again (one that still may wait parks again).
  for (size_t i = 0; i < parked_.size();) {
    parked& p = parked_[i];
    if (!p.lease_wait) {
      ++i;
      continue;
    }
    p.lease_wait = false;
    if (!io_->resume(p.token)) {  // its connection closed meanwhile
      keep_spare(std::move(p.jobs));
      p = std::move(parked_.back());
      parked_.pop_back();
      continue;
    }
    ++i;
  }
}

bool core_handler::public_webhook(const http::request& req) const noexcept {
  return s_.admin && s_.admin->public_webhook() && req.path == admin_api::k_webhook_path;
}

http::response_info core_handler::handle(const http::request& req, out_buffer& out,
                                         int64_t now_ns) {
  if (public_webhook(req)) {  // [stripe] public_webhook: the one admin route served here
    return s_.admin->handle_webhook(req, out, false);
  }
  resuming_ = find_parked();
  if (resuming_ != nullptr) {
    host_.tools()->use_jobs(&resuming_->jobs);
    if (!host_.tools()->advance_jobs(resuming_->used)) {
      resuming_->token = io_->defer();
      io_->resume(resuming_->token);
      resuming_ = nullptr;
      host_.tools()->use_jobs(&light_jobs_);
      return {0, false, true};
    }
  }
  app::route counted = route::not_found;
  const uint64_t billed_before = quota_.billed_seq();
  const size_t start = out.size();
  key_ = nullptr;
  rate_refused_ = false;
  host_.reset_facts();
  if (observer_.on()) {
    observer_.begin(quota_);
  }
  http::response_info info = route(req, out, now_ns, counted);
  if (resuming_ != nullptr) {
    if (!info.deferred) {
      // answered: its job group is free again (index-stable erase: swap with the last)
      keep_spare(std::move(resuming_->jobs));
      *resuming_ = std::move(parked_.back());
      parked_.pop_back();
    }
    resuming_ = nullptr;
  }
  host_.tools()->use_jobs(&light_jobs_);
  if (info.deferred) {
    if (observer_.on()) {
      observer_.deferred();
    }
    return info;  // counted when it is answered
  }
  if (counted == route::mcp) {
    endpoint_.add_cors_headers(req, out, start);  // a browser on an allowed Origin reads it
  }
  // Only an answer that billed waits for the journal; every other one goes out at once.
  info.durable = quota_.billed_seq() != billed_before;
  if (req.method == "HEAD") {
    // The answer GET would get, without its body (RFC 9110 §9.3.2), whichever writer made it
    // (the 401 and the MCP endpoint's answers are written whole): a body here would be read by
    // a keep-alive client as the start of the next response.
    const std::string_view written(out.data() + start, out.size() - start);
    if (const size_t end = written.find("\r\n\r\n"); end != std::string_view::npos) {
      out.resize(start + end + 4);
    }
  }
  if (fleet_) {
    fleet_->finish();
  }
  s_.counters->count(core_, counted, info.status);
  if (observer_.on()) {
    observer_.answered(req, counted, info, out.size() - start, key_,
                       counted == route::mcp ? &host_.facts() : nullptr, rate_refused_, quota_,
                       now_ns);
  }
  return info;
}

http::response_info core_handler::answer_before_body(const http::request& head, out_buffer& out,
                                                     int64_t now_ns) {
  // Only refusals that come before route() reads the body: the answer is the one the whole
  // request would get (handle() below takes the same path, counted once).
  const http::route_match m = s_.router.match(head.method, head.path);
  bool refused = m.status != 200 && !public_webhook(head);
  if (!refused) {
    const auto r = static_cast<app::route>(m.id);
    const bool keyed = r == route::rest_search || r == route::rest_story ||
                       r == route::rest_usage || (r == route::mcp && head.method == "POST");
    refused = keyed && (quota_.authenticate(presented_key(head)) == nullptr ||
                        (r == route::mcp && !endpoint_.origin_allowed(head)));
  }
  if (!refused) {
    return {0, false, false};  // 100 Continue: the body decides
  }
  return handle(head, out, now_ns);
}

bool core_handler::answer_refused(const http::request& head, http::errc e, out_buffer& out) {
  // The parser may refuse the size while reading the fields, before it splits the target.
  const std::string_view path = head.target.substr(0, head.target.find('?'));
  if (e != http::errc::body_too_large || path != "/mcp") {
    return false;
  }
  const size_t start = out.size();
  endpoint_.render_too_large(out);
  endpoint_.add_cors_headers(head, out, start);
  return true;
}

void core_handler::before_send(int64_t now_ns) {
  quota_.before_send(now_ns);
  if (observer_.on()) {
    observer_.end_pass();
  }
}

void core_handler::on_file_written(uint32_t /*tag*/, int64_t res) {
  observer_.on_file_written(res);
}

http::durable_batch core_handler::durable_pending() {
  const quota::core_ledger::journal_chunk c = quota_.take_journal();
  return {c.fd, c.bytes.data(), c.bytes.size(), c.sync_due, c.dropped};
}

void core_handler::durable_written(int64_t res) { quota_.journal_done(res); }

void core_handler::durable_synced(int res) { quota_.journal_synced(res); }

void core_handler::on_tick(int64_t now_ns) {
  // A parked request whose connection closed is never delivered again: free its jobs. (A live
  // one is always queued for delivery, so resume() changes nothing for it.)
  for (size_t i = 0; i < parked_.size();) {
    if (io_ != nullptr && !io_->resume(parked_[i].token)) {
      keep_spare(std::move(parked_[i].jobs));
      parked_[i] = std::move(parked_.back());
      parked_.pop_back();
    } else {
      ++i;
    }
  }
  quota_.on_tick(now_ns);
  if (observer_.on()) {
    observer_.on_tick();
  }
  if (fleet_) {
    fleet_->on_tick();
  }
  if (core_ == 0 && s_.sessions) {
    s_.sessions->expire(now_ns);
  }
}

}  // namespace tollgate::app
