// `tollgate stdio` on a local data dir and corpus: the key from TOLLGATE_API_KEY checked before
// anything is created, the shared state built as `serve` builds it (one core), the corpus loaded
// on a thread of its own while the first lines are answered, then mcp::run_stdio until stdin
// ends or a signal (read from a signalfd beside stdin) stops it; usage is flushed on the way
// out. (`stdio --remote URL`, the bridge to a server, is stdio_remote.cc.)
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "commands.h"
#include "data_dir_lock.h"
#include "handler.h"
#include "reload.h"
#include "server_settings.h"
#include "startup.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/key_store.h"
#include "tools.h"

namespace tollgate::app {
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

// Local stdio's corpus, loaded on a thread of its own (issue 29): a client's initialize,
// ping, tools/list and server/discover are answered at once, a tools/call that needs the
// corpus waits for it at most kWait (then the tool error `corpus_loading`). When the load
// ends the thread raises SIGUSR2, which the stdio loop's signalfd takes: a failed load (a bad
// corpus line with on_bad_line = "fail") then ends the process with the load's exit code.
class corpus_loader final : public tool_context::corpus_gate {
 public:
  static constexpr std::chrono::seconds kWait{5};

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
    if (rc_ < 0 && done_.wait_for(kWait) == std::future_status::ready) {
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
  ep.lend(host.tools(), &host);  // stdio has no gate: the host rates each message
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

}  // namespace tollgate::app
