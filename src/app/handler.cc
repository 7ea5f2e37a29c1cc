#include "handler.h"

#include <ctime>
#include <optional>

#include "admin_api.h"
#include "oauth.h"
#include "offcore.h"
#include "ops.h"
#include "tools.h"

namespace tollgate::app {
namespace {

constexpr http::route_id id_of(route r) { return static_cast<http::route_id>(r); }

}  // namespace

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
  if (s.settings != nullptr && s.settings->oauth_enabled) {
    // The authorization server (oauth.h); OPTIONS for browser-based clients' preflights.
    r.add_prefix("OPTIONS", "/.well-known/", id_of(route::well_known));
    r.add("GET", "/authorize", id_of(route::oauth));
    r.add("POST", "/authorize", id_of(route::oauth));
    for (const char* p : {"/register", "/token", "/revoke"}) {
      r.add("POST", p, id_of(route::oauth));
      r.add("OPTIONS", p, id_of(route::oauth));
    }
  }
}

core_handler::core_handler(shared_state& s, int core)
    : s_(s),
      core_(core),
      quota_(s.quota->ledger(core)),
      endpoint_(s.tools, *s.envelopes,
                mcp::endpoint_options{s.settings->allowed_origins, true, s.sessions.get(),
                                      s.settings->max_body_bytes, 32}),
      gate_(s.router, quota_, s.cluster.get(),
            gate_oauth{s.settings->oauth_enabled, s.settings->oauth_issuer},
            s.admin && s.admin->public_webhook() ? admin_api::kWebhookPath : std::string_view()),
      host_(quota_, *s.backend),
      rest_(*s.backend, *s.envelopes),
      parking_(s.cluster.get(), *host_.tools()),
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
  host_.set_cancels(&s.cancels);
  endpoint_.lend(host_.tools(), &host_);
  if (s.fleet) {
    fleet_ = std::make_unique<fleet_client>(*s.backend, *s.fleet);
    host_.tools()->set_fleet(fleet_.get());
  }
}

void core_handler::attach(http::engine_io& io) {
  io_ = &io;
  parking_.attach(io);
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
  if (s_.oauth || (s_.admin && s_.admin->public_webhook())) {
    offcore_wake_ = io.waker();  // a fetch or an off-core job ends: its requests go on
  }
}

void core_handler::on_upstream(uint64_t tag, const http::upstream_reply& reply) {
  if (fleet_) {
    fleet_->on_upstream(tag, reply);
  }
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

offcore_ticket core_handler::ticket() const {
  if (io_ == nullptr) {
    return {};
  }
  const http::deferral_token d = io_->current();
  return {core_, d.slot, d.gen};
}

// match → gate → (a gateway's look-ahead) → the surface's one entry point.
http::response_info core_handler::route(const http::request& req, out_buffer& out, int64_t now_ns,
                                        gate_verdict& v) {
  v = gate_.match(req);
  if (s_.oauth && v.status == 200 && (v.r == route::well_known || v.r == route::oauth) &&
      oauth::server::owns(req.path)) {
    char peer[64];
    const size_t n = io_ != nullptr ? io_->peer_address(peer, sizeof peer) : 0;
    v.r = route::oauth;
    const http::response_info info =
        s_.oauth->handle(req, quota_, std::string_view(peer, n), out,
                         static_cast<int64_t>(std::time(nullptr)), offcore_wake_, ticket());
    if (info.deferred) {
      // Its client's metadata document is being fetched, or its store work done, off the core:
      // parked until the fetcher or the worker wakes this core (on_wake), or until the fetch's
      // bound, when it reads as failed (a job still running parks it again).
      return parking_.park_offcore(io_->now_mono() + s_.oauth->wait_bound_ms() * 1000000 + 1000000);
    }
    v.result = envelope::outcome_of_status(info.status);
    return info;
  }
  if (v.r == route::webhook) {  // keyless: Stripe signs its deliveries (any method: its 405)
    const http::response_info info = s_.admin->handle_webhook(req, out, ticket(), offcore_wake_);
    if (info.deferred) {  // its event is acted on off the core (the store's writes, Redis)
      return parking_.park_offcore(io_->now_mono() + 1000000000);
    }
    v.result = envelope::outcome_of_status(info.status);
    return info;
  }
  if (v.status == 404 || v.r == route::well_known) {
    // (/.well-known/: never an OAuth discovery document on a key-only server.)
    v.result = outcome::not_found;
    return json_error(req, 404, kNoSuchRoute, {}, out);
  }
  if (v.status == 405 && v.r != route::mcp) {
    v.result = outcome::method_not_allowed;
    scratch_.clear();
    scratch_.append("Allow: ");
    scratch_.append(v.allow);
    scratch_.append("\r\n");
    return json_error(req, 405, kMethodNotAllowed, scratch_.view(), out);
  }
  if (v.r == route::healthz || v.r == route::readyz || v.r == route::metrics) {
    if (!s_.ops_on_main || (v.r == route::metrics && !s_.public_metrics)) {
      v.result = outcome::not_found;
      return json_error(req, 404, kNoSuchRoute, {}, out);
    }
    const http::response_info info = handle_ops(s_, v.r, req, scratch_, out);
    v.result = envelope::outcome_of_status(info.status);  // 200, or 503 while not ready
    return info;
  }
  if (v.keyed) {
    const bool fleet_route = fleet_ && v.r != route::rest_usage;
    carried_charge carried;
    if (fleet_route && fleet_->activate()) {
      // Re-delivered once its remote shards answered: charged on the first delivery (a 429
      // never reaches the remotes).
      carried = {&fleet_->figures(), fleet_->received_ns()};
    } else if (parking_.resuming_any()) {
      const parking::carried p = parking_.resuming();  // parked: charged when first read
      carried = {p.fig, p.received_ns};
    }
    gate_.admit(req, v, now_ns, carried);
    if (v.refusal.row == nullptr && !v.carried && fleet_route &&
        fleet_->look_ahead(req, v.args, endpoint_, now_ns, v.fig)) {
      return {0, false, true};  // deferred: delivered again once the remotes answered
    }
  }
  const size_t mark = out.size();
  const http::response_info info = answer_surface(req, v, out, now_ns);
  if (v.wait == wait_for::nothing) {
    return info;
  }
  // The request must wait (a search slice, quota units, a story's bytes): its answer is
  // discarded and written for real when it is delivered again, with the verdict's figures
  // carried.
  out.resize(mark);
  if (v.wait == wait_for::read) {
    return parking_.park_read(v.fig, v.jobs_used, v.received_ns, fleet_.get(), v.read);
  }
  return parking_.park(v.fig, v.wait == wait_for::units, v.jobs_used, v.received_ns, fleet_.get());
}

// The surfaces' one entry each (mcp::endpoint::answer, rest::api::respond), given what the
// verdict holds: the key's figures and terms, or its refusal. Sets what the request waits for
// and what its answer came to.
http::response_info core_handler::answer_surface(const http::request& req, gate_verdict& v,
                                                 out_buffer& out, int64_t now_ns) {
  if (v.r == route::mcp) {
    if (v.key == nullptr) {
      host_.begin_keyless();  // no key (GET, DELETE, OPTIONS; a 401 or 503): no figures
    } else {
      quota::figures f = v.fig;
      if (v.refusal.row != nullptr) {
        f.retry_after_secs = 0;  // the 429 writes its own Retry-After; the host must not repeat it
      }
      host_.begin(*v.key, now_ns, f,
                  request_terms{v.deadline_ms, v.received_ns, parking_.may_wait_lease(),
                                parking_.resuming_any()});
    }
    host_.tools()->set_reads_may_park(parking_.may_wait_read());
    const http::response_info info = endpoint_.answer(req, v.refusal, host_, out, now_ns);
    if (v.key != nullptr) {
      // Its notifications/cancelled: for the calls they name, on this core or another.
      for (const std::string_view id : endpoint_.cancellations()) {
        s_.cancels.add(v.key->key_id, id, now_ns);
      }
    }
    if (v.key != nullptr && v.refusal.row == nullptr && host_.tools()->yielded() &&
        io_ != nullptr) {
      const search::pending_read& r = host_.tools()->wanted_read();
      v.wait = host_.lease_pending() ? wait_for::units
               : r.fd >= 0           ? wait_for::read
                                     : wait_for::slice;
      v.read = r;
      v.jobs_used = host_.tools()->jobs_used();
    }
    const mcp::request_report& report = endpoint_.report();
    v.result = report.any ? report.result : outcome::ok;
    return info;
  }
  const rest::resource what = v.r == route::rest_search  ? rest::resource::search
                              : v.r == route::rest_story ? rest::resource::story
                                                         : rest::resource::usage;
  std::optional<rest::caller> c;  // none for a 401 or 503: no key
  if (v.key != nullptr) {
    c.emplace(rest::caller{quota_, *v.key, v.fig, now_ns, fleet_ ? fleet_->single() : nullptr});
    c->may_wait_lease = parking_.may_wait_lease();
    c->may_wait_read = parking_.may_wait_read();
  }
  static constexpr rest::arguments kNoArguments{};  // usage, and a refused request
  const http::response_info info = rest_.respond(
      req, v.refusal, what, v.args != nullptr ? *v.args : kNoArguments, c ? &*c : nullptr, out);
  if (c && c->lease_pending) {
    v.wait = wait_for::units;
  } else if (c && c->read.fd >= 0) {
    v.wait = wait_for::read;
    v.read = c->read;
  }
  v.result = c ? c->result : v.refusal.row->result;
  return info;
}

void core_handler::on_wake(int64_t /*now_ns*/) { parking_.on_wake(); }

http::response_info core_handler::handle(const http::request& req, out_buffer& out,
                                         int64_t now_ns) {
  if (!parking_.begin()) {
    return {0, false, true};  // its searches go on: the next slice next pass
  }
  gate_verdict v;
  const uint64_t billed_before = quota_.billed_seq();
  const size_t start = out.size();
  host_.reset_shards();
  if (observer_.on()) {
    observer_.begin(quota_);
  }
  http::response_info info = route(req, out, now_ns, v);
  parking_.end(info.deferred);
  if (info.deferred) {
    if (observer_.on()) {
      observer_.deferred();
    }
    return info;  // counted when it is answered
  }
  if (v.r == route::mcp) {
    endpoint_.add_cors_headers(req, out, start);  // a browser on an allowed Origin reads it
  }
  // Only an answer that billed waits for the journal; every other one goes out at once.
  info.durable = quota_.billed_seq() != billed_before;
  if (fleet_) {
    fleet_->finish();
  }
  s_.counters->count(core_, v.r, info.status);
  if (observer_.on()) {
    const mcp_facts facts{endpoint_.report(), host_.shards()};
    observer_.answered(req, v.r, info, v.result, out.size() - start, v.key,
                       v.r == route::mcp ? &facts : nullptr, quota_, now_ns);
  }
  return info;
}

http::response_info core_handler::answer_before_body(const http::request& head, out_buffer& out,
                                                     int64_t now_ns) {
  // Only refusals that come before route() reads the body: the answer is the one the whole
  // request would get (handle() below takes the same path, counted once).
  const gate_verdict v = gate_.match(head);
  const bool refused = (v.status != 200 && v.r != route::webhook) ||
                       (v.keyed && (gate_.credential(head) == nullptr ||
                                    (v.r == route::mcp && !endpoint_.origin_allowed(head))));
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

void core_handler::on_read_ahead(uint32_t tag, int64_t res) {
  s_.counters->count_read_ahead(core_, res);
  parking_.on_read_ahead(tag, res);
}

http::durable_batch core_handler::durable_pending() {
  const quota::core_ledger::journal_chunk c = quota_.take_journal();
  return {c.fd, c.bytes.data(), c.bytes.size(), c.sync_due, c.dropped};
}

void core_handler::durable_written(int64_t res) { quota_.journal_done(res); }

void core_handler::durable_synced(int res) { quota_.journal_synced(res); }

void core_handler::on_tick(int64_t now_ns) {
  parking_.on_tick();
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
