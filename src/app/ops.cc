// The ops routes (healthz, readyz, metrics) and the admin listener's handler (ops routes and
// POST /admin/reload). Never keyed, rated or billed.
#include "ops.h"

#include <fmt/format.h>

#include <chrono>
#include <iterator>

#include "admin_api.h"
#include "offcore.h"
#include "reload.h"
#include "tls_setup.h"
#include "tollgate/common/json_out.h"
#include "tollgate/net/server.h"

namespace tollgate::app {
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
constexpr core_series kCoreSeries[] = {
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
  for (const core_series& m : kCoreSeries) {
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
constexpr cache_series kCacheSeries[] = {
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
  for (const cache_series& m : kCacheSeries) {
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

// The Prometheus text of every series, into scratch_.
void render_metrics(const shared_state& s_, out_buffer& scratch_) {
  scratch_.clear();
  s_.counters->render(scratch_);
  if (s_.metrics) {
    s_.metrics->render(scratch_);
  }
  if (s_.engine != nullptr) {
    engine_metrics(*s_.engine, scratch_);
  }
  if (s_.tls) {
    tls_metrics(*s_.tls, scratch_);
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
}

// What an ops route answers: its status and plain-text body.
struct ops_answer {
  int status;
  std::string_view body;
};

ops_answer readiness(const shared_state& s) {
  if (!s.ready.load(std::memory_order_acquire)) {
    return {503, "starting\n"};
  }
  if (s.cluster && !s.cluster->keys_loaded()) {
    return {503, "not ready: keys not loaded from redis yet\n"};
  }
  // Not ready while billed calls cannot be recorded (they are refused as unavailable).
  if (s.quota && !s.quota->journals_ok()) {
    return {503, "usage journal failing\n"};
  }
  return {200, "ready\n"};
}

}  // namespace

http::response_info handle_ops(const shared_state& s, route r, const http::request& req,
                               out_buffer& scratch, out_buffer& out) {
  ops_answer a{200, "ok\n"};
  std::string_view type = "text/plain";
  if (r == route::metrics) {
    render_metrics(s, scratch);
    a.body = scratch.view();
    type = "text/plain; version=0.0.4";
  } else if (r == route::readyz) {
    a = readiness(s);
  }
  return ops_text(req, a.status, a.body, type, out);
}

namespace {
// POST /admin/reload and the admin API's routes: run on the admin listener's worker.
http::response_info answer_admin(const shared_state& s, const http::request& req,
                                 out_buffer& scratch, out_buffer& out) {
  if (req.path != "/admin/reload") {  // accounts, keys, usage, webhook
    return s.admin->handle(req, out);
  }
  if (req.method != "POST") {
    auto head = http::head_for(req, 405);
    head.content_type = "application/json";
    head.extra_headers = "Allow: POST\r\n";
    http::write_response(
        out, head, R"({"code":"method_not_allowed","message":"Reload with POST /admin/reload."})");
    return {405, head.close};
  }
  const reload_result r = reload_plans_and_keys(s, "admin reload");
  scratch.clear();
  if (r.ok) {
    fmt::format_to(std::back_inserter(scratch), R"({{"reloaded":true,"plans":{},"keys":{}}})",
                   r.plans, r.keys);
  } else {
    scratch.append(R"({"code":"reload_failed","message":")");
    append_json_escaped(
        scratch, "Nothing was reloaded; the previous plans and keys stay in force: " + r.message);
    scratch.append("\"}");
  }
  return ops_text(req, r.ok ? 200 : 422, scratch.view(), "application/json", out);
}
}  // namespace

ops_handler::ops_handler(const shared_state& s) : s_(s) { scratch_.reserve(16384); }

ops_handler::~ops_handler() = default;

void ops_handler::attach(http::engine_io& io) {
  io_ = &io;
  wake_ = io.waker();
  if (wake_) {
    work_ = std::make_unique<offcore<admin_answer>>();
    work_->start();
  }
}

void ops_handler::on_wake(int64_t /*now_ns*/) {
  // A job ended (or a spurious wake): every parked request is delivered again, and one whose
  // job still runs parks again.
  for (const http::deferral_token t : parked_) {
    (void)io_->resume(t);
  }
  parked_.clear();
}

http::response_info ops_handler::admin_route(const http::request& req, out_buffer& out) {
  if (!work_) {  // no engine to park in (a handler driven by hand)
    return answer_admin(s_, req, scratch_, out);
  }
  const http::deferral_token d = io_->current();
  const offcore_ticket t{0, d.slot, d.gen};
  admin_answer a;
  switch (work_->take(t, a)) {
    case offcore<admin_answer>::state::done:
      out.append(a.bytes);
      return a.info;
    case offcore<admin_answer>::state::none: {
      // The worker reads the request after the core has moved on: it gets a copy.
      auto copy = std::make_shared<const http::request_copy>(req);
      work_->submit(
          t,
          [&s = s_, copy] {
            out_buffer scratch;
            out_buffer body;
            admin_answer done;
            done.info = answer_admin(s, copy->get(), scratch, body);
            done.bytes.assign(body.view());
            return done;
          },
          wake_);
      break;
    }
    case offcore<admin_answer>::state::running:
      break;
  }
  parked_.push_back(io_->defer());
  return {.deferred = true};
}

http::response_info ops_handler::handle(const http::request& req, out_buffer& out,
                                        int64_t /*now_ns*/) {
  http::route_match m = s_.router.match(req.method, req.path);
  if (m.status == 200) {
    auto r = static_cast<route>(m.id);
    if (r == route::healthz || r == route::readyz || r == route::metrics) {
      return handle_ops(s_, r, req, scratch_, out);
    }
  }
  // (/admin/reload: the admin listener only, never on the public one)
  if (req.path == "/admin/reload" || (s_.admin && req.path.substr(0, 7) == "/admin/")) {
    return admin_route(req, out);
  }
  auto head = http::head_for(req, 404);
  head.content_type = "application/json";
  http::write_response(out, head, kNoSuchRoute);
  return {404, head.close};
}

}  // namespace tollgate::app
