// The cluster agent (see agent.h). Lease and push protocol, per key and month, one script:
//   1. The node sends its absolute figures: u = billed calls its journal holds, o = overage
//      among them, g = its claim (units used from leases + units it still holds), and how many
//      more units it wants.
//   2. The script raises u:NODE and o:NODE to what was sent (never lowers them, so a retry or a
//      replay after a restart changes nothing), sets g:NODE, and grants
//      min(want, max(1, floor(avail / (2 x nodes claiming)))) of avail = quota - sum(g:*):
//      leases shrink as the budget nears its end, down to single units.
//   3. It answers the grant, the other nodes' billed sum (the figures add it to the node's
//      own), and what is left.
// A lost answer costs nothing: the node did not add the units, and its next push sets g back to
// the claim it knows. A node restarted after kill -9 starts its claim at what its journal says
// it used, so the units it held when it died come back with its first push; a node that never
// comes back strands at most what it held (one lease: about two sync intervals of its demand).
#include "tollgate/cluster/agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>

#include "tollgate/cluster/keys.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/key_state.h"
#include "tollgate/quota/service.h"

namespace tollgate::cluster {

namespace {

constexpr int64_t kNsPerMs = 1000000;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const redis_script kSync(R"(
local h = KEYS[1]
local node = ARGV[1]
local quota = tonumber(ARGV[2])
local used = tonumber(ARGV[3])
local over = tonumber(ARGV[4])
local claim = tonumber(ARGV[5])
local want = tonumber(ARGV[6])
local uf, of, gf = 'u:' .. node, 'o:' .. node, 'g:' .. node
local cu = tonumber(redis.call('HGET', h, uf) or '0')
if used > cu then redis.call('HSET', h, uf, used); cu = used end
local co = tonumber(redis.call('HGET', h, of) or '0')
if over > co then redis.call('HSET', h, of, over) end
local all = redis.call('HGETALL', h)
local U, G, N = 0, 0, 1
for i = 1, #all, 2 do
  local f, v = all[i], tonumber(all[i + 1])
  local t = string.sub(f, 1, 2)
  if t == 'u:' then U = U + v
  elseif t == 'g:' and f ~= gf then
    G = G + v
    if v > 0 then N = N + 1 end
  end
end
G = G + claim
local avail = quota - G
local dm, nowms, D, C = tonumber(ARGV[8]), tonumber(ARGV[9]), 0, 1
if dm >= 0 then
  redis.call('HSET', h, 'd:' .. node, dm .. ' ' .. nowms)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'd:' and all[i] ~= 'd:' .. node then
      local d, ts = string.match(all[i + 1], '^(%d+) (%d+)$')
      if d and nowms - tonumber(ts) < 3000 then
        D = D + tonumber(d) + 1
        C = C + 1
      end
    end
  end
  D = D + dm + 1
end
local n = 0
if want > 0 and avail > 0 then
  n = math.floor(avail / (2 * N))
  if n < 1 then n = 1 end
  if n > want then n = want end
end
if claim + n > 0 or redis.call('HEXISTS', h, gf) == 1 then
  redis.call('HSET', h, gf, claim + n)
end
redis.call('PEXPIRE', h, ARGV[7])
return {n, U - cu, avail - n, D, C})");

// A month's usage hash lives this long after its last write (100 days): long enough for
// billing to read a closed month.
constexpr const char* kUsageTtlMs = "8640000000";

// Takes up to `most` units from a pool of `month`; returns how many it took.
int64_t take_units(quota::key_state& s, uint32_t month, int64_t most) {
  uint64_t p = s.pool.load(std::memory_order_relaxed);
  for (;;) {
    if (quota::pool_month(p) != month || most <= 0) {
      return 0;
    }
    const int64_t units = quota::pool_units(p);
    const int64_t take = std::min(units, most);
    if (take == 0) {
      return 0;
    }
    // relaxed: the pool is a count; cores CAS it the same way.
    if (s.pool.compare_exchange_weak(p, quota::make_pool(month, units - take),
                                     std::memory_order_relaxed)) {
      return take;
    }
  }
}

bool add_units(quota::key_state& s, uint32_t month, int64_t n) {
  uint64_t p = s.pool.load(std::memory_order_relaxed);
  for (;;) {
    if (quota::pool_month(p) != month) {
      return false;
    }
    if (s.pool.compare_exchange_weak(p, quota::make_pool(month, quota::pool_units(p) + n),
                                     std::memory_order_relaxed)) {
      return true;
    }
  }
}

int64_t pool_of(const quota::key_state& s, uint32_t month) {
  const uint64_t p = s.pool.load(std::memory_order_relaxed);
  return quota::pool_month(p) == month ? quota::pool_units(p) : 0;
}

}  // namespace

// Written by the I/O thread only, except the fields marked (mu_), which cores touch too.
struct agent::key_info {
  quota::key_state* st = nullptr;
  uint64_t id = 0;
  int64_t quota = 0;
  uint32_t month = 0;  // month of `claim`
  int64_t claim = -1;  // units of the month's budget this node claims; -1: not yet known
  int64_t last_used = 0;
  int64_t demand = 0;         // billed per sync interval (decaying maximum)
  int64_t base_emission = 0;  // the plan's GCRA figures (0: not in a table yet)
  int64_t base_burst = 0;
  double share = 0;          // this node's share of the rate; 0: the default
  double applied = 0;        // the share last put in force
  int64_t last_tat = 0;      // GCRA tat at the last demand sample
  int64_t last_rate_ns = 0;  // wall clock of that sample
  bool want = false;         // (mu_) a core waits for units
  bool exhausted = false;    // (mu_) the last lease found the budget spent
  int64_t exhausted_ns = 0;  // (mu_)
  uint64_t done_seq = 0;     // (mu_) bumped after each lease attempt
};

agent::agent(settings s, agent_options o)
    : s_(std::move(s)), o_(o), keys_(std::make_unique<redis_keys>(s_)), conn_(&keys_->conn()) {}

agent::~agent() { stop(); }

bool agent::start(quota::service& svc, int64_t first_load_ms) {
  svc_ = &svc;
  started_ns_ = steady_ns();
  down_since_ns_ = started_ns_;
  thread_ = std::thread([this] { run(); });
  std::unique_lock lk(mu_);
  done_.wait_for(lk, std::chrono::milliseconds(first_load_ms),
                 [&] { return keys_loaded_.load(std::memory_order_acquire); });
  return keys_loaded();
}

void agent::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

agent_stats agent::stats() const {
  agent_stats st;
  std::lock_guard lk(mu_);
  const int64_t now = steady_ns();
  st.redis_up = up_.load(std::memory_order_relaxed);
  st.keys_loaded = keys_loaded();
  st.lease_grants = lease_grants_;
  st.lease_units = lease_units_;
  st.lease_waits = lease_waits_;
  st.units_returned = units_returned_;
  st.redis_commands = commands_.load(std::memory_order_relaxed);
  st.push_lag_secs =
      static_cast<double>(now - (last_push_ns_ != 0 ? last_push_ns_ : started_ns_)) / 1e9;
  st.outage_secs =
      static_cast<double>(outage_ns_ + (down_since_ns_ != 0 ? now - down_since_ns_ : 0)) / 1e9;
  const uint32_t month = svc_ != nullptr ? svc_->month() : 0;
  for (const auto& [s, k] : info_) {
    st.units_held += pool_of(*s, month);  // the node's pools (cores' leases not included)
  }
  return st;
}

quota::lease_outcome agent::refill(quota::key_state& s, uint32_t month) noexcept {
  std::unique_lock lk(mu_);
  if (!up_.load(std::memory_order_acquire) || stop_) {
    return quota::lease_outcome::unreachable;
  }
  auto& slot = info_[&s];
  if (!slot) {
    slot = std::make_unique<key_info>();
    slot->st = &s;
  }
  key_info& k = *slot;
  const int64_t now = steady_ns();
  if (k.exhausted && now - k.exhausted_ns < o_.recheck_ms * kNsPerMs) {
    return quota::lease_outcome::exhausted;
  }
  ++lease_waits_;
  k.want = true;
  want_any_ = true;
  const uint64_t seq = k.done_seq;
  work_.notify_one();
  const bool answered = done_.wait_for(lk, std::chrono::milliseconds(o_.wait_ms), [&] {
    return k.done_seq != seq || !up_.load(std::memory_order_acquire) || stop_;
  });
  if (pool_of(s, month) > 0) {
    return quota::lease_outcome::refilled;
  }
  if (!answered || k.done_seq == seq) {
    return quota::lease_outcome::unreachable;
  }
  return k.exhausted ? quota::lease_outcome::exhausted : quota::lease_outcome::refilled;
}

void agent::mark_down(const std::string& why) {
  conn_->close();
  std::lock_guard lk(mu_);
  if (up_.load(std::memory_order_relaxed)) {
    log_error("cluster: redis unreachable ({}); serving from leases and journals", why);
    up_.store(false, std::memory_order_release);
    down_since_ns_ = steady_ns();
  }
  done_.notify_all();
}

void agent::poll_keys() {
  auto v = keys_->version();
  if (!v) {
    mark_down(v.error().message);
    return;
  }
  if (*v == keys_version_ && keys_loaded()) {
    return;
  }
  int64_t version = 0;
  auto c = keys_->load_versioned(version);
  if (!c) {
    if (!conn_->connected()) {
      mark_down(c.error().message);
    } else {
      log_error("cluster: keys not reloaded (the previous ones stay in force): {}",
                c.error().message);
    }
    return;
  }
  const size_t n = c->keys.size();
  if (n == 0 && loaded_keys_ > 0) {
    // Keys are never deleted (a revoked one stays, flagged): an empty set means a Redis that
    // lost its data (restarted without persistence, or flushed). Every key would turn 401;
    // keep the last ones in force until keys appear again.
    if (keys_version_ != version) {
      log_error(
          "cluster: redis {} holds no keys any more (its data was lost?); the {} key(s) "
          "loaded before stay in force",
          s_.redis, loaded_keys_);
    }
    keys_version_ = version;
    return;
  }
  loaded_keys_ = n;
  svc_->install_keys(std::move(*c));
  keys_version_ = version;
  if (!keys_loaded()) {
    log_info("cluster: {} key(s) loaded from redis {}", n, s_.redis);
  }
  std::lock_guard lk(mu_);
  keys_loaded_.store(true, std::memory_order_release);
  done_.notify_all();
}

// The closed month's last figures, as the node's reconciled usage has them, then a fresh start
// for the new month. False: Redis could not be reached (the month is pushed again next time).
bool agent::roll_month(key_info& k, uint32_t month) {
  if (k.month != 0 && k.claim >= 0) {
    const quota::usage_totals u = svc_->usage(k.id, k.month);
    auto r = conn_->eval(
        kSync, {usage_key(s_, k.id, k.month)},
        {s_.node, std::to_string(k.quota), std::to_string(u.used), std::to_string(u.overage),
         std::to_string(u.used - u.overage), "0", kUsageTtlMs, "-1", std::to_string(wall_ms())});
    if (!r && r.error().io) {
      return false;
    }
  }
  k.month = month;
  k.claim = -1;
  k.last_used = 0;
  k.demand = 0;
  return true;
}

// How many units to ask Redis for (`want`) or hand back (`returned`, already taken from the
// node's pool), from the key's demand and what its pool holds.
agent::unit_plan agent::plan_units(key_info& k, bool lease, bool final_push, int64_t used,
                                   int64_t over, uint32_t month) {
  quota::key_state& st = *k.st;
  if (k.claim < 0) {
    // The pool is empty (only this thread fills it): the claim is what the journal used.
    k.claim = std::max<int64_t>(0, used - over);
  }
  const int64_t pool = pool_of(st, month);
  if (!lease && !final_push) {
    k.demand = std::max(used - k.last_used, k.demand / 2);
    k.last_used = used;
  }
  if (lease) {
    // A core ran dry between syncs: the demand figure (billed calls per sync, as reconciled)
    // lags the load. Doubling it per wait gets the pool ahead of the load in a few round trips;
    // Redis still shrinks grants as the budget ends.
    k.demand = std::max<int64_t>(k.demand * 2, 32);
  }
  const int64_t target = std::clamp<int64_t>(2 * k.demand, 16, o_.max_lease);
  unit_plan p;
  if (final_push) {
    take_units(st, month, pool);
    k.claim = std::max<int64_t>(0, used - over);  // the process ends: every unit goes back
  } else if (lease) {
    p.want = std::max<int64_t>(1, target - pool);
  } else if (k.demand > 0 && pool < target / 2) {
    p.want = target - pool;
  } else if (k.demand == 0 && pool > 0) {
    p.returned = take_units(st, month, pool);  // idle here: let other nodes have them
  } else if (pool > 2 * target) {
    p.returned = take_units(st, month, pool - target);
  }
  k.claim -= p.returned;
  return p;
}

// Rate demand (periodic syncs only), in requests per second at this node's share, from how far
// the key's GCRA tat moved since the last sample: tat follows the node's requests, so a node
// that served the key reports about the capacity it holds, one whose bucket is empty now twice
// that (it wants more), an idle one 0. -1: nothing to report (never rated here).
int64_t agent::rate_demand_of(key_info& k, bool lease, bool final_push) {
  const int64_t wall = wall_ms() * kNsPerMs;
  const int64_t tat = k.st->tat_ns.load(std::memory_order_relaxed);
  if (lease || final_push || k.base_emission <= 0 || tat == 0) {
    return -1;
  }
  const double share = k.applied > 0 ? k.applied : 1.0;
  const int64_t em = std::max<int64_t>(1, static_cast<int64_t>(k.base_emission / share));
  const int64_t burst = std::max<int64_t>(1, static_cast<int64_t>(k.base_burst * share));
  double rps = 0;
  if (k.last_rate_ns > 0 && wall > k.last_rate_ns) {
    const int64_t from = std::max(k.last_tat, k.last_rate_ns);
    rps = tat > from ? static_cast<double>(tat - from) / static_cast<double>(em) /
                           (static_cast<double>(wall - k.last_rate_ns) / 1e9)
                     : 0.0;
  }
  if (tat - wall > em * burst - 2 * em) {
    rps = std::max(rps, 1e9 / static_cast<double>(em)) * 2;
  }
  k.last_tat = tat;
  k.last_rate_ns = wall;
  return static_cast<int64_t>(rps);
}

double rate_share(int64_t demand, int64_t demand_sum, int64_t nodes) noexcept {
  // Every node reporting keeps a floor of 1/(10C) (an idle node is not starved when its
  // clients come back); the rest is split in proportion to demand, so an idle node gets its
  // floor and no more, and all idle is an even split. The shares sum to 1.
  const double c = static_cast<double>(std::max<int64_t>(1, nodes));
  const int64_t own = std::max<int64_t>(0, demand);
  const int64_t sum = std::max(demand_sum, own);
  if (sum == 0) {
    return 1.0 / c;
  }
  const double floor = 1.0 / (10.0 * c);
  return floor + (1.0 - c * floor) * static_cast<double>(own) / static_cast<double>(sum);
}

// Takes the sync script's answer: the key's rate share, the units granted, the other nodes'
// usage, and the lease counters.
void agent::apply_sync(key_info& k, const unit_plan& p, int64_t rate_demand, uint32_t month,
                       const redis_reply& r) {
  quota::key_state& st = *k.st;
  if (rate_demand >= 0 && r.elements[3].integer > 0) {
    // The script sums demand + 1 over the C nodes reporting (D).
    const int64_t c = std::max<int64_t>(1, r.elements[4].integer);
    k.share = rate_share(rate_demand, r.elements[3].integer - c, c);
  }
  const int64_t n = r.elements[0].integer;
  const int64_t others = r.elements[1].integer;
  if (n > 0 && add_units(st, month, n)) {
    k.claim += n;
  }
  st.remote_used.store(std::max<int64_t>(0, others), std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  units_returned_ += static_cast<uint64_t>(p.returned);
  if (n > 0) {
    ++lease_grants_;
    lease_units_ += static_cast<uint64_t>(n);
    k.exhausted = false;
  } else if (p.want > 0) {
    k.exhausted = true;
    k.exhausted_ns = steady_ns();
  }
}

bool agent::sync_key(key_info& k, bool lease, bool final_push) {
  quota::key_state& st = *k.st;
  const uint32_t month = svc_->month();
  if (k.month != month && !roll_month(k, month)) {
    return false;
  }
  const int64_t used = st.used.load(std::memory_order_relaxed);
  const int64_t over = st.overage.load(std::memory_order_relaxed);
  const unit_plan p = plan_units(k, lease, final_push, used, over, month);
  const int64_t rate_demand = rate_demand_of(k, lease, final_push);
  auto r = conn_->eval(kSync, {usage_key(s_, k.id, month)},
                       {s_.node, std::to_string(k.quota), std::to_string(used),
                        std::to_string(over), std::to_string(k.claim), std::to_string(p.want),
                        kUsageTtlMs, std::to_string(rate_demand), std::to_string(wall_ms())});
  commands_.store(conn_->commands(), std::memory_order_relaxed);
  if (!r) {
    if (r.error().io) {
      return false;
    }
    log_error("cluster: usage sync of {} refused: {}", quota::key_id_string(k.id),
              r.error().message);
    return true;
  }
  if (r->elements.size() == 5) {
    apply_sync(k, p, rate_demand, month, *r);
  }
  return true;
}

bool agent::sync_all(bool final_push) {
  struct snap {
    quota::key_state* st;
    uint64_t id;
    int64_t quota;
    int64_t emission;
    int64_t burst;
  };
  std::vector<snap> all;
  std::vector<std::pair<uint64_t, double>> changed_shares;
  svc_->for_each_state([&](quota::key_state& s) {
    all.push_back({&s, s.key_id, s.quota, s.base_emission_ns, s.base_burst});
  });
  for (const snap& s : all) {
    key_info* k;
    {
      std::lock_guard lk(mu_);
      auto& slot = info_[s.st];
      if (!slot) {
        slot = std::make_unique<key_info>();
        slot->st = s.st;
      }
      k = slot.get();
    }
    k->id = s.id;
    k->quota = s.quota;
    k->base_emission = s.emission;
    k->base_burst = s.burst;
    if (s.st->used.load(std::memory_order_relaxed) == 0 && k->claim <= 0 &&
        pool_of(*s.st, svc_->month()) == 0 && k->month == svc_->month() && final_push) {
      continue;  // nothing of this node's to hand back
    }
    if (!sync_key(*k, false, final_push) || (!final_push && !serve_waiters())) {
      return false;  // a core waiting for units is served between two keys' pushes
    }
    // A share that moved by more than 2% (or is new) goes into the next table. A share grows
    // by at most 0.1 a sync (it shrinks at once): the other nodes give up theirs at their own
    // next sync, and meanwhile the sum of the shares passes 1 by at most 0.1 per growing node.
    const double from = k->applied > 0 ? k->applied : default_share_;
    const double next = std::min(k->share, from + 0.1);
    if (k->share > 0 && (k->applied == 0 || std::abs(next - k->applied) > 0.02 * k->applied)) {
      k->applied = next;
      changed_shares.emplace_back(k->id, next);
    }
  }
  if (!changed_shares.empty() || default_share_ != applied_default_) {
    applied_default_ = default_share_;
    svc_->set_rate_shares(default_share_, changed_shares);
  }
  std::lock_guard lk(mu_);
  last_push_ns_ = steady_ns();
  return true;
}

bool agent::heartbeat() {
  const agent_stats st = stats();
  const int64_t now = wall_ms();
  auto r = conn_->command({"HSET", nodes_key(s_), s_.node,
                           fmt::format("{} {} {}", now, st.units_held, svc_->key_count())});
  if (!r) {
    if (r.error().io) {
      mark_down(r.error().message);
    }
    return false;  // e.g. LOADING while Redis reads its AOF: again shortly
  }
  // Keys this node has no demand figure for yet get an equal share among the live nodes.
  auto all = conn_->command({"HGETALL", nodes_key(s_)});
  if (!all) {
    if (all.error().io) {
      mark_down(all.error().message);
    }
    return false;
  }
  int live = 0;
  for (size_t i = 0; i + 1 < all->elements.size(); i += 2) {
    long long beat = 0;
    char state[16] = {};
    const int got = std::sscanf(all->elements[i + 1].str.c_str(), "%lld %*d %15s", &beat, state);
    live += got >= 1 && now - beat < 5000 && std::string_view(state) != "stopped" ? 1 : 0;
  }
  default_share_ = 1.0 / std::max(1, live);
  if (default_share_ != applied_default_ && keys_loaded()) {
    applied_default_ = default_share_;
    svc_->set_rate_shares(default_share_, {});
  }
  return true;
}

bool agent::serve_waiters() {
  std::vector<key_info*> waiting;
  {
    std::lock_guard lk(mu_);
    if (!want_any_) {
      return true;
    }
    want_any_ = false;
    for (auto& [s, k] : info_) {
      if (k->want) {
        k->want = false;
        waiting.push_back(k.get());
      }
    }
  }
  svc_->for_each_state([&](quota::key_state& s) {
    for (key_info* k : waiting) {
      if (k->st == &s) {
        k->id = s.key_id;
        k->quota = s.quota;
      }
    }
  });
  bool ok = true;
  for (key_info* k : waiting) {
    ok = ok && sync_key(*k, true, false);
  }
  {
    std::lock_guard lk(mu_);
    for (key_info* k : waiting) {
      ++k->done_seq;
    }
  }
  done_.notify_all();
  return ok;
}

void agent::run() {
  int64_t next_connect = 0, next_poll = 0, next_sync = 0, next_beat = 0;
  for (;;) {
    {
      std::lock_guard lk(mu_);
      if (stop_) {
        break;
      }
    }
    int64_t now = steady_ns();
    if (!conn_->connected() && now >= next_connect) {
      if (auto c = conn_->connect(); !c) {
        mark_down(c.error().message);
        next_connect = now + 200 * kNsPerMs;
      } else {
        std::lock_guard lk(mu_);
        if (down_since_ns_ != 0) {
          outage_ns_ += now - down_since_ns_;
          down_since_ns_ = 0;
        }
        log_info("cluster: connected to redis {} as node {}", s_.redis, s_.node);
        up_.store(true, std::memory_order_release);
        next_poll = next_sync = next_beat = 0;  // reload, push everything, heartbeat
      }
    }
    if (conn_->connected() && now >= next_beat) {
      // Before the first key load: it sets the default rate share.
      next_beat = now + (heartbeat() ? o_.heartbeat_ms : 100) * kNsPerMs;
    }
    if (conn_->connected() && now >= next_poll) {
      if (!keys_loaded()) {
        svc_->set_rate_shares(default_share_, {});
        applied_default_ = default_share_;
      }
      poll_keys();
      next_poll = now + o_.version_poll_ms * kNsPerMs;
    }
    if (conn_->connected() && keys_loaded() && !serve_waiters()) {
      mark_down(conn_->connected() ? "sync failed" : "connection lost");
    }
    now = steady_ns();
    if (conn_->connected() && keys_loaded() && now >= next_sync) {
      if (!sync_all(false)) {
        mark_down("connection lost during a usage push");
      }
      next_sync = now + o_.sync_ms * kNsPerMs;
    }
    commands_.store(conn_->commands(), std::memory_order_relaxed);
    std::unique_lock lk(mu_);
    if (stop_) {
      break;
    }
    int64_t until = conn_->connected() ? std::min({next_poll, next_sync, next_beat}) : next_connect;
    until = std::min(until, steady_ns() + 100 * kNsPerMs);
    const int64_t wait = std::max<int64_t>(0, until - steady_ns());
    work_.wait_for(lk, std::chrono::nanoseconds(wait), [&] { return stop_ || want_any_; });
  }
  // Shutdown (after the service closed): push the final figures and hand every unit back.
  if (!conn_->connected()) {
    (void)conn_->connect();
  }
  if (conn_->connected() && svc_ != nullptr && keys_loaded()) {
    if (sync_all(true)) {
      (void)conn_->command(
          {"HSET", nodes_key(s_), s_.node, fmt::format("{} 0 stopped", wall_ms())});
      log_info("cluster: final usage pushed to redis");
    } else {
      log_error(
          "cluster: final usage not pushed (redis unreachable); the journal keeps it and "
          "the next start pushes it");
    }
  }
  up_.store(false, std::memory_order_release);
  done_.notify_all();
}

}  // namespace tollgate::cluster
