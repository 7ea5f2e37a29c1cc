// The server's per-core request handler: routing, key check, rate limit, then MCP, REST or the
// ops routes. One core_handler per core (core-local); `shared` is read-only after start-up
// apart from its thread-safe members.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "access_log.h"
#include "cancel_set.h"
#include "core_host.h"
#include "fleet_client.h"
#include "gate.h"
#include "metrics.h"
#include "parking.h"
#include "request_observer.h"
#include "search_cache.h"
#include "tollgate/cluster/agent.h"
#include "tollgate/config/config.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/response.h"
#include "tollgate/http/router.h"
#include "tollgate/mcp/endpoint.h"
#include "tollgate/net/tls.h"
#include "tollgate/quota/service.h"
#include "tollgate/rest/api.h"
#include "tollgate/search/backend.h"

namespace tollgate::net {
class server;
}

namespace tollgate::app {

struct offcore_ticket;

class admin_api;
namespace oauth {
class server;
}

/// Everything the cores share. Built once before the engine starts.
struct shared_state {
  const config::settings* settings = nullptr;
  http::router router;
  std::unique_ptr<envelope::cache> envelopes;
  mcp::registry tools;
  std::unique_ptr<mcp::session_store> sessions;  ///< null: stateless
  std::unique_ptr<search::backend> backend;
  std::unique_ptr<quota::service> quota;
  std::unique_ptr<request_counters> counters;
  /// Answers by outcome, latency histograms, billed calls by plan (null: not kept).
  std::unique_ptr<request_metrics> metrics;
  /// [log] access (null: off).
  std::unique_ptr<access_log> access;
  /// /metrics on the public listener when no admin listener is configured ([server]
  /// public_metrics).
  bool public_metrics = true;
  /// One per core: the search answer cache's counters (/metrics); null when the cache is off.
  std::unique_ptr<search_cache_stats[]> search_cache;
  int cores = 0;
  std::unique_ptr<fleet_shared> fleet;    ///< a gateway with remote shards; null otherwise
  const net::server* engine = nullptr;    ///< for /metrics; set once the engine exists
  std::shared_ptr<net::tls_context> tls;  ///< the HTTPS listener's context (null: none)
  bool ops_on_main = true;                ///< false when --admin-listen moved the ops routes there
  std::atomic<bool> ready{false};
  /// Cluster mode: the node's Redis agent (null: single node). Until it has loaded keys once,
  /// /readyz says not ready and keyed requests get 503.
  std::unique_ptr<cluster::agent> cluster;
  /// Requests their clients cancelled (notifications/cancelled), for every core to consult
  /// before it admits a call. Thread-safe.
  cancel_set cancels;
  /// The admin API and the Stripe webhook (admin_api.h); null on a shard node or stdio.
  /// shared_ptr: its deleter is bound where it is made, so users of this header need not
  /// see the type.
  std::shared_ptr<admin_api> admin;
  /// [oauth] enabled: the authorization server (oauth.h); null otherwise. shared_ptr as admin.
  std::shared_ptr<oauth::server> oauth;
};

/// Registers the routes of design §1 on `s.router`.
void register_routes(shared_state& s);
/// A shard node's routes: the fleet routes and the ops routes.
void register_shard_routes(shared_state& s);

/// The body of every 404 for a path no route takes (or a route this listener does not serve),
/// on the public, admin and shard-node listeners alike.
inline constexpr std::string_view kNoSuchRoute =
    R"({"code":"not_found","message":"There is no such route."})";
/// The body of every 405 for a route that does not take the request's method.
inline constexpr std::string_view kMethodNotAllowed =
    R"({"code":"method_not_allowed","message":"This route does not support that method."})";

class core_handler final : public http::handler {
 public:
  core_handler(shared_state& s, int core);
  http::response_info handle(const http::request& req, out_buffer& out, int64_t now_ns) override;
  /// `Expect: 100-continue`: a request its head already refuses (no such route, a bad key, a
  /// forbidden Origin on /mcp) is answered now, as handle() would answer it with its body.
  http::response_info answer_before_body(const http::request& head, out_buffer& out,
                                         int64_t now_ns) override;
  /// A body over server.max_body_bytes on /mcp: the endpoint's JSON-RPC 413 (id null) rather
  /// than the engine's plain text, so MCP clients show the reason.
  bool answer_refused(const http::request& head, http::errc e, out_buffer& out) override;
  void before_send(int64_t now_ns) override;
  /// The usage journal is the engine's durable write (http::durable_batch), made before the pass's
  /// sends.
  http::durable_batch durable_pending() override;
  void durable_written(int64_t res) override;
  void durable_synced(int res) override;
  void on_tick(int64_t now_ns) override;
  void on_wake(int64_t now_ns) override;
  void attach(http::engine_io& io) override;
  void on_upstream(uint64_t tag, const http::upstream_reply& reply) override;
  void on_file_written(uint32_t tag, int64_t res) override;
  void on_read_ahead(uint32_t tag, int64_t res) override;

  /// Answered parked requests' job groups kept for reuse (at most max_spare_job_groups).
  size_t spare_job_groups() const noexcept { return parking_.spare_job_groups(); }
  static constexpr size_t max_spare_job_groups = parking::max_spare_job_groups;

 private:
  // match → gate → (a gateway's look-ahead) → the surface's answer; `v` is the gate's verdict,
  // with what the answer came to.
  http::response_info route(const http::request& req, out_buffer& out, int64_t now_ns,
                            gate_verdict& v);
  /// The ticket of the request being answered (offcore.h); none without an engine.
  offcore_ticket ticket() const;
  // The verdict's surface, through its one entry (refusals included); sets what the request
  // waits for and what its answer came to.
  http::response_info answer_surface(const http::request& req, gate_verdict& v, out_buffer& out,
                                     int64_t now_ns);
  http::response_info json_error(const http::request& req, int status, std::string_view body,
                                 std::string_view extra_headers, out_buffer& out);

  shared_state& s_;
  int core_;
  quota::core_ledger& quota_;
  mcp::endpoint endpoint_;
  gate gate_;
  core_host host_;
  rest::api rest_;
  parking parking_;  // requests waiting for a search slice, quota units or a document
  out_buffer scratch_;
  std::unique_ptr<search_cache> cache_;  // null when off or on a gateway with remote shards
  std::unique_ptr<fleet_client> fleet_;
  http::engine_io* io_ = nullptr;
  // The waker called when work off the core ends (an OAuth client's metadata document, the
  // OAuth store's or the public webhook's writes: offcore.h).
  std::function<void()> offcore_wake_;
  request_observer observer_;  // /metrics and the access log
};

/// The handler of a shard node (--role shard): the fleet routes for gateways, behind the fleet
/// secret, and the ops routes. Never billed: gateways bill their callers.
class shard_handler final : public http::handler {
 public:
  shard_handler(const shared_state& s, int core);
  void attach(http::engine_io& io) override { io_ = &io; }
  http::response_info handle(const http::request& req, out_buffer& out, int64_t now_ns) override;
  void on_read_ahead(uint32_t tag, int64_t res) override;
  void on_tick(int64_t now_ns) override;

 private:
  http::response_info answer_shard(const http::request& req, out_buffer& out, route& counted);
  // A story request whose text is not in the page cache waits, parked, for the core's ring to
  // read it (as core_handler's get_story: parking.h, item 4).
  struct story_wait {
    http::deferral_token token;
    parking::read_wait read;
  };
  // The wait of the request being delivered, if it waited before.
  story_wait* find_wait();

  const shared_state& s_;
  int core_;
  http::engine_io* io_ = nullptr;
  std::vector<story_wait> waits_;
  uint32_t last_tag_ = 0;
  std::unique_ptr<search::scratch> search_;
  out_buffer scratch_;
  out_buffer body_;
  out_buffer path_;  // the decoded path of a story request
};

}  // namespace tollgate::app
