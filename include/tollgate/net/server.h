// The io_uring HTTP/1.1 engine: one thread per core, each with its own ring, its own
// SO_REUSEPORT listener, a provided buffer ring for receives and a pool of connection slots.
//
// A connection lives and dies on the core that accepted it. For every complete request the core
// calls its own http::handler (made by the factory given to start()), collects the responses of
// one loop pass, calls handler::before_send() once, then sends them all with one io_uring_submit.
// Kernel features: see features.h (Linux 5.19 minimum, 6.1 for the fastest setup).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tollgate/common/result.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/request.h"

namespace tollgate::net {

class tls_context;  // tollgate/net/tls.h

/// How the engine listens, threads and limits. Plain data, read once by server::start().
struct server_options {
  std::string host = "127.0.0.1";      ///< numeric IPv4/IPv6 address or name; "" or "*" = any
  uint16_t port = 8080;                ///< 0 = the first listener picks one, the others reuse it
  int threads = 0;                     ///< cores to run; 0 = default_threads() (online CPUs)
  bool pin_threads = false;            ///< pin core i to the i-th CPU of the process's affinity set
  http::limits limits;                 ///< header/body limits for the request parser
  uint32_t header_timeout_ms = 10000;  ///< a request head (and each body read) must arrive in this
  uint32_t idle_timeout_ms = 60000;    ///< a keep-alive connection may sit idle this long
  uint32_t linger_timeout_ms = 2000;  ///< after a final response: wait this long for the peer's FIN
  uint32_t shutdown_timeout_ms = 10000;  ///< stop(): in-flight requests get this long, then close
  /// Per core. A core at its cap keeps accepting: it hands the connection to another core
  /// with a free slot, or, when every core is full, answers 503 and closes it (counted in
  /// core_stats::handed_off / rejected), so no client waits unanswered in the backlog.
  uint32_t max_connections = 10000;
  /// Descriptors this engine leaves to the rest of the process (an admin listener, journal and
  /// snapshot files, key reloads): a connection accepted into one of the top `fd_reserve`
  /// descriptor numbers below RLIMIT_NOFILE (read at start()) is answered 503 and closed at once
  /// (core_stats::rejected_no_fd), and an outbound socket there fails with -EMFILE. Descriptors
  /// are allocated lowest first, so the engine then never holds more than the limit minus this.
  /// Near the reserve accepts are single-shot (a multishot burst could run through it), and
  /// when accept fails with EMFILE/ENFILE the core's one spare descriptor is used to accept and
  /// refuse (503) the connections waiting in its backlog. 0: none of this.
  uint32_t fd_reserve = 0;
  uint32_t recv_buffer_size = 16384;  ///< payload bytes per provided receive buffer
  uint32_t recv_buffer_count = 512;   ///< provided buffers per core (power of two, ≤ 32768)
  uint32_t ring_entries = 2048;       ///< SQ entries per core (CQ gets 4×)
  int listen_backlog = 4096;
  /// Use the single-shot accept/recv fallbacks even where the kernel has multishot (tests of
  /// the old-kernel path).
  bool disable_multishot = false;
  /// How a pass's usage-journal batch is written (the responses it bills are sent only after
  /// it succeeded, either way):
  /// - inline (true): write(2) on the core's thread in the pass itself; the responses go out in
  ///   the same pass. A write that blocks (a page-cache write under memory pressure, a slow
  ///   file system) stalls this core for that long.
  /// - ring (false): an IORING_OP_WRITE; the responses go out in the pass that reaps its
  ///   completion. On file systems without async buffered writes (ext4 among them) the kernel
  ///   runs it on an io-wq worker thread, which costs a thread wake-up per write.
  bool journal_inline = true;
  /// HTTPS: with `tls` set, every core also accepts on tls_host:tls_port (its own SO_REUSEPORT
  /// listener; 0 = pick a port, see server::tls_port()) and serves the same handler over TLS
  /// (see src/net/core_tls.cc). Shared by the cores; reload it through the context itself.
  std::shared_ptr<tls_context> tls;
  std::string tls_host = "127.0.0.1";
  uint16_t tls_port = 0;
};

/// What server_options::threads = 0 resolves to: the number of online CPUs (the same figure as
/// std::thread::hardware_concurrency()). Thread-safe.
int default_threads() noexcept;

/// Counters of one core. Written only by that core's thread, readable from any thread (relaxed:
/// each value is a monotonic or gauge figure for /metrics; no ordering with other data is
/// implied).
struct alignas(64) core_stats {
  std::atomic<uint64_t> loop_passes{0};       ///< event-loop iterations
  std::atomic<uint64_t> completions{0};       ///< CQEs reaped
  std::atomic<uint64_t> open_connections{0};  ///< gauge
  std::atomic<uint64_t> accepted{0};          ///< connections accepted
  std::atomic<uint64_t> closed{0};            ///< connections closed (any reason)
  std::atomic<uint64_t> timeouts{0};          ///< closed by the header, idle or linger timeout
  std::atomic<uint64_t> requests{0};          ///< requests handed to the handler
  std::atomic<uint64_t> parse_errors{0};      ///< requests refused by the parser (4xx/5xx + close)
  std::atomic<uint64_t> rejected{0};          ///< answered 503 and closed at once: every core full
  std::atomic<uint64_t> handed_off{0};        ///< accepted at this core's cap, served elsewhere
  std::atomic<uint64_t> rejected_no_fd{0};    ///< answered 503 and closed: descriptors reserved
  std::atomic<uint64_t> accept_errors{0};     ///< accept failures (EMFILE, ENFILE, ENOBUFS, ...)
  std::atomic<uint64_t> recv_no_buffer{0};    ///< receives that found no free provided buffer
                                              ///< (often: raise recv_buffer_count)
  std::atomic<uint64_t> journal_writes{0};    ///< journal writes completed (handler batches)
  std::atomic<uint64_t> journal_errors{0};    ///< journal writes failed or short (responses held)
  std::atomic<uint64_t> journal_syncs{0};     ///< journal fdatasyncs completed
  std::atomic<uint64_t> journal_held{0};      ///< connections whose answers wait for the journal
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

/// The engine. Thread-safe where noted; start()/wait() from one controlling thread.
class server {
 public:
  /// Makes the handler for core `core` (0-based). Called sequentially on the thread that calls
  /// start(), once per core, before any core runs; it need not be thread-safe.
  using handler_factory = std::function<std::unique_ptr<http::handler>(int core)>;

  explicit server(server_options opts);
  ~server();  ///< stop() and wait() if still running
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Probes io_uring, binds the listeners, makes the handlers and starts the core threads.
  /// The core threads inherit the caller's signal mask (block SIGTERM/SIGINT/SIGHUP first when
  /// sigwait() handles them) and RLIMIT_NOFILE as read when each accept is armed (raise it
  /// before start(); fd_reserve is reckoned from it; at the limit accept backs off on a timer
  /// and retries).
  /// Returns once every core is set up and accepting, or an error message (missing kernel
  /// feature with the version that has it, bind failure, ...) with nothing left running.
  /// Call at most once.
  result<void, std::string> start(handler_factory factory);

  /// The bound port (the picked one when options.port was 0). Valid after start() succeeded.
  uint16_t port() const noexcept;
  /// The bound HTTPS port (0 without options.tls). Valid after start() succeeded.
  uint16_t tls_port() const noexcept;
  /// Number of cores running. Valid after start() succeeded.
  int threads() const noexcept;

  /// Graceful stop: stop accepting, finish requests in flight (bounded by shutdown_timeout_ms),
  /// close idle connections; the core threads then exit. Returns immediately. Thread-safe,
  /// idempotent, and async-signal-safe (an atomic store and a write(2) to each core's eventfd),
  /// so it may be called from a signal handler as well as from a sigwait() thread.
  void stop() noexcept;
  /// Blocks until every core thread has exited (after stop(), or after a fatal ring error).
  void wait();

  /// Counters of core `core` in [0, threads()). Thread-safe (relaxed atomics).
  const core_stats& stats(int core) const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tollgate::net
