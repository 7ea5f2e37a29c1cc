// The seam between the network engine (net/) and everything that answers requests.
//
// The engine owns sockets, rings and buffers; for each complete request it calls the core's
// handler, which writes exactly one complete HTTP/1.1 response (status line, headers, body)
// into the connection's output buffer. Handlers are shard-local: the engine makes one per core
// with a factory and calls it only from that core's thread, so a handler may keep per-core
// state (parsers, scratch buffers, quota shards) without locks.
#pragma once

#include <cstdint>

#include "tollgate/common/buffer.h"
#include "tollgate/http/request.h"

namespace tollgate::http {

/// What the handler tells the engine about the response it wrote.
struct response_info {
  int status = 200;
  bool close = false;  ///< close the connection once this response is sent
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
  /// Called about every 100 ms on each core (reconciliation, reloads, session expiry).
  virtual void on_tick(int64_t /*now_ns*/) {}
};

}  // namespace tollgate::http
