// The quota core: key lookup, per-key rate limit (GCRA), monthly quota with per-core leases,
// billing, the usage journal and reconciliation. What the app wires into its handlers.
//
// Shape (thread-per-core):
//   service      thread-safe; owns the plans, every key's shared state (stable for the process
//                lifetime, so counters survive reloads), the current lookup table, the data dir.
//   core_ledger   core-local; one per core, created by the service, used only by its core's
//                thread. Counts locally and spends from leases; talks to shared lines only for
//                the GCRA atomic and for lease refills.
//
// Per request on core c (all on c's thread, allocation-free in the steady state):
//   1. rec = ledger.authenticate(key)        nullptr -> 401 (missing/unknown/revoked key)
//   2. ledger.check_rate(*rec, now, fig)     limited -> 429 / rate_limited (every /mcp and /v1
//                                           request counts, handshakes included)
//   3. billable calls only: ledger.admit(*rec, now, fig, ticket)
//                                           suspended / quota_exceeded -> tool error / 403 / 429
//      then, once the outcome is known:     ledger.settle(ticket, success)
//      non-billable calls: ledger.fill_quota(*rec, now, fig) for the headers
//   4. write_rate_headers(out, fig)         the X-RateLimit-*, X-Quota-*, RateLimit-Policy,
//                                           RateLimit (and Retry-After) header lines; the same
//                                           `fig` feeds the tool-error JSON, so numbers match.
// Per loop pass: ledger.before_send(now)  (journal write(2) before responses go out; picks up a
// new lookup table). An io_uring engine instead takes the pass's bytes with take_journal(),
// writes them itself and reports with journal_done() (and journal_synced() for fdatasync). About
// every 100 ms: ledger.on_tick(now) (reconcile, fsync, reload, persist when due). On SIGHUP:
// service.request_reload() (async-signal-safe).
//
// Lifetimes: a key_record* from authenticate() is valid until the same ledger's next
// before_send()/on_tick() (the quiescent points of the table reclamation scheme, see service.cc).
// A ticket stays valid until settled, across passes and reloads. Ledgers live as long as the
// service.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/common/result.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/lease_source.h"
#include "tollgate/quota/plan.h"
#include "tollgate/quota/verdict.h"

namespace tollgate::quota {

struct service_options {
  std::string data_dir = "./tollgate-data";
  plan_map plans;
  int cores = 1;                           ///< number of core_ledgers
  int64_t reconcile_ms = 1000;             ///< per-core deltas published, snapshot persisted
  int64_t fsync_ms = 1000;                 ///< journal fdatasync period (power-loss window)
  int64_t reload_ms = 1000;                ///< keys/accounts files checked this often
  int64_t max_lease = 64;                  ///< largest lease a core takes from a key's budget
  int64_t journal_rotate_bytes = 1 << 20;  ///< a core starts a new journal file past this size
  /// How long a failing journal write is retried before its records are dropped (not billed)
  /// and the answers waiting for them are refused as unavailable (journal_chunk::dropped).
  int64_t journal_give_up_ms = 1000;
  /// Start although the snapshot is missing or empty while the journals show one was written
  /// (a journal generation above 0: earlier ones were compacted into it); refused otherwise.
  bool accept_usage_loss = false;
  /// Cluster mode (null: single node). Key pools start empty and are filled by `leases`; keys
  /// and accounts come from install_keys() instead of the data dir's files (the data dir keeps
  /// the usage journals). Must outlive the service.
  lease_source* leases = nullptr;
};

struct key_state;        // shared per-key atomics; defined in src/quota/state.h
struct key_table;        // immutable lookup table; defined in src/quota/state.h
class core_ledger_impl;  // a core_ledger's state; defined in src/quota/core_ledger.h

/// One key as the lookup table sees it. Immutable; owned by a table.
struct key_record {
  digest hash{};
  uint64_t key_id = 0;
  key_state* state = nullptr;  ///< stable for the service's lifetime
  uint32_t slot = 0;           ///< index of the key's per-core local counters
  bool suspended = false;      ///< the key's account is suspended
  overage_policy overage = overage_policy::stop;
  int64_t monthly_quota = 0;
  int64_t burst = 0;
  int64_t emission_ns = 0;   ///< 1e9 / rate_per_sec
  int64_t tolerance_ns = 0;  ///< burst * emission_ns
  int64_t window_secs = 1;   ///< ceil(tolerance_ns / 1e9), at least 1
  std::string account;
  std::string plan;
};

/// An OAuth access token (app/oauth): the SHA-256 of its secret, its key, and the unix second
/// from which it is refused.
struct token_alias {
  digest hash{};
  uint64_t key_id = 0;
  int64_t expires_unix = 0;
};

/// One consistent set of figures for one request: the headers and the tool-error JSON are both
/// written from it. Durations are whole seconds from `now`.
struct figures {
  int64_t rate_limit = 0;        ///< burst (requests allowed at once)
  int64_t rate_remaining = 0;    ///< requests allowed right now
  int64_t rate_reset_secs = 0;   ///< until the bucket is full again
  int64_t rate_window_secs = 1;  ///< ceil(burst / rate): the policy window
  int64_t quota_limit = 0;
  int64_t quota_used = 0;  ///< billed this month, counting the call answered if admitted
  int64_t quota_remaining = 0;
  int64_t quota_reset_secs = 0;  ///< until the end of the UTC month (>= 1)
  int64_t retry_after_secs = 0;  ///< >= 1 when rate limited or quota exceeded, else 0
};

/// An admitted billable call awaiting its outcome. Plain data; settle exactly once on the ledger
/// that admitted it.
struct ticket {
  key_state* state = nullptr;
  uint64_t key_id = 0;
  uint32_t slot = 0;
  uint32_t month = 0;    ///< month index at admission
  bool overage = false;  ///< admitted past the quota (bill keys)
};

/// Writes the rate/quota header lines ("Name: value\r\n" each) from one figures snapshot:
/// X-RateLimit-Limit/Remaining/Reset, X-Quota-Limit/Used/Remaining/Reset, RateLimit-Policy,
/// RateLimit (IETF draft: policies "burst" and "monthly"), and Retry-After when
/// retry_after_secs > 0. Allocation-free once `out` has capacity.
void write_rate_headers(out_buffer& out, const figures& f);

class service;

/// What start-up recovery found (also logged).
struct recovery_report {
  uint64_t journal_files = 0;
  uint64_t records_replayed = 0;
  uint64_t units_replayed = 0;
  uint64_t corrupt_records = 0;  ///< bad magic/CRC: skipped
  uint64_t torn_bytes = 0;       ///< partial record at a file's end: skipped
  bool snapshot_loaded = false;
};

/// A core's usage journal as monitoring sees it. Written by the core's thread on state changes
/// (not per request), read from any thread (/metrics, /readyz); relaxed: figures only.
struct journal_health {
  std::atomic<uint64_t> errors{0};   ///< write, fdatasync, open and space-reservation failures
  std::atomic<uint64_t> refused{0};  ///< billed calls refused as unavailable (not recordable)
  std::atomic<uint64_t> dropped{0};  ///< of them, calls answered whose records were dropped
  std::atomic<int64_t> unwritten_since_ns{0};  ///< CLOCK_REALTIME of the oldest record not yet
                                               ///< written (0: none)
  std::atomic<bool> failing{false};            ///< the last write, open or reservation failed
};

/// Core-local: one per core, used only by that core's thread (created and owned by service).
/// Its state is private to src/quota (core_ledger_impl in src/quota/core_ledger.h).
class core_ledger {
 public:
  core_ledger(const core_ledger&) = delete;
  core_ledger& operator=(const core_ledger&) = delete;

  /// Looks up a presented key (the raw header value, e.g. "tg_live_…"): SHA-256 of it, table
  /// lookup by digest, constant-time digest comparison. nullptr: unknown or revoked.
  /// A small per-core cache remembers the keys this core authenticated against its current
  /// table (presented bytes compared in constant time), so a repeated key skips the SHA-256;
  /// it is emptied whenever the core switches tables, so a revoked or suspended key is answered
  /// exactly as without it (see key_cache_slot in src/quota/core_ledger.h).
  const key_record* authenticate(std::string_view presented) noexcept;
  /// authenticate() against the newest table, switching to it now if this core has not yet
  /// (an OAuth token issued a moment ago on another core, before this core's next pass). The
  /// table it leaves stays alive until this core's next quiescent point, so records already
  /// handed out this pass stay valid. No lock, no system call; for a presented token that
  /// authenticate() did not know.
  const key_record* authenticate_newest(std::string_view presented) noexcept;
  /// Look-ups the key cache answered, and look-ups that computed the SHA-256 (tests, metrics).
  uint64_t key_cache_hits() const noexcept;
  uint64_t key_cache_misses() const noexcept;
  /// Calls this core has billed so far, and of them those billed as overage (core-local: the
  /// app reads the difference around one request for its access log and /metrics).
  uint64_t billed_calls() const noexcept;
  uint64_t overage_calls() const noexcept;
  /// Charges one request to the key's rate limit (GCRA, exact across cores) and fills the rate
  /// part of `f` (and retry_after_secs when limited).
  rate_verdict check_rate(const key_record& k, int64_t now_ns, figures& f) noexcept;
  /// Gives back one request that check_rate() admitted and that turned out not to count (a
  /// JSON-RPC notification or response, answered 202 with no work), and refreshes the rate part
  /// of `f` to match. Call only after an ok from check_rate() for the same request.
  void refund_rate(const key_record& k, int64_t now_ns, figures& f) noexcept;
  /// Admits one billable call against the monthly quota; fills the quota part of `f`, on ok
  /// counting this call as billed (used + 1: the figures its answer reports). On ok, `t` must be
  /// settled later. Suspended accounts are refused before the quota is touched.
  /// `may_wait` (cluster mode): when the node must ask Redis for units, answer lease_pending
  /// instead of deciding now; false: decide now (an outage's rules when no units are held).
  admit_verdict admit(const key_record& k, int64_t now_ns, figures& f, ticket& t,
                      bool may_wait = false) noexcept;
  /// The outcome of an admitted call: success bills it (journal record, usage counted);
  /// failure gives its unit back.
  void settle(const ticket& t, bool success) noexcept;
  /// Quota figures without admitting (non-billable requests, /v1/usage, get_usage).
  void fill_quota(const key_record& k, int64_t now_ns, figures& f) const noexcept;

  /// Once per loop pass, before responses are sent: writes the pass's journal records with
  /// one write(2) (flush_journal) and passes a quiescent point (may pick up a new table).
  void before_send(int64_t now_ns) noexcept;
  /// About every 100 ms: reconcile / fsync / reload / persist when due; a quiescent point.
  void on_tick(int64_t now_ns) noexcept;
  /// Writes buffered journal records with one write(2). Returns false on an I/O error (logged;
  /// the records stay buffered and are retried).
  bool flush_journal() noexcept;
  /// Publishes this core's deltas and returns its leases now (normally from on_tick).
  void reconcile(int64_t now_ns) noexcept;
  /// Encoded journal records not yet written (for tests); seals the record being coalesced
  /// first. Bytes taken by take_journal() and not yet written are not included.
  std::string_view pending_journal() noexcept;

  /// The next journal write for an engine that writes asynchronously (io_uring).
  struct journal_chunk {
    int fd = -1;             ///< -1 with bytes: the journal file could not be opened
    std::string_view bytes;  ///< stable until journal_done(); empty: nothing to write
    bool sync_due = false;   ///< an fdatasync is due (fsync_ms); report via journal_synced
    /// The records of every earlier chunk not written by now were dropped (their writes kept
    /// failing for journal_give_up_ms): those calls are not billed, so no answer waiting for
    /// them may go out as a success. `bytes` then holds at most the rest of a record whose
    /// start is already on file.
    bool dropped = false;
  };
  /// Takes the bytes to write next: the unwritten rest of the previous chunk if any, else every
  /// record buffered so far (moved to a second buffer, so records settled while the write is
  /// in flight never move the bytes under the kernel). While a chunk is out (until
  /// journal_done) flush_journal() and reconcile() write nothing, so journal bytes are never
  /// interleaved. From the first call on, before_send() no longer writes and on_tick() asks for
  /// fdatasync through sync_due instead of calling it. Allocation-free.
  journal_chunk take_journal() noexcept;
  /// The write of the taken chunk finished: `res` >= 0 bytes were appended (the rest, if any,
  /// is returned by the next take_journal()); < 0: -errno, nothing is counted written, the
  /// bytes stay buffered and the error is logged. Never loses a record.
  void journal_done(int64_t res) noexcept;
  /// The fdatasync asked for by sync_due finished: 0 or -errno (logged; asked again later).
  void journal_synced(int res) noexcept;
  /// Bytes written by the journal and not yet known synced (tests).
  uint64_t journal_unsynced() const noexcept;
  /// Journal write failures so far (either path).
  uint64_t journal_errors() const noexcept;
  /// Journal health for monitoring; any thread.
  const journal_health& health() const noexcept;
  /// Changes whenever a billed success is recorded (it grows with every record appended until
  /// the pass's journal write): a handler compares it across one request to learn whether that
  /// request's answer waits for the journal.
  uint64_t billed_seq() const noexcept;
  /// Space reserved on disk for journal records (fallocate ahead of the file's end) is taken in
  /// steps of this many bytes, so a full disk is found before a call is answered, not after.
  static constexpr uint64_t reserve_step = 16 * 1024;

  int index() const noexcept;

 protected:
  core_ledger() = default;
  ~core_ledger() = default;
};

/// Usage of one key in one month (tests, /v1/usage admin views, billing).
struct usage_totals {
  int64_t used = 0;
  int64_t overage = 0;
  /// Unix seconds of the first and last billed call known (0: none known; usage recorded before
  /// the journal kept times has none).
  int64_t first_s = 0;
  int64_t last_s = 0;

  /// Adds `u` calls (`o` of them overage) made between `first` and `last` (0: unknown).
  void add(int64_t u, int64_t o, int64_t first, int64_t last) noexcept {
    used += u;
    overage += o;
    if (first > 0 && (first_s == 0 || first < first_s)) {
      first_s = first;
    }
    last_s = last > last_s ? last : last_s;
  }
};

/// Thread-safe. Owns key states, tables, ledgers and the usage files of the data dir.
class service {
 public:
  /// Loads keys, accounts, the usage snapshot and journals from `opt.data_dir` (replaying
  /// journals, skipping corrupt/torn records with a logged report), writes a fresh snapshot and
  /// creates `opt.cores` ledgers. Plans must pass validate_plans().
  static result<std::unique_ptr<service>, std::string> open(service_options opt, int64_t now_ns);
  ~service();

  core_ledger& ledger(int i) noexcept;
  int cores() const noexcept { return static_cast<int>(ledgers_.size()); }

  /// Async-signal-safe: the next on_tick on any core reloads keys and accounts.
  void request_reload() noexcept { reload_requested_.store(true, std::memory_order_relaxed); }
  /// Re-reads keys/accounts if their files changed (or `force`), swaps in a new lookup table
  /// and frees tables no ledger can still see. Any thread. Returns true if a new table was made.
  /// When the files cannot be read, `why` (if given) gets the reason.
  bool reload_if_changed(bool force = false, std::string* why = nullptr);
  /// Replaces the plans (SIGHUP and the admin reload call) and rebuilds the lookup table from
  /// them, re-reading keys and accounts, so every key's next request is judged by its plan's
  /// new figures (rate, burst, monthly quota, overage). Refused, changing nothing, when a plan
  /// is invalid or a live key names a plan the new set lacks. Any thread.
  result<void, std::string> replace_plans(plan_map plans);
  /// Keys in the current lookup table: live keys whose plan exists.
  size_t key_count() const;
  /// Whether key `key_id` is in the current lookup table (live, unexpired, its plan known), as
  /// of the last reload (cluster mode: the last key set the agent installed). Scans the table
  /// under the service's lock: not for a core.
  bool key_in_force(uint64_t key_id) const;
  /// OAuth access tokens: each is its key under another secret, in the same lookup table (so a
  /// token costs the hot path exactly what its key does). Replaces the set in force and swaps
  /// in a new table; a token whose key is revoked or gone, or past `expires_unix`, is left out
  /// (an expiry rebuilds the table within the service's 1 s check). Any thread.
  void set_token_aliases(std::vector<token_alias> tokens);
  /// Cluster mode: replaces the keys and accounts (read from Redis) and swaps in a new lookup
  /// table built from them and the plans. Any thread.
  void install_keys(store_contents c);
  /// Cluster mode: calls `fn` for every key's shared state under the service's lock (the agent
  /// reads the reconciled usage and feeds the pools). `fn` must not call back into the service.
  void for_each_state(const std::function<void(key_state&)>& fn);
  /// Cluster mode: this node's share (0..1] of each listed key's rate and burst, and of keys not
  /// listed; swaps in a table built with them (rate x share, burst x share, at least 1). Any
  /// thread.
  void set_rate_shares(double default_share,
                       const std::vector<std::pair<uint64_t, double>>& shares);
  /// Waits (sleeping 1 ms at a time, at most `timeout_ms`) until every ledger has passed a
  /// quiescent point since the current table was made, i.e. a reload is in force for every
  /// request that arrives after it returns true. Ledgers running on engine cores pass one at
  /// least every tick (100 ms). Any thread but a ledger's own.
  bool wait_until_in_force(int64_t timeout_ms) const;
  /// Writes the usage snapshot (atomic rename) and deletes compacted journals. Any thread.
  void persist(int64_t now_ns);
  /// Shutdown: reconciles every ledger, then persists. Precondition: no ledger is in use.
  void close(int64_t now_ns);

  /// False while any core's usage journal is failing (a write, open or space reservation
  /// failed and has not succeeded since): /readyz. Any thread.
  bool journals_ok() const noexcept;
  /// Usage snapshots that could not be written (journals are kept meanwhile). Any thread.
  uint64_t snapshot_errors() const noexcept {
    return snapshot_errors_.load(std::memory_order_relaxed);
  }
  /// Reconciled usage of a key in a month (current month: as of the last reconciliation).
  usage_totals usage(uint64_t key_id, uint32_t month) const;
  const recovery_report& recovery() const noexcept { return recovery_; }
  const service_options& options() const noexcept { return opt_; }
  /// Month the service's counters are for.
  uint32_t month() const noexcept { return month_.load(std::memory_order_acquire); }

 private:
  friend class core_ledger_impl;
  explicit service(service_options opt);
  struct impl;

  void ensure_month_locked(uint32_t month);
  void maybe_background(int64_t now_ns);

  // open()'s steps (recovery.cc).
  struct recovered;
  result<void, std::string> read_snapshot(recovered& rc);
  result<void, std::string> replay_journals(recovered& rc);
  result<void, std::string> restore_usage(recovered& rc);
  result<void, std::string> open_ledgers(uint32_t month, int64_t now_ns);
  // reload_if_changed()'s steps (reload.cc).
  std::string suspect_contents(const store_contents& c, bool keys_gone, bool accounts_gone) const;
  std::unique_ptr<key_table> build_table(const store_contents& c);
  key_record make_record_locked(const key_entry& e, const plan& p, bool suspended, uint32_t month);
  void swap_in(std::unique_ptr<key_table> t);
  void reclaim_tables();

  service_options opt_;
  std::unique_ptr<impl> impl_;
  std::atomic<const key_table*> current_{nullptr};
  std::atomic<uint32_t> month_{0};
  std::atomic<bool> reload_requested_{false};
  std::atomic<int64_t> next_reload_ns_{0};
  std::atomic<int64_t> next_persist_ns_{0};
  std::atomic<uint64_t> snapshot_errors_{0};
  std::vector<std::unique_ptr<core_ledger_impl>> ledgers_;
  recovery_report recovery_;
};

}  // namespace tollgate::quota
