// The cluster agent's keys and accounts (see agent.h, and docs/design.md "Cluster mode"): the
// poll of the key set's marks, the load into the quota service, and the node's copy that a
// Redis which lost its data gets back.
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

void agent::poll_keys() {
  auto m = keys_->read_marks();
  if (!m) {
    if (!conn_->connected()) {
      mark_down(m.error().message);
    }
    return;
  }
  // A Redis that is not the continuation of what this node loaded: no epoch marker (restarted
  // empty, flushed), another one (restarted empty, then written by the CLI or another node's
  // restore), or the same one at an older version (an old snapshot restored).
  const bool have_copy = !copy_.keys.empty();
  std::string why;
  if (m->epoch.empty() && have_copy) {
    why = "holds no epoch marker";
  } else if (!m->epoch.empty() && !epoch_.empty() && m->epoch != epoch_ && have_copy) {
    why = fmt::format("has another epoch ({}, this node's keys are of {})", m->epoch, epoch_);
  } else if (m->epoch == epoch_ && keys_version_ >= 0 && m->version < keys_version_) {
    why =
        fmt::format("went back to key version {} (this node loaded {})", m->version, keys_version_);
  }
  if (!why.empty()) {
    restore_copy(why);
    m = keys_->read_marks();
    if (!m) {
      if (!conn_->connected()) {
        mark_down(m.error().message);
      }
      return;
    }
  } else if (m->epoch.empty()) {
    // A new cluster and nothing to put back: start its epoch.
    auto r = conn_->command({"SETNX", epoch_key(s_), new_epoch()});
    if (!r) {
      if (r.error().io) {
        mark_down(r.error().message);
      }
      return;
    }
    m = keys_->read_marks();
    if (!m) {
      return;
    }
  }
  epoch_ = m->epoch;
  if (resync_ >= 0 && m->resync != resync_) {
    // Some node (maybe this one) put its copy back: Redis lost usage too. Every node pushes
    // every key once more, and the first push of each key opens its recovery window.
    repush_all_ = true;
    recovery_id_ = fmt::format("{}:{}", m->epoch, m->resync);
    log_error("cluster: redis {} was restored (resync {}); pushing every key's usage again",
              s_.redis, m->resync);
  }
  resync_ = m->resync;
  if (m->version == keys_version_ && keys_loaded()) {
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
    // Keys are never deleted (a revoked one stays, flagged): an empty set after a restore
    // attempt means Redis cannot take the copy back yet; keep the last ones in force.
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
  save_copy(*c);
  copy_ = *c;
  svc_->install_keys(std::move(*c));
  keys_version_ = version;
  if (!keys_loaded()) {
    log_info("cluster: {} key(s) loaded from redis {}", n, s_.redis);
  }
  std::lock_guard lk(mu_);
  keys_loaded_.store(true, std::memory_order_release);
  done_.notify_all();
}

void agent::restore_copy(const std::string& why) {
  auto r = keys_->restore(copy_);
  if (!r) {
    if (!conn_->connected()) {
      mark_down(r.error().message);
    } else {
      log_error("cluster: redis {} {}, and this node's copy could not be put back: {}", s_.redis,
                why, r.error().message);
    }
    return;
  }
  restores_.fetch_add(1, std::memory_order_relaxed);
  log_error(
      "cluster: redis {} {} (it lost its data?): put back this node's copy of {} key(s) and {} "
      "account(s) ({} key(s) were missing); every node pushes its usage again, and stop keys get "
      "no new lease until their usage is re-established",
      s_.redis, why, copy_.keys.size(), copy_.accounts.size(), r->added);
}

void agent::save_copy(const quota::store_contents& c) {
  if (copy_path_.empty()) {
    return;
  }
  std::string text = copy_text(s_, epoch_, c);
  if (text == copy_written_) {
    return;
  }
  if (auto w = quota::fs::write_file_atomic(copy_path_, text); !w) {
    log_error(
        "cluster: the copy of the keys ({}) was not written: {}; a redis that loses its "
        "data could not get them back from this node",
        copy_path_, w.error());
    return;
  }
  copy_written_ = std::move(text);
}

}  // namespace tollgate::cluster
