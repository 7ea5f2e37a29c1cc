// fleet_client: a gateway core's side of the fleet. It turns the searches a request needs into
// fetches to the remote shard nodes on the core's own ring (http::engine_io), keeps the request
// deferred until every remote answered or the deadline passed, and hands the answers to the
// tools and REST when the engine delivers the request again.
//
// One request's life on a gateway with remote shards:
//   1. handle(): after the key and rate checks (a 429 never reaches the remotes), the searches
//      and story look-ups the request holds are collected (collect_search / collect_story):
//      for MCP, from the tool calls the endpoint decided (mcp::endpoint::decide_calls, nothing
//      run); for REST, from the query string or path.
//   2. launch(): defers the request and starts, per collected query, phase 1 (document
//      frequencies, for exact idf) then phase 2 (the search with the global idf); a query whose
//      order idf cannot change (sort=date, one term) skips phase 1; a story is one GET. Remotes
//      marked down (search::remote_health) are not asked.
//   3. Every answer or failure arrives in on_upstream(); when the last query is done, the
//      request is resumed and handle() runs it for real: activate() makes its answers visible
//      to for_search() / for_story(), and finish() recycles the slot.
// The deadline covers both phases: phase 1 may use half of it, phase 2 the rest.
//
// Core-local: one per core; touched only from that core's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "metrics.h"
#include "tollgate/common/buffer.h"
#include "tollgate/config/config.h"
#include "tollgate/http/handler.h"
#include "tollgate/quota/service.h"
#include "tollgate/rest/api.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/query.h"
#include "tollgate/search/remote_health.h"
#include "tollgate/search/remote_query.h"

namespace tollgate::mcp {
class endpoint;
}

namespace tollgate::app {

/// What every core of a gateway shares about its remote shards. Thread-safe (health is
/// lock-free; the rest is read-only).
struct fleet_shared {
  std::vector<config::host_port> remotes;
  std::string secret;
  int64_t deadline_ns = 250'000'000;
  std::unique_ptr<search::remote_health> health;
};

class fleet_client {
 public:
  fleet_client(const search::backend& backend, fleet_shared& shared);
  ~fleet_client();
  fleet_client(const fleet_client&) = delete;
  fleet_client& operator=(const fleet_client&) = delete;

  /// Registers the remote shards as the core's upstreams.
  void attach(http::engine_io& io);

  // ---- step 1: collecting ----
  void begin_collect() noexcept;
  /// Records a search the request makes (validated arguments; copied).
  void collect_search(const search::query_args& args);
  /// Records a story look-up; ids found in the local shards need no fan-out and are skipped.
  void collect_story(std::string_view id);
  /// Ends collecting; true when the request needs the remotes (then call launch()).
  bool end_collect();

  // ---- step 2 ----
  /// Defers the request being handled and starts its fan-out. Call from handle() only, right
  /// after end_collect() returned true; handle() then returns {.deferred = true} unless
  /// activate() is already true (nothing to wait for). `fig`: the request's rate figures,
  /// charged now and kept for its re-delivery; `received_ns`: when it was read (kept too).
  void launch(const quota::figures& fig, int64_t received_ns);

  // ---- step 3 ----
  /// When the request being handled is the re-delivery of a launched one: makes its answers
  /// current and returns true.
  bool activate();
  /// The remote answers for this search / story of the current request (null: none; the
  /// remote slots then count as not answered).
  const search::remote_query* for_search(const search::query_args& args);
  const search::remote_query* for_story(std::string_view id);
  /// The rate figures launch() kept for the current re-delivered request.
  const quota::figures& figures() const noexcept;
  /// When the current re-delivered request was first read (launch()'s `received_ns`).
  int64_t received_ns() const noexcept;
  /// REST: the request's one query, whatever it was (null: none).
  const search::remote_query* single();
  /// After every request handle() answered (not deferred): recycles the slot of a re-delivered
  /// request, also when handle() answered it before asking for its answers (e.g. a key revoked
  /// meanwhile).
  void finish();
  /// The active request was parked again (it waits for quota units): its slot and answers stay
  /// for its next delivery (activate() finds them by its token), and the next request handled
  /// meanwhile does not see them.
  void deactivate() noexcept { active_ = -1; }

  void on_upstream(uint64_t tag, const http::upstream_reply& reply);
  /// Steps 1 and 2 for a request the gate let through: MCP (`rest` null) or a REST search or
  /// story (`rest`: its arguments as the gate decoded them). Collects what it asks of the
  /// remotes (MCP: the calls `ep` decides, nothing run) and launches them. True when it is
  /// deferred for them; false when there is nothing to ask (a REST request with a bad
  /// argument is answered without the remotes), or no remote is up (it is answered now).
  bool look_ahead(const http::request& req, const rest::arguments* rest, mcp::endpoint& ep,
                  int64_t now_ns, const quota::figures& fig);
  /// About every 100 ms: recycles answers whose request the engine never delivered again.
  void on_tick();

  /// Requests deferred now (for tests and metrics).
  size_t in_flight() const noexcept { return live_; }

 private:
  struct query_state;
  struct pending;

  uint32_t alloc();
  query_state& add_query();
  void release(uint32_t slot);
  int32_t lookup(const http::deferral_token& t) const noexcept;
  void start_query(pending& p, uint32_t slot, uint32_t q);
  void start_phase2(pending& p, uint32_t slot, uint32_t q);
  void query_done(pending& p, uint32_t slot);
  /// Sends body_ to `path` of every remote that health lets through (or, `only_df_ok`, that
  /// answered phase 1); returns how many fetches the query now waits for.
  uint32_t ask(pending& p, uint32_t slot, uint32_t q, std::string_view method,
               std::string_view path, int64_t deadline, bool only_df_ok);
  void send(uint32_t remote, std::string_view method, std::string_view path, std::string_view body,
            uint64_t tag, int64_t deadline);
  uint64_t tag_of(uint32_t slot, const pending& p, uint32_t q, uint32_t remote) const noexcept;

  const search::backend& backend_;
  fleet_shared& shared_;
  http::engine_io* io_ = nullptr;
  std::vector<uint32_t> upstream_;  // remote index -> engine upstream id
  std::vector<std::string> host_header_;

  int32_t building_ = -1;  // slot collecting the current request's queries, -1: none yet

  std::vector<std::unique_ptr<pending>> slots_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
  int32_t active_ = -1;           // slot of the request being re-delivered, -1: none
  std::vector<int32_t> by_conn_;  // engine connection slot -> pending slot of its deferred request
  out_buffer body_;
  out_buffer request_;
  out_buffer path_;
};

}  // namespace tollgate::app
