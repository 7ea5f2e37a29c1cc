// The start-up steps `serve` and `stdio` share (startup.h): settings become a locked data dir,
// an open quota service (and, in cluster mode, its Redis agent), a loaded corpus and the tables
// every core reads, in that order, each step ending the start with its exit code when it fails.
#include "startup.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli.h"
#include "cluster_cli.h"
#include "handler.h"
#include "observability.h"
#include "reload.h"
#include "tollgate/common/log.h"
#include "tollgate/common/progress.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/search/index_file.h"
#include "tools.h"

namespace tollgate::app {
namespace {

// Cluster mode: the node's Redis agent (started once the quota service is open).
int make_cluster_agent(shared_state& st, const config::settings& s) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) {
    std::strcpy(host, "localhost");
  }
  auto cs = cluster_settings(s, fmt::format("{}:{}", host, s.listen.port));
  if (!cs) {
    log_error("{}", cs.error());
    return 2;
  }
  cluster::agent_options ao;
  ao.sync_ms = std::max<int64_t>(10, s.reconcile_ms / 2);  // figures lag at most one interval
  ao.lease_wait_ms = s.cluster_lease_wait_ms;
  st.cluster = std::make_unique<cluster::agent>(std::move(*cs), ao);
  return 0;
}

// Creates the data dir (private) and takes its lock. 0, or the exit code after the message.
int lock_data_dir(const config::settings& s, std::optional<data_dir_lock>& lock) {
  std::error_code ec;
  // Made private, as `keys create` makes it: it holds key hashes and every key's usage.
  if (std::filesystem::create_directories(s.data_dir, ec) && !ec) {
    std::filesystem::permissions(s.data_dir, std::filesystem::perms::owner_all, ec);
  }
  if (ec) {
    log_error("cannot create data dir {}: {}", s.data_dir, ec.message());
    return 1;
  }
  auto held = data_dir_lock::acquire(s.data_dir);
  if (!held) {
    log_error("{}", held.error());
    return 1;
  }
  lock.emplace(std::move(*held));
  return 0;
}

// Opens the quota service on the data dir (and the cluster agent it leases from).
int open_quota(shared_state& st, const config::settings& s, int cores, quota::plan_map plans) {
  quota::service_options qo;
  qo.data_dir = s.data_dir;
  qo.plans = std::move(plans);
  qo.cores = cores;
  qo.reconcile_ms = s.reconcile_ms;
  qo.fsync_ms = s.fsync_ms;
  qo.accept_usage_loss = s.accept_usage_loss;
  if (s.cluster && ::access((s.data_dir + "/cluster-imported.txt").c_str(), F_OK) == 0) {
    log_error(
        "{}: this data dir's usage was imported into redis (`tollgate cluster import`); "
        "a cluster node started on it would count that usage again: give the node a "
        "fresh --data-dir",
        s.data_dir);
    return 2;
  }
  if (s.cluster) {
    if (int rc = make_cluster_agent(st, s); rc != 0) {
      return rc;
    }
    qo.leases = st.cluster.get();
  }
  auto q = quota::service::open(std::move(qo), wall_now_ns());
  if (!q) {
    log_error("{}", q.error());
    return 1;
  }
  st.quota = std::move(*q);
  if (st.cluster && !st.cluster->start(*st.quota, 3000)) {
    log_error(
        "cluster: keys not loaded from redis {} yet: not ready (/readyz 503, requests 503) "
        "until they are; retrying",
        s.cluster_redis);
  }
  return 0;
}

// What serving needs next to the quota and the corpus: the fleet's remotes (a gateway), the
// session store, the counters and the per-core answer caches.
void make_serving_state(shared_state& st, const config::settings& s, int cores, bool stdio) {
  if (!stdio && !s.remote_shards.empty()) {
    st.fleet = std::make_unique<fleet_shared>();
    st.fleet->remotes = s.remote_shards;
    st.fleet->secret = s.shard_secret;
    st.fleet->deadline_ns = int64_t{s.shard_deadline_ms} * 1000000;
    st.fleet->health =
        std::make_unique<search::remote_health>(static_cast<uint32_t>(s.remote_shards.size()));
  }
  if (s.sessions) {
    st.sessions = std::make_unique<mcp::session_store>(int64_t{s.session_idle_secs} * 1000000000,
                                                       s.max_sessions);
  }
  st.counters = std::make_unique<request_counters>(cores);
  st.cores = cores;
  if (!stdio && s.search_cache_entries > 0 && st.fleet == nullptr &&
      st.backend->remote_count() == 0) {
    st.search_cache = std::make_unique<search_cache_stats[]>(static_cast<size_t>(cores));
    log_info("search answer cache: {} entries of {} bytes per core", s.search_cache_entries,
             s.search_cache_entry_bytes);
  }
}

}  // namespace

sigset_t block_control_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int64_t wall_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int load_corpus(shared_state& st, const config::settings& s) {
  const auto remotes = s.role_shard ? 0u : static_cast<uint32_t>(s.remote_shards.size());
  if (remotes > 0 && !s.fleet_local) {
    st.backend = std::make_unique<search::backend>(
        std::vector<std::unique_ptr<search::shard_source>>{}, remotes);
    log_info("corpus: none in-process; {} remote shards", remotes);
    return 0;
  }
  auto t0 = std::chrono::steady_clock::now();
  if (s.corpus_path.empty()) {
    st.backend = search::load_sample(s.index_shards, remotes);
  } else {
    search::load_options lo;
    lo.shards = s.index_shards;
    lo.remote_slots = remotes;
    lo.skip_bad_lines = s.skip_bad_lines;
    search::load_report report;
    std::atomic<uint64_t> stories{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> steps{0};
    lo.stories_parsed = &stories;
    lo.bytes_parsed = &bytes;
    lo.build_steps = &steps;
    std::error_code size_error;
    const auto file_size = std::filesystem::file_size(s.corpus_path, size_error);
    // The persisted index beside the corpus or in the data dir, when it matches (else built
    // and written there; see include/tollgate/search/index_file.h).
    search::index_use index;
    const auto index_paths = search::index_paths(s.corpus_path, s.data_dir);
    auto b = [&] {
      const uint64_t whole = size_error ? 0 : static_cast<uint64_t>(file_size);
      progress_watch progress("loading " + s.corpus_path, "stories", stories,
                              [&lo, whole] { return search::build_share(lo, whole); });
      return search::load_indexed(s.corpus_path, index_paths, lo, report, index);
    }();
    for (const auto& note : index.notes) {
      log_info("index: {}", note);
    }
    if (!index.path.empty()) {
      log_info("index: {} {} ({})", index.mapped ? "mapped" : "wrote", index.path,
               index.parts.per_story(report.loaded));
    }
    if (index.remapped) {
      log_info("index: serving from {} (the build's memory given back, as later starts do)",
               index.path);
    }
    for (const auto& issue : report.issues) {
      log_error("{}:{}: {}", s.corpus_path, issue.line, issue.reason);
    }
    if (!b) {
      log_error("{}:{}: {}", s.corpus_path, b.error().line, b.error().reason);
      return 2;
    }
    if (report.skipped > 0) {
      log_info("skipped {} bad lines of {}", report.skipped, s.corpus_path);
    }
    st.backend = std::move(*b);
  }
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  log_info("corpus: {} stories in {} shards, indexed in {} ms", st.backend->story_count(),
           st.backend->local_count(), ms);
  if (remotes > 0) {
    log_info("fleet: {} remote shards after the {} in-process ones", remotes,
             st.backend->local_count());
  }
  return 0;
}

int build_shared(shared_state& st, const config::settings& s, int cores, bool stdio,
                 std::optional<data_dir_lock>& lock) {
  st.settings = &s;
  quota::plan_map plans = to_plans(s);
  if (auto v = quota::validate_plans(plans); !v) {
    fmt::print(stderr, "tollgate: {}{}\n", s.config_path.empty() ? "" : s.config_path + ": ",
               v.error());
    return 2;
  }
  if (int rc = lock_data_dir(s, lock); rc != 0) {
    return rc;
  }
  if (int rc = open_quota(st, s, cores, std::move(plans)); rc != 0) {
    return rc;
  }

  if (!stdio) {
    if (int rc = load_corpus(st, s); rc != 0) {
      return rc;
    }
  }
  envelope::server_identity id;
  id.version = TOLLGATE_VERSION;
  id.instructions =
      "Search a corpus of stories with search_stories, read one with get_story, and check your "
      "remaining quota with get_usage. Tool errors carry a JSON object with a code and a "
      "message; quota_exceeded and rate_limited say when to retry.";
  st.envelopes = std::make_unique<envelope::cache>(id);
  register_tools(st.tools);
  make_serving_state(st, s, cores, stdio);
  register_routes(st);
  return 0;
}

int build_serve_state(shared_state& st, const config::settings& s, int cores,
                      std::optional<data_dir_lock>& lock) {
  if (s.role_shard) {
    st.settings = &s;
    if (int rc = load_corpus(st, s); rc != 0) {
      return rc;
    }
    st.counters = std::make_unique<request_counters>(cores);
    register_shard_routes(st);
    return 0;
  }
  if (int rc = build_shared(st, s, cores, false, lock); rc != 0) {
    return rc;
  }
  return setup_observability(st, s, cores);
}

int demo_key_needed(const config::settings& s, bool& needed) {
  auto keys = quota::key_store(s.data_dir).list_keys();
  if (!keys) {
    log_error("{}", keys.error().message);
    return keys.error().usage ? 2 : 1;
  }
  needed = keys->empty();
  return 0;
}

int make_demo_key(shared_state& st, const config::settings& s) {
  quota::key_store store(s.data_dir);
  auto k = store.create_key("demo", s.demo_plan, to_plans(s),
                            std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  if (!k) {
    log_error("creating the demo key: {}", k.error().message);
    return 1;
  }
  if (reload_result r = reload_plans_and_keys(st, "start-up"); !r.ok) {
    log_error(
        "the demo key is made but not yet in force ({}); the server re-reads keys within "
        "a second",
        r.message);
  }
  fmt::print("demo key: {}\n", k->secret);
  std::fflush(stdout);
  log_info("created demo account 'demo' (plan '{}') with key {}; the key is shown once",
           s.demo_plan, k->key_id);
  return 0;
}

}  // namespace tollgate::app
