// net::server: option checks, listeners (SO_REUSEPORT, one per core, port 0 resolved by the
// first), handler creation and the core threads.
#include "tollgate/net/server.h"

#include <fmt/core.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "net/core.h"
#include "tollgate/common/log.h"
#include "tollgate/net/features.h"
#include "tollgate/net/tls.h"

namespace tollgate::net {
namespace {

constexpr int kMaxCores = 1024;

// The CPUs this process may run on (for pin_threads).
std::vector<int> allowed_cpus() {
  std::vector<int> ids;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i) {
      if (CPU_ISSET(i, &set)) {
        ids.push_back(i);
      }
    }
  }
  return ids;
}

void log_missing_flags(const features& f) {
  struct missing {
    bool have;
    const char* what;
    const char* needs;  // the Linux version
    const char* instead;
  };
  const missing rows[] = {
      {f.coop_taskrun, "IORING_SETUP_COOP_TASKRUN", "5.19", "running without it"},
      {f.single_issuer, "IORING_SETUP_SINGLE_ISSUER", "6.0", "running without it"},
      {f.defer_taskrun, "IORING_SETUP_DEFER_TASKRUN", "6.1", "running without it"},
      {f.multishot_accept, "multishot accept", "5.19", "using single-shot accept"},
      {f.multishot_recv, "multishot recv", "6.0", "using single-shot recv"},
  };
  for (const missing& m : rows) {
    if (!m.have) {
      log_info("io_uring: {} unavailable (needs Linux {}; kernel {}); {}", m.what, m.needs,
               f.kernel, m.instead);
    }
  }
}

std::string check_options(const server_options& o) {
  const uint32_t n = o.recv_buffer_count;
  if (n == 0 || n > 32768 || (n & (n - 1)) != 0) {
    return fmt::format("recv_buffer_count must be a power of two in [1, 32768], got {}", n);
  }
  if (o.recv_buffer_size < 256 || o.recv_buffer_size > (1u << 24)) {
    return fmt::format("recv_buffer_size must be in [256, 16 MiB], got {}", o.recv_buffer_size);
  }
  if (o.max_connections == 0 || o.max_connections > (1u << 24)) {
    return fmt::format("max_connections must be in [1, 16777216], got {}", o.max_connections);
  }
  if (o.ring_entries < 8 || o.ring_entries > 32768) {
    return fmt::format("ring_entries must be in [8, 32768], got {}", o.ring_entries);
  }
  if (o.threads < 0 || o.threads > kMaxCores) {
    return fmt::format("threads must be in [0, {}], got {}", kMaxCores, o.threads);
  }
  return {};
}

// Binds one SO_REUSEPORT listener; returns the fd or -errno.
int make_listener(const addrinfo& ai, int backlog) {
  const int fd = ::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) {
    return -errno;
  }
  const int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
      ::bind(fd, ai.ai_addr, ai.ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
    const int e = errno;
    ::close(fd);
    return -e;
  }
  return fd;
}

// Every core's listener sets SO_REUSEPORT, and the kernel lets any socket of the same user
// that sets it join the port: a second tollgate started on a port in use would bind without
// complaint and take half its connections. A socket without SO_REUSEPORT cannot share the port,
// so one bound (and closed) before the listeners tells whether anything holds it. Returns 0 or
// the errno of that bind.
int port_taken(const addrinfo& ai) {
  const int fd = ::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) {
    return errno;
  }
  const int one = 1;
  int e = 0;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
    e = errno;
  }
  ::close(fd);
  return e;
}

// Listeners, one per core: the first binds `port` (0 picks one, written back), the rest join it
// with SO_REUSEPORT. Returns an error message (nothing left open), or empty.
std::string open_listeners(const server_options& o, const std::string& host_name, int n,
                           std::vector<int>& listeners, uint16_t& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const char* host = (host_name.empty() || host_name == "*") ? nullptr : host_name.c_str();
  auto close_listeners = [&] {
    for (const int fd : listeners) {
      ::close(fd);
    }
    listeners.clear();
  };
  for (int i = 0; i < n; ++i) {
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    const int gai = ::getaddrinfo(host, service.c_str(), &hints, &res);
    if (gai != 0) {
      close_listeners();
      return fmt::format("cannot resolve listen address {}: {}", host_name, ::gai_strerror(gai));
    }
    if (i == 0 && port != 0) {
      if (const int e = port_taken(*res); e != 0) {
        ::freeaddrinfo(res);
        return fmt::format("cannot listen on {}:{}: {}", host_name, port,
                           e == EADDRINUSE ? "address already in use (by another process, or "
                                             "another listener of this one)"
                                           : std::strerror(e));
      }
    }
    const int fd = make_listener(*res, o.listen_backlog);
    ::freeaddrinfo(res);
    if (fd < 0) {
      close_listeners();
      return fmt::format("cannot listen on {}:{}: {}", host_name, port, std::strerror(-fd));
    }
    listeners.push_back(fd);
    if (i == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(ss).sin6_port
                                            : reinterpret_cast<sockaddr_in&>(ss).sin_port);
    }
  }
  return {};
}

// Starts one thread per core: each sets its ring up on its own thread (the ring's single
// issuer), reports back, and runs its loop. Returns the first set-up error, or empty once every
// core reported.
std::string run_cores(std::vector<std::unique_ptr<detail::core>>& cores,
                      std::vector<std::thread>& threads, const server_options& o,
                      const std::vector<int>& cpus) {
  std::mutex mu;
  std::condition_variable cv;
  int reported = 0;
  std::string first_error;
  const int n = static_cast<int>(cores.size());
  for (int i = 0; i < n; ++i) {
    const int cpu = (o.pin_threads && !cpus.empty()) ? cpus[i % cpus.size()] : -1;
    threads.emplace_back([&, i, cpu, c = cores[i].get()] {
      const std::string name = fmt::format("tollgate-c{}", i);
      pthread_setname_np(pthread_self(), name.c_str());
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      }
      auto r = c->setup();
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!r && first_error.empty()) {
          first_error = r.error();
        }
        ++reported;
        cv.notify_one();  // under the lock: run_cores() may return (and destroy cv) right after
      }
      if (r) {
        c->run();
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reported == n; });
  }
  return first_error;
}

}  // namespace

int default_threads() noexcept {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

struct server::impl {
  server_options opts;
  std::atomic<bool> stop{false};
  // Written by start() before wake_count is published; read by stop() (maybe in a signal
  // handler), so a plain fixed array rather than anything that can reallocate.
  int wake_fds[kMaxCores] = {};
  std::atomic<int> wake_count{0};
  std::unique_ptr<core_stats[]> stats;
  std::unique_ptr<detail::handoff> handoff;  // outlives the cores (declared before them)
  std::vector<std::unique_ptr<detail::core>> cores;
  std::vector<std::thread> threads;
  int nthreads = 0;
  uint16_t port = 0;
  uint16_t tls_port = 0;
  bool started = false;
};

server::server(server_options opts) : impl_(std::make_unique<impl>()) {
  impl_->opts = std::move(opts);
}

server::~server() {
  stop();
  wait();
}

uint16_t server::port() const noexcept { return impl_->port; }
uint16_t server::tls_port() const noexcept { return impl_->tls_port; }
int server::threads() const noexcept { return impl_->nthreads; }
const core_stats& server::stats(int core) const noexcept { return impl_->stats[core]; }

void server::stop() noexcept {
  // Async-signal-safe: a lock-free atomic store and write(2).
  impl_->stop.store(true, std::memory_order_relaxed);
  const int n = impl_->wake_count.load(std::memory_order_acquire);
  const uint64_t one = 1;
  for (int i = 0; i < n; ++i) {
    [[maybe_unused]] const ssize_t w = ::write(impl_->wake_fds[i], &one, sizeof one);
  }
}

void server::wait() {
  for (std::thread& t : impl_->threads) {
    if (t.joinable()) {
      t.join();
    }
  }
}

result<void, std::string> server::start(handler_factory factory) {
  impl& s = *impl_;
  if (s.started) {
    return unexpected(std::string("server::start called twice"));
  }
  s.started = true;
  const server_options& o = s.opts;
  if (std::string bad = check_options(o); !bad.empty()) {
    return unexpected(std::move(bad));
  }
  const features& f = probe_features();
  if (std::string why = f.unusable_reason(); !why.empty()) {
    return unexpected(std::move(why));
  }
  log_missing_flags(f);

  const std::vector<int> cpus = o.pin_threads ? allowed_cpus() : std::vector<int>();
  const int n = o.threads > 0 ? o.threads : std::min(default_threads(), kMaxCores);

  std::vector<int> listeners;
  uint16_t port = o.port;
  if (std::string bad = open_listeners(o, o.host, n, listeners, port); !bad.empty()) {
    return unexpected(std::move(bad));
  }
  std::vector<int> tls_listeners;
  uint16_t tls_port = o.tls_port;
  if (o.tls) {
    if (std::string bad = open_listeners(o, o.tls_host, n, tls_listeners, tls_port); !bad.empty()) {
      for (const int fd : listeners) {
        ::close(fd);
      }
      return unexpected("HTTPS: " + bad);
    }
    log_info("HTTPS on {}:{}: {}", o.tls_host, tls_port, o.tls->ktls_status());
  }

  std::vector<std::unique_ptr<http::handler>> handlers;
  for (int i = 0; i < n; ++i) {
    handlers.push_back(factory(i));
    if (!handlers.back()) {
      for (const int fd : listeners) {
        ::close(fd);
      }
      for (const int fd : tls_listeners) {
        ::close(fd);
      }
      return unexpected(fmt::format("handler factory returned null for core {}", i));
    }
  }

  s.stats = std::make_unique<core_stats[]>(static_cast<size_t>(n));
  s.handoff = std::make_unique<detail::handoff>(n, o.max_connections);
  for (int i = 0; i < n; ++i) {
    s.cores.push_back(std::make_unique<detail::core>(i, o, f, listeners[i], std::move(handlers[i]),
                                                     s.stats[i], s.stop, *s.handoff));
    if (o.tls) {
      s.cores.back()->set_tls_listener(tls_listeners[i]);
    }
    s.wake_fds[i] = s.cores.back()->wake_fd();
    s.handoff->set_wake_fd(i, s.wake_fds[i]);
  }
  s.wake_count.store(n, std::memory_order_release);
  s.nthreads = n;
  s.port = port;
  s.tls_port = o.tls ? tls_port : 0;

  std::string first_error = run_cores(s.cores, s.threads, o, cpus);
  if (!first_error.empty()) {
    stop();
    wait();
    return unexpected(std::move(first_error));
  }
  return {};
}

}  // namespace tollgate::net
