// The cluster agent: a node's one Redis I/O thread (no thread per request, no Redis round trip
// per request in the steady state). It
//   1. loads keys and accounts from Redis into the quota service, and polls their version every
//      200 ms, so a change reaches the node's requests within a second with no signal;
//   2. feeds the node's key pools with units leased from Redis (one script per lease; the cores
//      lease from the pool as in single-node mode), sized by demand and shrinking as the key's
//      budget nears its end; an idle node's unused units go back;
//   3. pushes, every sync interval, each key's usage as the node's journal has it (absolute
//      counts: a retry or a replay never counts twice) and reads back the other nodes' sum,
//      which the figures add to the node's own;
//   4. keeps serving through an outage: keys and accounts keep their last-known state, bill keys
//      are admitted (counted locally, pushed when Redis returns), a stop key is admitted while
//      its node holds units and is then answered `unavailable`, never `quota_exceeded`;
//   5. heartbeats into P{nodes} (cluster status).
//
// Thread-safe. request() is called by cores (quota::lease_source), never waiting on Redis: a
// core that needs units asks, parks the request, and is woken when the attempt is over; the rest
// by the app.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tollgate/cluster/cluster.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/lease_source.h"

namespace tollgate::quota {
class service;
}

namespace tollgate::cluster {

struct redis_reply;

class redis_conn;
class redis_keys;

/// A node's rate share of a key: `demand` is its own demand (requests/s), `demand_sum` the sum
/// over the `nodes` nodes reporting (its own included). Each node keeps a floor of 1/(10C) and
/// the rest is split by demand; the shares of all nodes sum to 1, and a node that alone has
/// demand gets 1 - (C-1)/(10C) of it.
double rate_share(int64_t demand, int64_t demand_sum, int64_t nodes) noexcept;

/// Counters for /metrics (and tests).
struct agent_stats {
  bool redis_up = false;
  bool keys_loaded = false;
  uint64_t lease_grants = 0;    ///< lease scripts that granted units
  uint64_t lease_units = 0;     ///< units granted in all
  uint64_t lease_waits = 0;     ///< times a core asked for units (its requests parked)
  uint64_t units_returned = 0;  ///< units handed back to Redis
  uint64_t redis_commands = 0;  ///< commands sent by the agent
  uint64_t idle_skipped = 0;    ///< key pushes skipped: nothing changed (idle keys cost nothing)
  uint64_t restores = 0;        ///< times this node put its copy back into Redis
  double push_lag_secs = 0;     ///< since the last complete push of every key's usage
  double outage_secs = 0;       ///< Redis unreachable, in all (including now)
  int64_t units_held = 0;       ///< units leased to this node and not used
};

struct agent_options {
  int64_t sync_ms = 500;          ///< push usage / read sums / top up pools this often
  int64_t version_poll_ms = 200;  ///< keys and accounts version check
  int64_t heartbeat_ms = 1000;
  int64_t recheck_ms = 200;  ///< a spent key asks Redis again after this (units come back)
  /// Longest a request waits (parked, its core serving others) for units its node asked Redis
  /// for; past it the outage rules answer (stop key `unavailable`, bill key counted locally).
  int64_t lease_wait_ms = 50;
  /// After Redis lost a key's usage: how long (Redis's clock) no lease of it is granted while
  /// every node pushes its figures again (each does within a poll and a sync interval).
  int64_t recovery_ms = 2000;
  /// A node's claim not refreshed this long (it died, or lost Redis) counts only the units it
  /// used: the rest go back to the other nodes. A node cut off from Redis for half of it gives
  /// up the units its pools hold (never admitting from units that may be reclaimed).
  int64_t stale_claim_ms = 60000;
  int64_t max_lease = 1 << 20;  ///< most units a node asks for at once
};

class agent final : public quota::lease_source {
 public:
  agent(settings s, agent_options o = {});
  ~agent() override;

  /// Starts the I/O thread for `svc` (opened with this agent as its lease source) and waits up
  /// to `first_load_ms` for keys to load. Returns whether they did (else the node is not ready
  /// until they do).
  bool start(quota::service& svc, int64_t first_load_ms);
  /// Final push (all units of the node handed back) when Redis is up, then joins the thread.
  /// Call after the service's close().
  void stop();

  bool keys_loaded() const noexcept { return keys_loaded_.load(std::memory_order_acquire); }
  bool redis_up() const noexcept { return up_.load(std::memory_order_acquire); }
  agent_stats stats() const;
  const settings& config() const noexcept { return s_; }
  const agent_options& options() const noexcept { return o_; }

  quota::lease_outcome request(quota::key_state& s, uint32_t month, int core) noexcept override;
  void set_waker(int core, std::function<void()> wake) override;

 private:
  struct key_info;
  void run();
  bool connect_locked_out();
  void mark_down(const std::string& why);
  /// Redis unreachable for half of stale_claim_ms: empties the node's pools (see kSync).
  void give_up_units_if_cut_off(int64_t now);
  void poll_keys();
  /// Redis lost its data (no epoch, another epoch, an older version): this node's copy goes
  /// back in (keys.cc kRestore) before anything is loaded from it.
  void restore_copy(const std::string& why);
  /// Writes the data dir's copy of what was installed (cluster-copy.txt), when it changed.
  void save_copy(const quota::store_contents& c);
  bool sync_all(bool final_push);
  bool sync_key(key_info& k, bool lease, bool final_push);
  /// One key's push, prepared (its units planned) and then taken in, so that sync_all can send
  /// many in one round trip (pipelined) and read their answers in order.
  struct push {
    key_info* k = nullptr;
    std::vector<std::string> argv;  // EVALSHA kSync …
    int64_t want = 0, returned = 0, rate_demand = -1, used = 0, over = 0,
            last = 0;  // l:NODE sent (unix seconds of the last billed call)
    uint32_t month = 0;
  };
  /// False: the month could not be rolled (Redis unreachable).
  bool prepare_push(key_info& k, bool lease, bool final_push, push& out);
  /// Takes the script's answer to `p` in (or logs its refusal). False: the connection failed.
  bool finish_push(push& p, result<redis_reply, redis_error>& r);
  /// Puts a share computed by the last answer in force (see sync_all).
  void settle_share(key_info& k, std::vector<std::pair<uint64_t, double>>& changed);
  // sync_key's steps: a month that ended is pushed and the key starts afresh; the units to ask
  // for or hand back; the rate demand to report; the script's answer taken in.
  struct unit_plan {
    int64_t want = 0;      // units asked of Redis
    int64_t returned = 0;  // units taken from the node's pool to hand back
  };
  bool roll_month(key_info& k, uint32_t month);
  unit_plan plan_units(key_info& k, bool lease, bool final_push, int64_t used, int64_t over,
                       uint32_t month);
  int64_t rate_demand_of(key_info& k, bool lease, bool final_push);
  void apply_sync(key_info& k, const unit_plan& p, int64_t rate_demand, uint32_t month,
                  const redis_reply& r);
  /// Heartbeat and live-node count; false when Redis refused it (retried soon).
  bool heartbeat();
  /// Leases for the keys cores wait on; false on a connection failure.
  bool serve_waiters();
  /// Wakes the cores in `mask` (their parked requests admit again).
  void wake_cores(uint64_t mask);

  settings s_;
  agent_options o_;
  quota::service* svc_ = nullptr;
  std::unique_ptr<redis_keys> keys_;  // owns the connection the agent uses
  redis_conn* conn_ = nullptr;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable work_;  // the I/O thread waits here
  std::condition_variable done_;  // start() waits here for the first key load
  std::mutex wake_mu_;            // wakers_ (set by cores at attach, called by the I/O thread)
  std::vector<std::function<void()>> wakers_;
  std::unordered_map<quota::key_state*, std::unique_ptr<key_info>> info_;
  bool stop_ = false;
  bool want_any_ = false;
  std::atomic<bool> up_{false};
  std::atomic<bool> keys_loaded_{false};
  int64_t keys_version_ = -2;
  size_t loaded_keys_ = 0;     // I/O thread: keys in the last set installed
  int64_t down_since_ns_ = 0;  // steady clock; 0 while up
  int64_t outage_ns_ = 0;      // finished outages
  int64_t last_push_ns_ = 0;
  uint64_t lease_grants_ = 0, lease_units_ = 0, lease_waits_ = 0, units_returned_ = 0;
  std::atomic<uint64_t> commands_{0};
  int64_t started_ns_ = 0;
  // I/O thread: what keeps Redis a cache of the truth (cluster.h, docs/design.md).
  std::string epoch_;           // the epoch of the keys installed (or of the copy at start)
  int64_t resync_ = -1;         // the resync counter last seen (-1: not yet)
  quota::store_contents copy_;  // the last key set installed (or read from the copy)
  std::string copy_path_;       // <data dir>/cluster-copy.txt
  std::string copy_written_;    // the copy's text as last written
  bool repush_all_ = false;     // push every key once more (a restore happened)
  std::string recovery_id_;     // "epoch:resync" of that restore
  std::atomic<uint64_t> idle_skipped_{0};  // figures for stats()
  std::atomic<uint64_t> restores_{0};
  double default_share_ = 1.0;  // I/O thread: 1 / live nodes
  double applied_default_ = 1.0;
};

}  // namespace tollgate::cluster
