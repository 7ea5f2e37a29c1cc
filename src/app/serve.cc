// `tollgate serve` and `tollgate stdio`: load settings, open the quota service and the corpus,
// build the shared tables, then run the io_uring engine (serve) or the stdio loop (stdio).
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include "admin_api.h"
#include "cli.h"
#include "cluster_cli.h"
#include "commands.h"
#include "data_dir_lock.h"
#include "handler.h"
#include "observability.h"
#include "reload.h"
#include "sd_notify.h"
#include "tollgate/common/log.h"
#include "tollgate/common/progress.h"
#include "tollgate/net/server.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/search/index_file.h"
#include "tools.h"

namespace tollgate::app {
namespace {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and returns them as a set. Call before
// any other thread starts, so every thread inherits the mask and only the caller takes them
// (serve: sigwait; stdio: a signalfd).
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

// Parses settings for `command`; prints usage or the error. Returns the exit code to use when
// the settings could not be had (0 after --help).
std::optional<config::settings> settings_or_exit(std::string_view command, int argc, char** argv,
                                                 int& code) {
  auto s = parse_server_args(command, argc, argv);
  if (s) {
    return std::move(*s);
  }
  if (s.error().help) {
    fmt::print("{}", command == "serve" ? usage_serve() : usage_stdio());
    code = 0;
  } else {
    fmt::print(stderr, "tollgate {}: {}\n", command, s.error().message);
    code = 2;
  }
  return std::nullopt;
}

// Loads the corpus (the sample, or a JSON Lines file) into st.backend; a gateway with remote
// shards gets their slots after its in-process ones (none when [fleet] local = false).
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

// The fleet settings that must hold together; prints the problem and returns 2 when not.
int check_fleet(const config::settings& s, bool stdio) {
  const std::string where = s.config_path.empty() ? "" : s.config_path + ": ";
  if (stdio && (s.role_shard || !s.remote_shards.empty())) {
    fmt::print(stderr,
               "tollgate stdio: {}[fleet]: remote shards and --role shard need `tollgate "
               "serve`; stdio serves its corpus in-process only\n",
               where);
    return 2;
  }
  if (s.role_shard && !s.remote_shards.empty()) {
    fmt::print(stderr,
               "tollgate serve: {}fleet.shards: a shard node does not list shards of its "
               "own (only a gateway does)\n",
               where);
    return 2;
  }
  if ((s.role_shard || !s.remote_shards.empty()) && s.shard_secret.empty()) {
    fmt::print(stderr,
               "tollgate serve: {}fleet.secret: required for {}: set [fleet] secret to the "
               "string the gateway and its shard nodes share\n",
               where,
               s.role_shard ? "a shard node (--role shard)" : "a gateway with [fleet] shards");
    return 2;
  }
  if (!s.fleet_local && s.remote_shards.empty() && !s.role_shard) {
    fmt::print(stderr, "tollgate serve: {}fleet.local: false needs [fleet] shards to search\n",
               where);
    return 2;
  }
  return 0;
}

// settings_or_exit, then check_fleet: the settings `command` may run with, or nullopt with
// `code` set after the message.
std::optional<config::settings> checked_settings(std::string_view command, int argc, char** argv,
                                                 int& code) {
  auto s = settings_or_exit(command, argc, argv, code);
  if (s) {
    code = check_fleet(*s, command == "stdio");
    if (code != 0) {
      return std::nullopt;
    }
  }
  return s;
}

// The first `serve` on an empty data dir (no key ever created) makes a demo account and key.
// Whether it is needed is read before the server starts (so a running server does no such work
// on every start); the key is made once the server is listening, so a start that fails for any
// reason leaves no key behind that nobody saw, and it is put in force before it is printed.
// Sets `needed`; returns 0 or an exit code after the message.
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

// Builds everything the cores share except the engine. On failure logs and returns the code.
// `stdio`: the corpus is left to the caller (st.backend stays null; stdio loads it on a thread
// of its own while it answers the lifecycle methods).
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

}  // namespace

namespace {

// stdio's key, checked against keys.txt and accounts.txt as they are (missing files: no keys)
// without creating the data dir or opening its usage. 0, or the exit code after the message.
int check_stdio_key(const config::settings& s, std::string_view presented) {
  auto c = quota::key_store(s.data_dir).load();
  if (!c) {
    log_error("{}", c.error().message);
    return c.error().usage ? 2 : 1;
  }
  const quota::digest h = quota::sha256(presented);
  for (const quota::key_entry& k : c->keys) {
    if (!k.revoked && CRYPTO_memcmp(k.hash.data(), h.data(), h.size()) == 0) {
      return 0;
    }
  }
  fmt::print(stderr,
             "tollgate stdio: TOLLGATE_API_KEY is not a valid key (unknown or revoked) in {}\n",
             s.data_dir);
  return 2;
}

}  // namespace

namespace {

// Lifts the open-file soft limit to the hard one.
void raise_fd_limit() {
  // Every connection is a descriptor: lift the soft limit to the hard one before the cores arm
  // their accepts (the kernel reads the limit then). Running out is still handled (EMFILE
  // backs accept off), but the default 1024 would cap a server far below its capacity.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) {
      log_info("could not raise the open-file limit: {}", std::strerror(errno));
    }
  }
}

// The public engine's options from the settings.
net::server_options engine_options(const config::settings& s) {
  rlimit nofile{};
  net::server_options no;
  no.host = s.listen.host;
  no.port = s.listen.port;
  no.threads = s.threads;
  no.limits.max_header_bytes = s.max_header_bytes;
  no.limits.max_body_bytes = s.max_body_bytes;
  no.header_timeout_ms = s.header_timeout_ms;
  no.idle_timeout_ms = s.idle_timeout_ms;
  no.max_connections = s.max_connections;
  // Descriptors the public side leaves to the rest of the process when the table fills up
  // (1,000s of idle clients under a low `ulimit -n`): half for the admin listener's
  // connections, half for what the server opens while running (usage snapshots, key and
  // account reloads, the access log) and already holds (journals are opened before this).
  // The admin listener, in turn, leaves the second half to the files.
  const rlim_t fd_limit = getrlimit(RLIMIT_NOFILE, &nofile) == 0 ? nofile.rlim_cur : 1024;
  no.fd_reserve = fd_limit >= 1024 ? 128 : static_cast<uint32_t>(fd_limit / 4);
  no.journal_inline = s.journal_inline;
  return no;
}

// The shared state of a shard node (its corpus and the fleet routes; no keys, quotas or MCP)
// or of a server (build_shared, then metrics and the access log).
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

// The ops routes' engine on [server] admin_listen, when set. 0, or 1 after the message.
int start_admin(shared_state& st, const config::settings& s, const net::server_options& no,
                std::unique_ptr<net::server>& admin) {
  if (!s.admin_listen) {
    return 0;
  }
  net::server_options ao = no;
  ao.host = s.admin_listen->host;
  ao.port = s.admin_listen->port;
  ao.threads = 1;
  ao.max_connections = 256;
  ao.fd_reserve = no.fd_reserve / 2;
  admin = std::make_unique<net::server>(ao);
  auto a = admin->start(
      [&st](int) -> std::unique_ptr<http::handler> { return std::make_unique<ops_handler>(st); });
  if (!a) {
    log_error("admin listener: {}", a.error());
    return 1;
  }
  log_info("admin (healthz, readyz, metrics, POST /admin/reload) on http://{}:{}",
           s.admin_listen->host, admin->port());
  return 0;
}

// Stops both engines, then waits for them (requests in flight are finished).
void stop_engines(net::server& engine, net::server* admin) {
  engine.stop();
  if (admin != nullptr) {
    admin->stop();
  }
  engine.wait();
  if (admin != nullptr) {
    admin->wait();
  }
}

// Starts the public engine's cores: shard_handlers on a shard node, else core_handlers. 0, or 1
// after the message.
int start_engine(net::server& engine, shared_state& st, bool shard_node, int cores) {
  auto started = engine.start([&st, shard_node](int core) -> std::unique_ptr<http::handler> {
    if (shard_node) {
      return std::make_unique<shard_handler>(st, core);
    }
    return std::make_unique<core_handler>(st, core);
  });
  if (!started) {
    log_error("{}", started.error());
    return 1;
  }
  if (engine.threads() != cores) {
    log_error("engine started {} cores, expected {}", engine.threads(), cores);
    stop_engines(engine, nullptr);
    return 1;
  }
  return 0;
}

// systemd Type=notify: ready once listening (no-op elsewhere). The message is formatted in
// place (a host name is at most 253 bytes): the main thread allocates nothing once serving.
void notify_ready(const config::settings& s, int port) {
  fmt::memory_buffer msg;
  fmt::format_to(std::back_inserter(msg), "READY=1\nSTATUS=listening on {}:{}\nMAINPID={}",
                 s.listen.host, port, getpid());
  std::string why;
  if (!sd_notify(std::string_view(msg.data(), msg.size()), &why) && !why.empty()) {
    log_error("sd_notify READY=1 failed: {}", why);
  }
}

// Takes the control signals until SIGTERM or SIGINT: SIGUSR1 reopens the access log, SIGHUP
// reloads plans and keys.
void wait_for_stop(const sigset_t& set, shared_state& st) {
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) {
      continue;
    }
    if (sig == SIGUSR1) {  // logrotate: every core reopens the access log
      if (st.access) {
        st.access->request_reopen();
        log_info("SIGUSR1: reopening the access log {}", st.access->path());
      }
      continue;
    }
    if (sig == SIGHUP) {
      if (st.quota) {
        (void)reload_plans_and_keys(st, "SIGHUP");  // logs what it did
      }
      continue;
    }
    log_info("{}: finishing requests in flight, then exiting",
             sig == SIGTERM ? "SIGTERM" : "SIGINT");
    return;
  }
}

// TOLLGATE_API_KEY, when stdio can serve with these settings; else null after the message.
const char* stdio_key(const config::settings& s) {
  if (s.cluster) {
    fmt::print(stderr,
               "tollgate stdio: {}: [cluster]: stdio serves one local data dir; run it "
               "with a config without [cluster], or bridge to a cluster node with --remote URL\n",
               s.config_path);
    return nullptr;
  }
  const char* key_env = std::getenv("TOLLGATE_API_KEY");
  if (key_env == nullptr || *key_env == '\0') {
    fmt::print(stderr,
               "tollgate stdio: set TOLLGATE_API_KEY to an API key (create one with `tollgate "
               "keys create --account A --plan P`)\n");
    return nullptr;
  }
  return key_env;
}

}  // namespace

int run_serve(int argc, char** argv) {
  int code = 1;
  auto s = checked_settings("serve", argc, argv, code);
  if (!s) {
    return code;
  }
  // Signals are taken by sigwait() below, before any thread starts.
  sigset_t set = block_control_signals();
  sigaddset(&set, SIGUSR1);  // serve only: reopen the access log (stdio has none)
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // A file reaching the file size limit (ulimit -f) must fail its write with EFBIG, which the
  // journal, the snapshots and the access log handle as the write failures they are, rather
  // than kill the server (SIGXFSZ's default action).
  signal(SIGXFSZ, SIG_IGN);
  raise_fd_limit();

  const net::server_options no = engine_options(*s);
  int cores = s->threads > 0 ? s->threads : net::default_threads();
  if (cores <= 0) {
    cores = 1;
  }

  // Declared before the engine so it outlives it: the engine's per-core handlers hold
  // references into the shared state and are destroyed with the engine. The data dir's lock
  // outlives both: it is released after the usage is flushed.
  std::optional<data_dir_lock> lock;
  shared_state st;
  if (int rc = build_serve_state(st, *s, cores, lock); rc != 0) {
    return rc;
  }
  if (int rc = make_admin_api(st, *s); rc != 0) {
    return rc;
  }
  bool demo_key = false;
  if (st.quota && !s->cluster) {  // cluster: keys are made with `tollgate keys --config`
    if (int rc = demo_key_needed(*s, demo_key); rc != 0) {
      return rc;
    }
  }
  net::server engine(no);
  st.engine = &engine;
  st.ops_on_main = !s->admin_listen.has_value();  // read by the cores: set before they start
  if (int rc = start_engine(engine, st, s->role_shard, cores); rc != 0) {
    return rc;
  }
  // Ops routes on their own address: one more engine with one core and no quota or MCP.
  std::unique_ptr<net::server> admin;  // destroyed before st, like the engine
  if (int rc = start_admin(st, *s, no, admin); rc != 0) {
    stop_engines(engine, nullptr);
    return rc;
  }
  if (demo_key) {
    if (int rc = make_demo_key(st, *s); rc != 0) {
      stop_engines(engine, admin.get());
      st.quota->close(wall_now_ns());
      return rc;
    }
  }
  st.ready.store(true, std::memory_order_release);
  log_info("listening on http://{}:{} ({} threads){}", s->listen.host, engine.port(),
           engine.threads(), s->role_shard ? " as a shard node" : "");
  notify_ready(*s, engine.port());

  wait_for_stop(set, st);
  (void)sd_notify("STOPPING=1");
  st.ready.store(false, std::memory_order_release);
  stop_engines(engine, admin.get());
  if (st.quota) {
    st.quota->close(wall_now_ns());
    if (st.cluster) {
      st.cluster->stop();  // pushes the final usage and hands the node's units back
    }
    log_info("stopped; usage flushed");
  } else {
    log_info("stopped");
  }
  return 0;
}

// Local stdio's corpus, loaded on a thread of its own (issue 29): a client's initialize,
// ping, tools/list and server/discover are answered at once, a tools/call that needs the
// corpus waits for it at most k_wait (then the tool error `corpus_loading`). When the load
// ends the thread raises SIGUSR2, which the stdio loop's signalfd takes: a failed load (a bad
// corpus line with on_bad_line = "fail") then ends the process with the load's exit code.
class corpus_loader final : public tool_context::corpus_gate {
 public:
  static constexpr std::chrono::seconds k_wait{5};

  corpus_loader(shared_state& st, const config::settings& s) {
    std::promise<int> p;
    done_ = p.get_future();
    thread_ = std::thread([&st, &s, p = std::move(p)]() mutable {
      p.set_value(load_corpus(st, s));  // writes st.backend; read only once done_ is ready
      ::kill(::getpid(), SIGUSR2);
    });
  }
  ~corpus_loader() { thread_.join(); }
  corpus_loader(const corpus_loader&) = delete;
  corpus_loader& operator=(const corpus_loader&) = delete;

  /// 0 while loading or once loaded; the load's exit code when it failed.
  int failed() {
    if (rc_ < 0 && done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      rc_ = done_.get();
    }
    return rc_ > 0 ? rc_ : 0;
  }
  const search::backend* wait() override {
    if (rc_ < 0 && done_.wait_for(k_wait) == std::future_status::ready) {
      rc_ = done_.get();
    }
    return rc_ == 0 ? backend_of() : nullptr;
  }
  void set_backend_source(const shared_state& st) { st_ = &st; }

 private:
  const search::backend* backend_of() const {
    return st_ != nullptr ? st_->backend.get() : nullptr;
  }

  std::future<int> done_;
  int rc_ = -1;  ///< the load's result once known
  const shared_state* st_ = nullptr;
  std::thread thread_;
};

int run_stdio(int argc, char** argv) {
  int code = 1;
  auto s = checked_settings("stdio", argc, argv, code);
  if (!s) {
    return code;
  }
  const char* key_env = stdio_key(*s);
  if (key_env == nullptr) {
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);  // as serve: EFBIG is a journal write failure, not a crash
  // SIGHUP reloads plans, keys and accounts; SIGTERM and SIGINT stop once the lines read so far
  // are answered, and usage is flushed (design §5, §10). Blocked before any thread starts (the
  // corpus load's) and taken from a signalfd that run_stdio watches next to stdin.
  sigset_t set = block_control_signals();
  sigaddset(&set, SIGUSR2);  // the corpus loader's "done" (corpus_loader)
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  const int sfd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    log_error("stdio: signalfd: {}", std::strerror(errno));
    return 1;
  }
  // The key is checked against the data dir's files before anything is created or loaded: a
  // refused start writes nothing (the service's own check below stays the one in force).
  if (int rc = check_stdio_key(*s, key_env); rc != 0) {
    ::close(sfd);
    return rc;
  }
  std::optional<data_dir_lock> lock;
  shared_state st;
  if (int rc = build_shared(st, *s, 1, true, lock); rc != 0) {
    ::close(sfd);
    return rc;
  }
  quota::core_ledger& shard = st.quota->ledger(0);
  const quota::key_record* key = shard.authenticate(key_env);
  if (key == nullptr) {
    fmt::print(stderr,
               "tollgate stdio: TOLLGATE_API_KEY is not a valid key (unknown or revoked) in {}\n",
               s->data_dir);
    return 2;
  }
  mcp::endpoint ep(st.tools, *st.envelopes,
                   mcp::endpoint_options{s->allowed_origins, true, nullptr, s->max_body_bytes, 32});
  corpus_loader loader(st, *s);
  loader.set_backend_source(st);
  core_host host(shard);
  host.tools()->set_corpus_gate(&loader);
  quota::figures fig;
  host.begin(*key, wall_now_ns(), fig);
  host.set_stdio(key_env);
  struct signal_ctx {
    shared_state& st;
    quota::core_ledger& shard;
    int fd;
    corpus_loader& loader;
  } ctx{st, shard, sfd, loader};
  mcp::stdio_events events;
  events.fd = sfd;
  events.ctx = &ctx;
  events.on_ready = [](void* p) -> bool {
    auto& c = *static_cast<signal_ctx*>(p);
    signalfd_siginfo si{};
    while (::read(c.fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo == SIGHUP) {
        (void)reload_plans_and_keys(c.st, "SIGHUP", &c.shard, wall_now_ns());  // logs itself
        continue;
      }
      if (si.ssi_signo == SIGUSR2) {
        if (c.loader.failed() != 0) {
          log_error("stdio: the corpus could not be loaded; exiting");
          return false;
        }
        continue;
      }
      log_info("{}: every line read is answered; flushing usage, then exiting",
               si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
      return false;
    }
    return true;
  };
  int rc = mcp::run_stdio(ep, host, STDIN_FILENO, STDOUT_FILENO, events);
  if (rc == 0 && loader.failed() != 0) {
    rc = loader.failed();
  }
  st.quota->close(wall_now_ns());
  ::close(sfd);
  return rc;
}

int run_config(int argc, char** argv) {
  const std::string_view usage =
      "Usage: tollgate config check --config FILE\n\n"
      "Checks FILE as `tollgate serve --config FILE` would read it, without starting: exit 0\n"
      "(\"FILE: ok\" on stdout), or 2 with the message a start would give (FILE:LINE: key: what\n"
      "is wrong). For ExecStartPre= and CI pipelines.\n";
  if (argc >= 1 && (std::string_view(argv[0]) == "--help" || std::string_view(argv[0]) == "-h")) {
    fmt::print("{}", usage);
    return 0;
  }
  if (argc < 1 || std::string_view(argv[0]) != "check") {
    fmt::print(stderr, "tollgate config: expected `check --config FILE`\n\n{}", usage);
    return 2;
  }
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      fmt::print("{}", usage);
      return 0;
    }
    if (a == "--config" && i + 1 < argc) {
      path = argv[++i];
    } else if (a.substr(0, 9) == "--config=") {
      path = std::string(a.substr(9));
    } else {
      fmt::print(stderr, "tollgate config check: unknown argument '{}'\n\n{}", a, usage);
      return 2;
    }
  }
  if (path.empty()) {
    fmt::print(stderr, "tollgate config check: --config: needs a FILE\n\n{}", usage);
    return 2;
  }
  // The start's own steps, in its order, up to the first that touches the data dir.
  std::string flag = "--config";
  char* args[] = {flag.data(), path.data()};
  int code = 1;
  auto s = settings_or_exit("serve", 2, args, code);
  if (!s) {
    return code;
  }
  if (int rc = check_fleet(*s, false); rc != 0) {
    return rc;
  }
  if (s->cluster) {
    // serve refuses a [cluster] whose password variable is unset (exit 2): so does the check,
    // so a systemd ExecStartPre check and the start agree.
    if (auto cs = cluster_settings(*s, "check"); !cs) {
      fmt::print(stderr, "tollgate serve: {}\n", cs.error());
      return 2;
    }
  }
  if (auto a = check_admin_config(*s, false); !a) {
    fmt::print(stderr, "tollgate serve: {}: {}\n", path, a.error());
    return 2;
  }
  if (!s->corpus_path.empty() && ::access(s->corpus_path.c_str(), R_OK) != 0) {
    fmt::print(stderr, "tollgate serve: {}: corpus.path: cannot read {}: {}\n", path,
               s->corpus_path, std::strerror(errno));
    return 2;
  }
  if (!s->access_log.empty() && s->access_log != "-") {
    // Writable as it is, or creatable in its directory (a check creates nothing).
    const std::string& f = s->access_log;
    const size_t slash = f.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : f.substr(0, slash == 0 ? 1 : slash);
    const bool ok = ::access(f.c_str(), F_OK) == 0 ? ::access(f.c_str(), W_OK) == 0
                                                   : ::access(dir.c_str(), W_OK) == 0;
    if (!ok) {
      log_error("access log {}: {}", f, std::strerror(errno));
      return 2;
    }
  }
  fmt::print("{}: ok\n", path);
  return 0;
}

}  // namespace tollgate::app
