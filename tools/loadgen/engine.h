// The load generator's io_uring engine: one ring per thread driving a set of keep-alive
// HTTP/1.1 connections, closed loop (each connection keeps `depth` requests outstanding) or
// open loop at a fixed rate (latency measured from each request's intended send time, so a
// stalled server cannot hide behind a client that waits for it: no coordinated omission).
//
// Kernel features: IORING_OP_CONNECT/SEND/RECV (5.6+), IORING_FEAT_EXT_ARG for waits with a
// timeout (5.11+); SINGLE_ISSUER + DEFER_TASKRUN (6.1+) when present, else COOP_TASKRUN
// (5.19+), else plain. Every submission goes out in one io_uring_enter per loop pass.
#pragma once

#include <sys/socket.h>

#include <cstdint>

#include "check.h"
#include "stats.h"
#include "workload.h"

namespace tollgate::loadgen {

/// How to drive the load. Thread-safe (read-only during the run).
struct run_config {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  unsigned connections = 64;  ///< total, split over threads
  unsigned threads = 1;
  unsigned depth = 1;         ///< requests outstanding per connection (pipelining when > 1)
  double rate = 0;            ///< total requests/s; 0 = closed loop
  check_level level = check_level::full;
  std::uint64_t seed = 1;
  /// Per thread: stop once this many outcomes (responses and transport errors) were counted
  /// in the window; 0 = run until the end time.
  std::uint64_t stop_after = 0;
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
