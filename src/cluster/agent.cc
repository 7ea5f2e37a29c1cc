// The cluster agent (see agent.h): its I/O thread, start and stop, the leases cores ask for
// (never waiting: lease_source.h) and the wake-ups that answer them, outages, heartbeats. The
// per-key push and lease protocol is in agent_sync.cc, keys and the node's copy in
// agent_keys.cc.
#include "tollgate/cluster/agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>

#include "agent_impl.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/key_state.h"
#include "tollgate/quota/service.h"

namespace tollgate::cluster {

agent::agent(settings s, agent_options o)
    : s_(std::move(s)), o_(o), keys_(std::make_unique<redis_keys>(s_)), conn_(&keys_->conn()) {}

agent::~agent() { stop(); }

bool agent::start(quota::service& svc, int64_t first_load_ms) {
  svc_ = &svc;
  if (!svc.options().data_dir.empty()) {
    copy_path_ = svc.options().data_dir + "/cluster-copy.txt";
    bool missing = false;
    auto text = quota::fs::read_file(copy_path_, &missing);
    if (!text) {
      log_error("cluster: {} not read: {}", copy_path_, text.error());
    } else if (!missing) {
      auto c = parse_copy(s_, *text);
      if (!c) {
        log_error("cluster: {}: {}; not used (rewritten at the next key load)", copy_path_,
                  c.error());
      } else {
        epoch_ = c->epoch;
        copy_ = std::move(c->contents);
        copy_written_ = std::move(*text);
      }
    }
  }
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
  st.idle_skipped = idle_skipped_.load(std::memory_order_relaxed);
  st.restores = restores_.load(std::memory_order_relaxed);
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

quota::lease_outcome agent::request(quota::key_state& s, uint32_t month, int core) noexcept {
  (void)month;  // the I/O thread leases for the service's month; a core in another month is
                // answered by take_lease() rolling it over
  std::lock_guard lk(mu_);
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
  if (k.recovering_ns != 0 && now - k.recovering_ns < o_.recheck_ms * kNsPerMs) {
    // Redis lost the key's usage and the nodes are pushing it again: no new units until it
    // is re-established (stop keys: unavailable; bill keys: counted locally). Asked again
    // after recheck_ms.
    return quota::lease_outcome::unreachable;
  }
  if (core >= 0 && core < 64) {
    k.waiting_cores |= uint64_t{1} << core;
  }
  if (!k.want) {  // one attempt in flight per key, however many requests wait for it
    ++lease_waits_;
    k.want = true;
    want_any_ = true;
    work_.notify_one();
  }
  return quota::lease_outcome::pending;
}

void agent::set_waker(int core, std::function<void()> wake) {
  std::lock_guard lk(wake_mu_);
  if (core < 0 || core >= 64) {
    return;
  }
  if (wakers_.size() <= static_cast<size_t>(core)) {
    wakers_.resize(static_cast<size_t>(core) + 1);
  }
  wakers_[static_cast<size_t>(core)] = std::move(wake);
}

void agent::wake_cores(uint64_t mask) {
  if (mask == 0) {
    return;
  }
  std::lock_guard lk(wake_mu_);
  for (size_t c = 0; c < wakers_.size() && c < 64; ++c) {
    if ((mask >> c & 1) != 0 && wakers_[c]) {
      wakers_[c]();  // an eventfd write: never blocks
    }
  }
}

void agent::give_up_units_if_cut_off(int64_t now) {
  int64_t since = 0;
  {
    std::lock_guard lk(mu_);
    since = down_since_ns_;
  }
  // Past half the stale bound the other nodes may take this node's unused units back (kSync):
  // its pools stop lending them. (Units a core already leased are spent as they are.)
  if (since == 0 || now - since < o_.stale_claim_ms / 2 * kNsPerMs || svc_ == nullptr) {
    return;
  }
  const uint32_t month = svc_->month();
  int64_t given = 0;
  std::lock_guard lk(mu_);
  for (auto& [s, k] : info_) {
    const int64_t n = take_units(*s, month, pool_of(*s, month));
    if (n > 0 && k->claim >= 0) {
      k->claim -= n;
    }
    given += n;
  }
  if (given > 0) {
    log_error(
        "cluster: redis unreachable for {} s: {} unused unit(s) given up (the other nodes "
        "reclaim them {} s after this node's last push)",
        (now - since) / 1000000000, given, o_.stale_claim_ms / 1000);
  }
}

void agent::mark_down(const std::string& why) {
  conn_->close();
  uint64_t wake = 0;
  {
    std::lock_guard lk(mu_);
    if (up_.load(std::memory_order_relaxed)) {
      log_error("cluster: redis unreachable ({}); serving from leases and journals", why);
      up_.store(false, std::memory_order_release);
      down_since_ns_ = steady_ns();
    }
    // Requests parked for units are answered by the outage rules now, not at their bound.
    for (auto& [s, k] : info_) {
      wake |= k->waiting_cores;
      k->waiting_cores = 0;
      k->want = false;
    }
    want_any_ = false;
  }
  wake_cores(wake);
  done_.notify_all();
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
  uint64_t wake = 0;
  {
    std::lock_guard lk(mu_);
    for (key_info* k : waiting) {
      wake |= k->waiting_cores;
      k->waiting_cores = 0;
    }
  }
  wake_cores(wake);  // each parked request admits again: units, a spent budget, or an outage
  return ok;
}

void agent::run() {
  int64_t next_connect = 0, next_poll = 0, next_sync = 0, next_beat = 0;
  // A failed connect is logged when its reason changes (a refused password, WRONGPASS, says
  // so at once rather than leaving the node silently not ready), and again each minute.
  std::string last_failure;
  int64_t last_failure_logged = 0;
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
        if (c.error().message != last_failure || now - last_failure_logged > 60000 * kNsPerMs) {
          log_error("cluster: cannot use redis {}: {}", s_.redis, c.error().message);
          last_failure = c.error().message;
          last_failure_logged = now;
        }
        mark_down(c.error().message);
        next_connect = now + 200 * kNsPerMs;
      } else {
        last_failure.clear();
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
    if (!conn_->connected()) {
      give_up_units_if_cut_off(now);
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
  uint64_t wake = 0;
  {
    std::lock_guard lk(mu_);
    for (auto& [s, k] : info_) {
      wake |= k->waiting_cores;
      k->waiting_cores = 0;
    }
  }
  wake_cores(wake);
  done_.notify_all();
}

}  // namespace tollgate::cluster
