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
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>

#include "agent_impl.h"
#include "tollgate/cluster/agent.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/key_state.h"
#include "tollgate/quota/service.h"

namespace tollgate::cluster {

namespace {

// ARGV: node, quota, used, over, claim, want, ttl ms, rate demand (-1: none), node wall ms,
// recovery id, recover (1: this push re-establishes the key after Redis lost data), window ms,
// stale ms (another node's claim unrefreshed this long counts only its used units), the
// node's first and last billed call this month (unix seconds, 0: none; f:NODE only ever lowers,
// l:NODE only ever rises, so the usage export reads the cluster's first and last call).
// One HGETALL reads every field and one HSET writes what changed (Redis counts each call a
// script makes: a push is EVALSHA + HGETALL + HSET); TIME is called only around a recovery, and
// PEXPIRE only when the push creates the hash (it lives 100 days from then: past its month's
// end by more than two months, long enough for billing to read it).
const redis_script kSync(R"(
local h = KEYS[1]
local node = ARGV[1]
local quota = tonumber(ARGV[2])
local used = tonumber(ARGV[3])
local over = tonumber(ARGV[4])
local claim = tonumber(ARGV[5])
local want = tonumber(ARGV[6])
local uf, of, gf, df, tf = 'u:' .. node, 'o:' .. node, 'g:' .. node, 'd:' .. node, 't:' .. node
local ff, lf = 'f:' .. node, 'l:' .. node
local first, last, cf, cl = tonumber(ARGV[14]) or 0, tonumber(ARGV[15]) or 0, 0, 0
local nowms, stale = tonumber(ARGV[9]), tonumber(ARGV[13])
local all = redis.call('HGETALL', h)
local cu, co, U, G, N, e, r, hasg = 0, 0, 0, 0, 1, false, 0, false
local gs, us, ts = {}, {}, {}
for i = 1, #all, 2 do
  local f = all[i]
  local t = string.sub(f, 1, 2)
  if t == 'u:' then
    local v = tonumber(all[i + 1])
    U = U + v
    us[string.sub(f, 3)] = v
    if f == uf then cu = v end
  elseif t == 'g:' then
    if f == gf then hasg = true else gs[string.sub(f, 3)] = tonumber(all[i + 1]) end
  elseif t == 't:' then ts[string.sub(f, 3)] = tonumber(all[i + 1])
  elseif f == of then co = tonumber(all[i + 1])
  elseif f == ff then cf = tonumber(all[i + 1])
  elseif f == lf then cl = tonumber(all[i + 1])
  elseif f == 'e' then e = all[i + 1]
  elseif f == 'r' then r = tonumber(all[i + 1])
  end
end
-- Another node's claim counts whole while it pushes; one silent for `stale` ms (dead, or cut
-- off: a node gives its units up after half that without Redis) counts only what it used.
for x, g in pairs(gs) do
  if ts[x] and nowms - ts[x] > stale then g = math.min(g, us[x] or 0) end
  G = G + g
  if g > 0 then N = N + 1 end
end
local kv = {}
local function set(f, v)
  kv[#kv + 1] = f
  kv[#kv + 1] = v
end
if used > cu then
  set(uf, used)
  U = U + used - cu
  cu = used
end
if over > co then set(of, over) end
if first > 0 and (cf == 0 or first < cf) then set(ff, first) end
if last > cl then set(lf, last) end
local nowr = -1
local function now()
  if nowr < 0 then
    local t = redis.call('TIME')
    nowr = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return nowr
end
if ARGV[11] == '1' and e ~= ARGV[10] then
  r = now() + tonumber(ARGV[12])
  set('e', ARGV[10])
  set('r', r)
end
local recovering = false
if r > 0 then
  if now() < r then recovering = true else redis.call('HDEL', h, 'r') end
end
G = G + claim
local avail = quota - G
local dm, D, C = tonumber(ARGV[8]), 0, 1
if dm >= 0 then
  set(df, dm .. ' ' .. nowms)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'd:' and all[i] ~= df then
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
if want > 0 and avail > 0 and not recovering then
  n = math.floor(avail / (2 * N))
  if n < 1 then n = 1 end
  if n > want then n = want end
end
if claim + n > 0 or hasg then
  set(gf, claim + n)
  set(tf, nowms)
end
if #kv > 0 then redis.call('HSET', h, unpack(kv)) end
if #all == 0 and #kv > 0 then redis.call('PEXPIRE', h, ARGV[7]) end
return {n, U - cu, avail - n, D, C, recovering and 1 or 0})");

// A month's usage hash lives this long after its creation (100 days): long enough for
// billing to read a closed month.
constexpr const char* kUsageTtlMs = "8640000000";

}  // namespace

// The closed month's last figures, as the node's reconciled usage has them, then a fresh start
// for the new month. False: Redis could not be reached (the month is pushed again next time).
bool agent::roll_month(key_info& k, uint32_t month) {
  if (k.month != 0 && k.claim >= 0) {
    const quota::usage_totals u = svc_->usage(k.id, k.month);
    auto r = conn_->eval(
        kSync, {usage_key(s_, k.id, k.month)},
        {s_.node, std::to_string(k.quota), std::to_string(u.used), std::to_string(u.overage),
         std::to_string(u.used - u.overage), "0", kUsageTtlMs, "-1", std::to_string(wall_ms()), "",
         "0", "0", std::to_string(o_.stale_claim_ms), std::to_string(u.first_s),
         std::to_string(u.last_s)});
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
    k.reports = std::min(k.reports + 1, 2);
    k.prev_reporters = k.reporters;
    k.reporters = c;
  }
  const int64_t n = r.elements[0].integer;
  const int64_t others = r.elements[1].integer;
  if (n > 0 && add_units(st, month, n)) {
    k.claim += n;
  }
  st.remote_used.store(std::max<int64_t>(0, others), std::memory_order_relaxed);
  const bool recovering = r.elements[5].integer != 0;
  std::lock_guard lk(mu_);
  units_returned_ += static_cast<uint64_t>(p.returned);
  k.recovering_ns = recovering ? steady_ns() : 0;
  if (n > 0) {
    ++lease_grants_;
    lease_units_ += static_cast<uint64_t>(n);
    k.exhausted = false;
  } else if (p.want > 0 && !recovering) {  // recovering: not spent, only not yet known
    k.exhausted = true;
    k.exhausted_ns = steady_ns();
  }
}

bool agent::prepare_push(key_info& k, bool lease, bool final_push, push& out) {
  quota::key_state& st = *k.st;
  const uint32_t month = svc_->month();
  if (k.month != month && !roll_month(k, month)) {
    return false;
  }
  out.k = &k;
  out.month = month;
  out.used = st.used.load(std::memory_order_relaxed);
  out.over = st.overage.load(std::memory_order_relaxed);
  out.last = st.last_s.load(std::memory_order_relaxed);
  const unit_plan p = plan_units(k, lease, final_push, out.used, out.over, month);
  out.want = p.want;
  out.returned = p.returned;
  out.rate_demand = rate_demand_of(k, lease, final_push);
  const bool recover = repush_all_ && !recovery_id_.empty();
  out.argv = {"EVALSHA",
              kSync.sha1,
              "1",
              usage_key(s_, k.id, month),
              s_.node,
              std::to_string(k.quota),
              std::to_string(out.used),
              std::to_string(out.over),
              std::to_string(k.claim),
              std::to_string(p.want),
              kUsageTtlMs,
              std::to_string(out.rate_demand),
              std::to_string(wall_ms()),
              recovery_id_,
              recover ? "1" : "0",
              std::to_string(o_.recovery_ms),
              std::to_string(o_.stale_claim_ms),
              std::to_string(st.first_s.load(std::memory_order_relaxed)),
              std::to_string(out.last)};
  return true;
}

bool agent::finish_push(push& p, result<redis_reply, redis_error>& r) {
  auto noscript = [&] {
    return !r && !r.error().io && r.error().message.rfind("NOSCRIPT", 0) == 0;
  };
  if (noscript()) {
    // Redis did not know the script (restarted since it was loaded) when the batch was sent:
    // again by its hash (an earlier push of the batch may have loaded it), else whole.
    r = conn_->command(p.argv);
    if (noscript()) {
      p.argv[0] = "EVAL";
      p.argv[1] = kSync.text;
      r = conn_->command(p.argv);
    }
  }
  commands_.store(conn_->commands(), std::memory_order_relaxed);
  key_info& k = *p.k;
  if (!r) {
    if (r.error().io) {
      return false;
    }
    log_error("cluster: usage sync of {} refused: {}", quota::key_id_string(k.id),
              r.error().message);
    return true;
  }
  if (r->elements.size() == 6) {
    apply_sync(k, unit_plan{p.want, p.returned}, p.rate_demand, p.month, *r);
    k.pushed_used = p.used;
    k.pushed_over = p.over;
    k.pushed_last = p.last;
    k.pushed_claim = k.claim;
    k.pushed_tat = k.st->tat_ns.load(std::memory_order_relaxed);
  }
  return true;
}

bool agent::sync_key(key_info& k, bool lease, bool final_push) {
  push p;
  if (!prepare_push(k, lease, final_push, p)) {
    return false;
  }
  auto r = conn_->command(p.argv);
  return finish_push(p, r);
}

void agent::settle_share(key_info& k, std::vector<std::pair<uint64_t, double>>& changed) {
  // A share that moved by more than 2% (or is new) goes into the next table. A share grows
  // by at most 0.1 a sync (it shrinks at once): the other nodes give up theirs at their own
  // next sync, and meanwhile the sum of the shares passes 1 by at most 0.1 per growing node.
  const double from = k.applied > 0 ? k.applied : default_share_;
  double next = std::min(k.share, from + 0.1);
  // A share grows only once the key's reports have settled: this node reported it twice and
  // no node joined the reporters since. A fresh key's first report sees only the nodes that
  // happened to sync before it (often itself alone), and growing on that view let three busy
  // nodes each take 0.43 of a new key's rate in its first second (issue 28, item 6); holding
  // the default one sync longer keeps the shares' sum at 1 while every busy node reports.
  if (next > from && (k.reports < 2 || k.reporters > k.prev_reporters)) {
    next = from;
  }
  if (k.share > 0 && (k.applied == 0 || std::abs(next - k.applied) > 0.02 * k.applied)) {
    k.applied = next;
    changed.emplace_back(k.id, next);
  }
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
  // Pushes go out in batches, each one round trip (pipelined: the replies are read in order);
  // a core waiting for units is served between two batches.
  constexpr size_t kPushBatch = 256;
  std::vector<push> batch;
  batch.reserve(std::min(all.size(), kPushBatch));
  std::vector<result<redis_reply, redis_error>> replies;
  auto send_batch = [&] {
    for (const push& p : batch) {
      conn_->append(p.argv);
    }
    // Every reply is read before any is taken in: a push retried below (its script unknown
    // to a restarted Redis) is a command of its own, and must not read a later push's reply.
    replies.clear();
    for (size_t i = 0; i < batch.size(); ++i) {
      replies.push_back(conn_->read_reply());
      if (!replies.back() && replies.back().error().io) {
        return false;
      }
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!finish_push(batch[i], replies[i])) {
        return false;
      }
      settle_share(*batch[i].k, changed_shares);
    }
    batch.clear();
    return final_push || serve_waiters();
  };
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
    const uint32_t month = svc_->month();
    const int64_t used = s.st->used.load(std::memory_order_relaxed);
    if (used == 0 && k->claim <= 0 && pool_of(*s.st, month) == 0 && k->month == month &&
        final_push) {
      continue;  // nothing of this node's to hand back
    }
    // Redis work follows traffic: a key whose figures are what the last push sent, that holds
    // no units here, has no demand and saw no request (its GCRA word did not move, and lies in
    // the past: a node refusing requests at a small share keeps it ahead of the clock) is not
    // pushed again once it has been so for kQuietNs and its share has settled where a node with
    // no demand is put (the floor beside busy nodes, an even split when all are idle), so idle
    // keys cost Redis nothing. Until then it reports as before, so a pause in a key's traffic
    // shorter than its report's life in Redis changes nothing; after it, its report ages out
    // and the busy nodes share without it (README "rate limits"). After Redis lost data every
    // key is pushed once more (repush_all_).
    const int64_t tat = s.st->tat_ns.load(std::memory_order_relaxed);
    const bool quiet = !final_push && !repush_all_ && k->month == month && used == k->pushed_used &&
                       s.st->overage.load(std::memory_order_relaxed) == k->pushed_over &&
                       s.st->last_s.load(std::memory_order_relaxed) == k->pushed_last &&
                       k->claim == k->pushed_claim && pool_of(*s.st, month) == 0 &&
                       k->demand == 0 && tat == k->pushed_tat && tat <= wall_ms() * kNsPerMs &&
                       (k->applied == 0 || std::abs(k->share - k->applied) <= 0.02 * k->applied);
    const int64_t now = steady_ns();
    if (!quiet) {
      k->quiet_since_ns = 0;
    } else if (k->quiet_since_ns == 0) {
      k->quiet_since_ns = now;
    }
    if (quiet && now - k->quiet_since_ns >= kQuietNs) {
      idle_skipped_.fetch_add(1, std::memory_order_relaxed);
      // The next rate sample measures from this sync, as if it had reported: an average over
      // the silence would understate the demand of a key that just came back.
      k->last_tat = tat;
      k->last_rate_ns = wall_ms() * kNsPerMs;
      continue;
    }
    batch.emplace_back();
    if (!prepare_push(*k, false, final_push, batch.back())) {
      return false;
    }
    if (batch.size() == kPushBatch && !send_batch()) {
      return false;
    }
  }
  if (!send_batch()) {
    return false;
  }
  if (!changed_shares.empty() || default_share_ != applied_default_) {
    applied_default_ = default_share_;
    svc_->set_rate_shares(default_share_, changed_shares);
  }
  repush_all_ = false;  // every key was pushed in the recovery
  std::lock_guard lk(mu_);
  last_push_ns_ = steady_ns();
  return true;
}

}  // namespace tollgate::cluster
