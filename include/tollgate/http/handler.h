// The seam between the network engine (net/) and everything that answers requests.
//
// The engine owns sockets, rings and buffers; for each complete request it calls the core's
// handler, which writes exactly one complete HTTP/1.1 response (status line, headers, body)
// into the connection's output buffer. Handlers are shard-local: the engine makes one per core
// with a factory and calls it only from that core's thread, so a handler may keep per-core
// state (parsers, scratch buffers, quota shards) without locks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tollgate/common/buffer.h"
#include "tollgate/http/request.h"

namespace tollgate::http {

/// What the handler tells the engine about the response it wrote.
struct response_info {
  int status = 200;
  bool close = false;  ///< close the connection once this response is sent
};

/// Durable bytes a handler wants written before the responses of the pass go out (the core's
/// usage journal). `data` stays valid and unchanged until journal_written() is called.
struct journal_batch {
  int fd = -1;                 ///< append-only file (O_APPEND); -1: nothing to write
  const char* data = nullptr;
  size_t size = 0;
  bool sync_due = false;       ///< the handler wants an fdatasync of `fd` (every fsync_ms)
};

class handler {
 public:
  virtual ~handler() = default;
  /// Writes one complete response for `req` to `out` (append only). `now_ns` is CLOCK_REALTIME
  /// read once per loop pass. Must not block.
  virtual response_info handle(const request& req, out_buffer& out, int64_t now_ns) = 0;
  /// Called once per loop pass after all requests of the pass were handled and before the
  /// engine submits their sends: durable state (usage journals) is written here.
  virtual void before_send(int64_t /*now_ns*/) {}
  /// Engine-written journal (optional): called once per pass after before_send() while no
  /// journal write is in flight. A batch with size > 0 makes the engine write it with io_uring
  /// and hold every response answered since (and the ones not yet covered) until the write
  /// completes; journal_written() then reports the bytes written (a short count: the rest is
  /// asked for again) or -errno (nothing counted: the bytes stay with the handler). A handler
  /// that returns an empty batch keeps the default behaviour (responses go out this pass).
  virtual journal_batch journal_pending() { return {}; }
  /// Completion of the write of the last batch: `res` bytes written, or -errno.
  virtual void journal_written(int64_t /*res*/) {}
  /// Completion of an fdatasync requested by journal_batch::sync_due: 0 or -errno.
  virtual void journal_synced(int /*res*/) {}
  /// Called about every 100 ms on each core (reconciliation, reloads, session expiry).
  virtual void on_tick(int64_t /*now_ns*/) {}
};

}  // namespace tollgate::http
