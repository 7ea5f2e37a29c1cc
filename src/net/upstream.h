// The engine's outbound HTTP/1.1 client (engine_io::fetch): upstreams, their connections, and
// the parser of a response head. The ring work lives in core (upstream.cc holds those members).
//
// One fetch's life:
//   1. fetch(): an idle keep-alive connection of the upstream is taken (most recently used
//      first), or a new one is opened (socket, TCP_NODELAY, IORING_OP_CONNECT); the request is
//      copied into the connection's `req` and the fetch joins the deadline heap.
//   2. connect CQE -> send (short sends resumed) -> recv into `resp` (kPadding spare bytes kept
//      after the data) until the head and Content-Length bytes of body are in.
//   3. The reply goes to handler::on_upstream() from the CQE reap (or the pass's deadline check);
//      the connection then joins its upstream's idle list unless the response said
//      `Connection: close`, was HTTP/1.0 without keep-alive, or carried extra bytes.
//   4. Failure: the connection is closed (shutdown + cancel of its one operation in flight; the
//      slot is released when that CQE arrives) and the error delivered. A request sent on a
//      reused idle connection that ends by EOF, ECONNRESET or EPIPE before any response byte is
//      sent once more on a fresh connection (the peer closed an idle keep-alive connection).
//   5. Idle connections unused for kUpstreamIdleNs are closed on a tick.
// Core-local: owned by one core.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"

namespace tollgate::net::detail {

/// Connections one core keeps to one upstream (idle, busy or connecting); beyond: -EAGAIN.
inline constexpr uint32_t kMaxUpstreamConns = 256;
/// A response head may not exceed this; a body may not exceed kMaxUpstreamBody (-EPROTO).
inline constexpr size_t kMaxUpstreamHead = 64 * 1024;
inline constexpr size_t kMaxUpstreamBody = 64 * 1024 * 1024;
/// Idle upstream connections older than this are closed on a tick.
inline constexpr int64_t kUpstreamIdleNs = 30'000'000'000;

/// A registered upstream. Its address stays at one place (the connect SQE points to it).
struct upstream {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::string name;            ///< "host:port", for logs
  std::vector<uint32_t> idle;  ///< idle connections, oldest first (reuse takes the back)
  uint32_t live = 0;           ///< connections not closing (counted against the cap)
};

enum class up_state : uint8_t { free, connecting, sending, receiving, idle, closing };

/// One outbound connection slot with at most one fetch and one operation in flight.
struct up_conn {
  int fd = -1;
  uint32_t gen = 0;  // bumped on release; carried in user_data
  uint32_t upstream = 0;
  up_state state = up_state::free;
  bool op_inflight = false;
  uint8_t op_kind = 0;     // core::op of the operation in flight
  bool has_fetch = false;  // a fetch is attached and its reply not delivered yet
  bool reused = false;     // the connection served a response before this fetch
  bool retried = false;    // this fetch already moved once to a fresh connection
  bool head_done = false;
  bool close_after = false;  // do not reuse after this response
  uint32_t heap_pos = UINT32_MAX;
  int status = 0;
  uint64_t tag = 0;
  int64_t deadline = 0;  // CLOCK_MONOTONIC ns
  int64_t idle_since = 0;
  size_t sent = 0;  // bytes of `req` sent
  size_t scan = 0;  // where the search for the end of the head resumes
  size_t head_len = 0;
  size_t total = 0;  // head + body bytes of the response, once the head is parsed
  out_buffer req;
  out_buffer resp;
};

/// A response head: "HTTP/1.x SSS ..." CRLF fields CRLF CRLF.
struct response_head {
  int status = 0;
  size_t head_len = 0;  ///< bytes up to and including the empty line
  size_t content_length = 0;
  bool has_length = false;
  bool chunked = false;  ///< any Transfer-Encoding (not supported: -EPROTO)
  bool close = false;    ///< Connection: close, or HTTP/1.0 without keep-alive
};

enum class head_status { incomplete, complete, bad };

/// Parses the response head at the start of `buf`. `scan` is where the search for the
/// terminating CRLF CRLF may resume (updated on incomplete). Pure; no allocation.
head_status parse_response_head(std::string_view buf, size_t& scan, response_head& out) noexcept;

}  // namespace tollgate::net::detail
