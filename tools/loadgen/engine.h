// The load generator's io_uring engine: one ring per thread driving a set of keep-alive
// HTTP/1.1 connections, closed loop (each connection keeps `depth` requests outstanding) or
// open loop at a fixed rate (latency measured from each request's intended send time, so a
// stalled server cannot hide behind a client that waits for it: no coordinated omission).
//
// Kernel features: IORING_OP_CONNECT/SEND/RECV (5.6+), IORING_FEAT_EXT_ARG for waits with a
// timeout (5.11+) are required. Optional, probed at start-up, each falling back with a note in
// `thread_stats::ring_note`: SINGLE_ISSUER + DEFER_TASKRUN (6.1+), else COOP_TASKRUN (5.19+),
// else plain; a sparse registered-file table for the sockets (5.19+); a provided buffer ring
// with multishot recv (6.0+); the ring's fd registered with itself (5.18+). Every submission goes
// out in one io_uring_enter per loop pass; a wait may ask for a batch of completions (bounded by a
// short timeout, `wait_batch`).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "check.h"
#include "stats.h"
#include "workload.h"

struct io_uring;
struct io_uring_params;
struct ssl_ctx_st;

namespace tollgate::loadgen {

/// Optional io_uring features (bits of `run_config::features` and `thread_stats::features`).
enum ring_feature : unsigned {
  feat_defer_taskrun = 1u << 0,  ///< IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
  feat_coop_taskrun = 1u << 1,   ///< IORING_SETUP_COOP_TASKRUN (tried when the above is not)
  feat_fixed_files = 1u << 2,    ///< sockets in a registered file table (IOSQE_FIXED_FILE)
  feat_buf_ring = 1u << 3,       ///< provided buffer ring + multishot recv
  feat_ring_fd = 1u << 4,        ///< the ring's own fd registered (io_uring_enter skips fdget)
  feat_all = (1u << 5) - 1,
};

/// "defer_taskrun+fixed_files+buf_ring" style names of the bits in `features` ("plain" for 0).
std::string ring_feature_names(unsigned features);

/// Parses a comma-separated list of feature names (defer_taskrun, coop_taskrun, fixed_files,
/// buf_ring, ring_fd) into bits; false on an unknown name.
bool parse_ring_features(const std::string& list, unsigned& out);

/// io_uring_queue_init_params's signature; tests substitute one that refuses some flags.
using ring_init_fn = int (*)(unsigned entries, io_uring* ring, io_uring_params* p);

/// How to drive the load. Thread-safe (read-only during the run).
struct run_config {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  unsigned connections = 64;  ///< total, split over threads
  unsigned threads = 1;
  unsigned depth = 1;  ///< requests outstanding per connection (pipelining when > 1)
  double rate = 0;     ///< total requests/s; 0 = closed loop
  check_level level = check_level::full;
  std::uint64_t seed = 1;
  /// Per thread: stop once this many outcomes (responses and transport errors) were counted
  /// in the window; 0 = run until the end time.
  std::uint64_t stop_after = 0;
  /// Optional ring features to try (bits of ring_feature); those the kernel refuses are
  /// dropped with a note.
  unsigned features = feat_all;
  /// Completions each wait asks for beyond the sends submitted in that pass: 0 = auto (an
  /// eighth of the requests outstanding, 1..16), 1 = wake for every completion. Default 1:
  /// against a loaded server most passes already find many completions, and larger batches
  /// measured no lower CPU per request while adding to the latency figures.
  unsigned wait_batch = 1;
  /// Upper bound on how long a wait for more than one completion may hold completions that
  /// already arrived (µs).
  unsigned wait_batch_us = 200;
  /// TCP congestion control for the client's sockets (TCP_CONGESTION); empty = the system
  /// default. Refused names are noted in `thread_stats::ring_note` and the default is kept.
  std::string congestion;
  /// Ring set-up; null = io_uring_queue_init_params.
  ring_init_fn ring_init = nullptr;
  /// TLS client context (tls_client.h); null = plain HTTP. Each connection handshakes after
  /// its connect, requests queue until the handshake is done.
  ssl_ctx_st* tls = nullptr;
  /// Sent as SNI when it is a name; checked against the certificate when `tls_check_name`.
  std::string tls_host;
  bool tls_check_name = true;
};

/// The run's timeline on CLOCK_MONOTONIC (ns): connections open at `begin`, warm-up until
/// `measure`, results count until `end`.
struct run_times {
  std::uint64_t begin = 0;
  std::uint64_t measure = 0;
  std::uint64_t end = 0;
};

/// CLOCK_MONOTONIC in ns.
std::uint64_t now_ns() noexcept;

/// Runs one load thread with `conns` connections until `times.end` (or `cfg.stop_after`
/// outcomes), filling `out`.
/// `index` is the thread's number (seeds its random choices, staggers its open-loop start).
void run_thread(const run_config& cfg, const workload& w, const run_times& times, unsigned index,
                unsigned conns, thread_stats& out);

}  // namespace tollgate::loadgen
