// core_host: the app's mcp::host, binding one request to the quota core and the search backend.
//
// Core-local: one per core, re-armed by begin() for each request; the MCP tools reach the
// core's search scratch and the caller's key through it (call_context::caller).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/json_out.h"
#include "tollgate/common/outcome.h"
#include "tollgate/mcp/host.h"
#include "tollgate/quota/service.h"
#include "tollgate/search/backend.h"

namespace tollgate::app {

class fleet_client;
class search_cache;

/// What the MCP endpoint reported about the messages of one request (answered()): the first
/// message's method and tool, and the first outcome that is not ok.
struct mcp_facts {
  std::string_view method;  ///< valid while the request is handled
  const mcp::tool_def* tool = nullptr;
  outcome result = outcome::ok;
  bool any = false;              ///< some message was answered
  uint32_t shards_answered = 0;  ///< a partial search: shards that answered, of shards_total
  uint32_t shards_total = 0;
};

class core_host final : public mcp::host {
 public:
  core_host(quota::core_ledger& quota, const search::backend& backend)
      : quota_(quota), backend_(backend), scratch_(backend.make_scratch()) {}

  /// Arms the host for one request of key `k` whose rate figures are already in `fig`.
  /// `check_rate_on_admit`: stdio, where a rate breach is a tool error rather than a 429.
  void begin(const quota::key_record& k, int64_t now_ns, const quota::figures& fig,
             bool check_rate_on_admit = false) noexcept {
    key_ = &k;
    now_ns_ = now_ns;
    fig_ = fig;
    admitted_ = false;
    quota_filled_ = false;
    check_rate_on_admit_ = check_rate_on_admit;
    job_next_ = 0;
    yielded_ = false;
    continuing_ = false;
    facts_ = {};
  }

  /// stdio: no engine drives this core, so the host does: each call re-reads the clock, runs
  /// the quota tick, re-checks the key (a revocation or suspension takes effect), charges the
  /// rate limit (a breach is a rate_limited tool error) and writes the journal before the
  /// response goes out.
  void set_stdio(std::string secret);

  void write_headers(out_buffer& out) override;
  mcp::admission admit(std::string_view tool) override;
  void settle(bool success) override;
  /// stdio: handshakes, lists and pings count toward the rate limit too.
  mcp::admission rate_check() override;
  /// HTTP batches: each request after the first is charged to the key's rate limit.
  mcp::admission rate_extra() override;
  /// HTTP: gives back the charge the handler made for a POST answered 202 (notifications and
  /// responses only); a keyless request gives nothing back.
  void refund_rate() override;
  /// Arms the host for a request that carries no key (GET and DELETE /mcp, answered by the
  /// endpoint without one): write_headers() writes nothing, never another request's figures.
  void begin_keyless() noexcept {
    key_ = nullptr;
    admitted_ = false;
    quota_filled_ = false;
    facts_ = {};
  }

  // ---- searches in slices (HTTP cores; see core_handler::handle) ----

  /// The search jobs of one request: its n-th search call uses the n-th job, on every delivery.
  using job_group = std::vector<std::unique_ptr<search::search_job>>;
  /// Search calls run as jobs of about `postings` postings of work per slice (0: each search
  /// runs whole, as on stdio and shard nodes).
  void set_search_slice(uint64_t postings) noexcept { slice_ = postings; }
  uint64_t search_slice() const noexcept { return slice_; }
  /// The jobs of the request being handled (set by the handler before each delivery).
  void use_jobs(job_group* g) noexcept { jobs_ = g; }
  /// The job of the request's next search call.
  search::search_job& next_job();
  /// Search calls made so far in this delivery.
  size_t jobs_used() const noexcept { return job_next_; }
  /// A search call ran out of its slice: the request is deferred and delivered again once
  /// advance_jobs() reports every job done; the rest of this delivery answers nothing.
  void yield() noexcept { yielded_ = true; }
  bool yielded() const noexcept { return yielded_; }
  /// One slice of the first of jobs [0, used) that is not done; true when all of them are.
  bool advance_jobs(size_t used);
  /// A re-delivery of a deferred request (set after begin()): its batch entries were charged
  /// to the rate limit on the first delivery, so rate_extra() charges nothing again.
  void set_continuing() noexcept { continuing_ = true; }
  void answered(const mcp::answer_note& note) override {
    if (!facts_.any) {
      facts_.any = true;
      facts_.method = note.method;
      facts_.tool = note.tool;
    }
    if (facts_.result == outcome::ok) {
      facts_.result = note.result;
    }
  }
  /// A search answered by some shards only (the access log's partial shards).
  void note_partial(uint32_t answered, uint32_t total) noexcept {
    facts_.shards_answered = answered;
    facts_.shards_total = total;
  }
  const mcp_facts& facts() const noexcept { return facts_; }
  void reset_facts() noexcept { facts_ = {}; }

  /// The core's search answer cache (null: off).
  void set_search_cache(search_cache* c) noexcept { cache_ = c; }
  search_cache* answer_cache() const noexcept { return cache_; }

  /// A gateway with remote shards: the core's fleet client (null otherwise).
  void set_fleet(fleet_client* f) noexcept { fleet_ = f; }
  fleet_client* fleet() const noexcept { return fleet_; }

  /// The caller's key, figures (quota part filled on demand) and the core's search state.
  const quota::key_record& key() const noexcept { return *key_; }
  const quota::figures& figures_now();
  search::scratch& scratch() noexcept { return *scratch_; }
  const search::backend& backend() const noexcept { return backend_; }
  quota::core_ledger& quota() noexcept { return quota_; }

 private:
  quota::core_ledger& quota_;
  const search::backend& backend_;
  std::unique_ptr<search::scratch> scratch_;
  fleet_client* fleet_ = nullptr;
  search_cache* cache_ = nullptr;
  const quota::key_record* key_ = nullptr;
  int64_t now_ns_ = 0;
  quota::figures fig_;
  quota::ticket ticket_;
  mcp_facts facts_;
  bool admitted_ = false;
  bool quota_filled_ = false;
  uint64_t slice_ = 0;
  job_group* jobs_ = nullptr;
  size_t job_next_ = 0;
  bool yielded_ = false;
  bool continuing_ = false;
  bool check_rate_on_admit_ = false;
  /// stdio, at the start of each call: the clock, the core's tick when due, and the key's
  /// current record (false when it was revoked).
  bool stdio_begin_call();
  bool stdio_ = false;
  std::string stdio_secret_;
  int64_t last_tick_ns_ = 0;
};

}  // namespace tollgate::app
