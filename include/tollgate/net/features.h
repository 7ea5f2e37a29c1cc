// What the running kernel's io_uring offers, probed once at start-up.
//
// The engine needs provided buffer rings (Linux 5.19) and the basic socket opcodes (Linux 5.6).
// Everything else has a fallback: multishot accept (5.19) → single-shot accept re-armed per
// connection; multishot recv (6.0) → single-shot recv re-armed per completion; the setup flags
// COOP_TASKRUN (5.19), SINGLE_ISSUER (6.0) and DEFER_TASKRUN (6.1) are used where present and
// logged where absent. Tests GTEST_SKIP() when an op they exercise is missing.
#pragma once

#include <string>

namespace tollgate::net {

/// Result of probing io_uring. Plain data: copy freely.
struct features {
  bool io_uring = false;          ///< io_uring_setup works at all (not disabled by sysctl/seccomp)
  std::string io_uring_error;     ///< why not, when io_uring is false
  std::string kernel;             ///< uname release, for messages
  bool ops_basic = false;         ///< ACCEPT, RECV, SEND, READ, ASYNC_CANCEL opcodes (5.6)
  std::string missing_op;         ///< the first basic opcode missing, when ops_basic is false
  bool coop_taskrun = false;      ///< IORING_SETUP_COOP_TASKRUN (5.19)
  bool single_issuer = false;     ///< IORING_SETUP_SINGLE_ISSUER (6.0)
  bool defer_taskrun = false;     ///< IORING_SETUP_DEFER_TASKRUN (6.1)
  bool submit_all = false;        ///< IORING_SETUP_SUBMIT_ALL (5.18)
  bool buf_ring = false;          ///< IORING_REGISTER_PBUF_RING provided buffer rings (5.19)
  bool multishot_accept = false;  ///< IORING_ACCEPT_MULTISHOT (5.19)
  bool multishot_recv = false;    ///< IORING_RECV_MULTISHOT (6.0)

  /// Empty when the engine can run here; otherwise a message naming the missing feature and the
  /// kernel version that has it.
  std::string unusable_reason() const;
};

/// Probes once per process (the first call does the work, later calls return the cached
/// result). Thread-safe. Not for the request path.
const features& probe_features();

}  // namespace tollgate::net
