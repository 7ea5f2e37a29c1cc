// The connection slot and the constants shared by the core's source files (core.cc and
// core_*.cc; see core.h). Private to src/net.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "net/core.h"
#include "net/tls_session.h"
#include "tollgate/common/buffer.h"

struct ssl_st;

namespace tollgate::net::detail {

inline constexpr int64_t kMs = 1000000;
inline constexpr int64_t kTickNs = 100 * kMs;
inline constexpr int64_t kBackoffMinNs = 100 * kMs;
inline constexpr int64_t kBackoffMaxNs = 1000 * kMs;
/// Parsing pauses while a connection has this much unsent output (a client that pipelines
/// without reading); it resumes when the output has drained.
inline constexpr size_t kOutHighWater = 1 << 20;
/// Reassembly and output buffers above these capacities are freed when their slot is released.
inline constexpr size_t kKeepInCapacity = 64 * 1024;
inline constexpr size_t kKeepOutCapacity = 256 * 1024;

enum : uint8_t { kListHeader = 0, kListIdle = 1, kListLinger = 2, kNoList = 255 };

enum class conn_state : uint8_t { free, open, lingering, closing };

inline int64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline void bump(std::atomic<uint64_t>& a, uint64_t n = 1) noexcept {
  // Single writer (this core): a plain load+store avoids a locked instruction; relaxed because
  // readers only want an eventually-current figure.
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

/// One connection slot. Core-local.
struct conn {
  int fd = -1;
  uint32_t gen = 0;  // bumped on release; carried in user_data to catch stale completions
  conn_state state = conn_state::free;
  bool recv_armed = false;
  bool send_inflight = false;
  bool close_after_send = false;  // no more requests: close once the output is sent
  bool head_done = false;         // the pending partial request has its whole head
  bool head_timer = false;        // in the header list timing a head (not refreshed by bytes)
  bool continue_sent = false;     // "100 Continue" already sent for the pending request
  bool dirty = false;             // in core::dirty_
  bool paused = false;            // parsing paused: too much unsent output
  bool recv_cancelled = false;    // the armed recv was cancelled because input paused
  bool held_listed = false;       // in core::held_ (kept across a slot's reuse until swept)
  bool durable_wait = false;      // `out` past `ready` holds a `durable` (billed) response
  bool deferred = false;          // a deferred request waits at the front of `in`
  bool resume_queued = false;     // in core::resumed_ (resume() accepted, not delivered yet)
  bool peer_fin = false;          // the peer half-closed: answer what came before, then close
  bool idle_closed = false;       // lingering after its idle timeout (counted as a timeout then)
  bool tls_failed = false;        // TLS: the handshake failed (counted by reason)
  bool hs_queued = false;         // TLS: in core::hs_wait_ (handshake budget spent this pass)
  tls_session tls;                // TLS state (core_tls.cc); closed: plain HTTP
  uint32_t saved = UINT32_MAX;    // the deferred request's parsed form (core::saved_)
  uint32_t req_id = 0;            // the request being handled or deferred (deferral_token::gen)
  size_t need = 0;  // bytes the pending request needs in `in` before parsing again (0: unknown)
  uint8_t list = kNoList;
  uint32_t prev = UINT32_MAX;
  uint32_t next = UINT32_MAX;
  int64_t ts = 0;      // when the current timer started (monotonic ns)
  size_t sent = 0;     // bytes of `sending` already sent
  size_t ready = 0;    // bytes at the front of `out` the durable step released (may be sent)
  size_t mark = 0;     // bytes at the front of `out` the in-flight durable write covers
  out_buffer in;       // unparsed bytes of a request that spans receives (+ kPadding spare)
  out_buffer out;      // responses written this pass (or while a send was in flight)
  out_buffer sending;  // the bytes of the send in flight
};

}  // namespace tollgate::net::detail
