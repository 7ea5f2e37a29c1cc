// core_host: the app's mcp::host, binding one request to the quota core. Calls go one way:
//   mcp::endpoint → core_host (mcp::host: admit, settle; mcp::rate_charge: stdio's rate check,
//   a batch's further charges, a 202's refund, the figures' header lines) → quota.
// The calls a request's notifications/cancelled named are the endpoint's to report
// (endpoint::cancellations()); the handler records them in the cores' cancel_set, which
// admit() consults.
// It also owns the core's tool_context (tools.h), which the handler lends the endpoint for the
// tools (endpoint::lend), and is that context's tool_caller (the key, figures and partial
// shards of the request): the tools see those two narrow types only, never core_host.
//
// Core-local: one per core, re-armed by begin() for each request.
#pragma once

#include <string>
#include <string_view>

#include "cancel_set.h"
#include "tollgate/common/json_out.h"
#include "tollgate/common/outcome.h"
#include "tollgate/mcp/host.h"
#include "tollgate/quota/service.h"
#include "tollgate/search/backend.h"
#include "tools.h"

namespace tollgate::app {

/// A search answered by some of its shards only (the access log's partial shards).
struct shard_count {
  uint32_t answered = 0;
  uint32_t total = 0;
};

/// What an MCP request came to, for the access log and /metrics: the endpoint's report of its
/// messages and the shards its search reached.
struct mcp_facts {
  mcp::request_report report;  ///< views valid while the request is handled
  shard_count shards;
};

/// What the handler's gate knows of one HTTP request besides its key and figures.
struct request_terms {
  /// Tollgate-Deadline (unix ms; 0: none): a tools/call is not admitted past it.
  int64_t deadline_ms = 0;
  /// A re-delivered request (parked, or deferred for its remote shards): when it was first
  /// read (0: now). A cancellation reaches only calls received before it (cancel_set).
  int64_t received_ns = 0;
  /// Cluster mode: a billable call whose node holds no units of the key may wait for them
  /// (admit() then yields the request, and lease_pending() says so) rather than be answered
  /// by the outage rules at once.
  bool may_wait_lease = false;
  /// A re-delivery: its batch entries were charged to the rate limit on the first delivery,
  /// so charge_extra() charges nothing again.
  bool continuing = false;
};

class core_host final : public mcp::host, public mcp::rate_charge, public tool_caller {
 public:
  core_host(quota::core_ledger& quota, const search::backend& backend)
      : quota_(quota), tools_(backend, *this) {}
  /// stdio with its corpus still loading: the tools get their backend later
  /// (tool_context::set_backend, or the gate the app sets).
  explicit core_host(quota::core_ledger& quota) : quota_(quota), tools_(*this) {}

  /// The cores' shared set of cancelled requests (null: cancellations are not recorded, as on
  /// stdio, where each call is answered before the next line is read).
  void set_cancels(cancel_set* c) noexcept { cancels_ = c; }

  /// Arms the host for one request of key `k` whose rate figures are already in `fig`.
  void begin(const quota::key_record& k, int64_t now_ns, const quota::figures& fig,
             const request_terms& t = {}) noexcept {
    key_ = &k;
    now_ns_ = now_ns;
    fig_ = fig;
    terms_ = t;
    if (terms_.received_ns == 0) {
      terms_.received_ns = now_ns;
    }
    admitted_ = false;
    quota_filled_ = false;
    tools_.begin_request();
    lease_pending_ = false;
    billed_here_ = false;
    shards_ = {};
  }
  /// The request yielded to wait for quota units (not for a search slice).
  bool lease_pending() const noexcept { return lease_pending_; }

  /// stdio (the one mode): no engine drives this core, so the host does: each call re-reads the
  /// clock, runs the quota tick, re-checks the key (a revocation or suspension takes effect),
  /// charges the
  /// rate limit (a breach is a rate_limited tool error) and writes the journal before the
  /// response goes out.
  void set_stdio(std::string secret);

  void write_headers(out_buffer& out) override;
  /// Drops a call its client gave up on (past its deadline, or cancelled) before the quota
  /// core sees it; then admits it from the core's lease.
  mcp::admission admit(std::string_view tool, std::string_view id) override;
  void settle(bool success) override;
  /// stdio: handshakes, lists and pings count toward the rate limit too.
  mcp::admission rate_check() override;
  /// HTTP batches: each request after the first is charged to the key's rate limit.
  mcp::admission charge_extra() override;
  /// HTTP: gives back the charge the gate made for a POST answered 202 (notifications and
  /// responses only); a keyless request gives nothing back.
  void refund() override;
  /// Arms the host for a request that carries no key (GET and DELETE /mcp, answered by the
  /// endpoint without one): write_headers() writes nothing, never another request's figures.
  void begin_keyless() noexcept {
    key_ = nullptr;
    admitted_ = false;
    quota_filled_ = false;
    shards_ = {};
  }

  /// The context the core's tools run against: lent to the endpoint for each tool call; the
  /// handler sets it up and arms its search jobs.
  tool_context* tools() noexcept { return &tools_; }
  /// A search answered by some shards only (the access log's partial shards).
  void note_partial(uint32_t answered, uint32_t total) noexcept override {
    shards_ = {answered, total};
  }
  bool billed_earlier() const noexcept override { return billed_here_; }
  const shard_count& shards() const noexcept { return shards_; }
  void reset_shards() noexcept { shards_ = {}; }

  /// The caller's key and figures (the quota part filled on demand).
  const quota::key_record& key() const noexcept override { return *key_; }
  const quota::figures& figures_now() override;

 private:
  quota::core_ledger& quota_;
  tool_context tools_;
  const quota::key_record* key_ = nullptr;
  int64_t now_ns_ = 0;
  quota::figures fig_;
  quota::ticket ticket_;
  shard_count shards_;
  request_terms terms_;
  // The request's state: a call admitted and not yet settled; fig_'s quota part current; the
  // request yielded for quota units; a call of this delivery was billed.
  bool admitted_ = false;
  bool quota_filled_ = false;
  bool lease_pending_ = false;
  bool billed_here_ = false;
  cancel_set* cancels_ = nullptr;
  /// stdio, at the start of each call: the clock, the core's tick when due, and the key's
  /// current record (false when it was revoked).
  bool stdio_begin_call();
  bool stdio_ = false;
  std::string stdio_secret_;
  int64_t last_tick_ns_ = 0;
};

}  // namespace tollgate::app
