// `tollgate serve`: with the settings checked (server_settings.h) and the shared state built
// (startup.h), starts the io_uring engine's cores (and the admin listener's), signals readiness,
// then takes the control signals until SIGTERM or SIGINT: SIGHUP reloads plans and keys, SIGUSR1
// reopens the access log. On the way out the engines finish the requests in flight and the
// usage is flushed.
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "admin_api.h"
#include "commands.h"
#include "data_dir_lock.h"
#include "handler.h"
#include "oauth.h"
#include "ops.h"
#include "reload.h"
#include "sd_notify.h"
#include "server_settings.h"
#include "startup.h"
#include "tls_setup.h"
#include "tollgate/common/log.h"
#include "tollgate/net/server.h"

namespace tollgate::app {
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

// The ops routes' engine on [server] admin_listen, when set. 0, or 1 after the message.
int start_admin(shared_state& st, const config::settings& s, const net::server_options& no,
                std::unique_ptr<net::server>& admin) {
  if (!s.admin_listen) {
    return 0;
  }
  net::server_options ao = no;
  ao.tls = nullptr;  // the admin listener stays plain HTTP on its own address
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

  net::server_options no = engine_options(*s);
  int tls_code = 0;
  std::shared_ptr<net::tls_context> tls = make_tls(*s, tls_code);  // the pair checked: exit 2
  if (tls_code != 0) {
    return tls_code;
  }
  if (tls) {
    no.tls = tls;
    no.tls_host = s->tls_listen->host;
    no.tls_port = s->tls_listen->port;
  }
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
  if (int rc = make_oauth(st, *s); rc != 0) {
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
  st.tls = tls;
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
  if (tls) {
    log_info("listening on https://{}:{}", s->tls_listen->host, engine.tls_port());
  }
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

}  // namespace tollgate::app
