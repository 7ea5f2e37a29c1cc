// The MCP endpoint: JSON-RPC 2.0 + MCP dispatch over Streamable HTTP (`POST /mcp`) and stdio.
//
// The one header the app uses. Construction (at start-up, per core):
//   envelope::cache env(identity);            // shared, immutable
//   mcp::registry tools; tools.add(...); tools.finish();   // shared, immutable
//   mcp::session_store sessions(idle_ns);     // only if sessions are on; shared, thread-safe
//   mcp::endpoint ep(tools, env, options);    // one per core, core-local
//   ep.lend(tools_context, rate_charge);     // once: what the app lends (mcp/host.h)
// Per request to /mcp, after the app's gate (route, key, rate limit) decided it:
//   info = ep.answer(req, refusal, host, out, now_ns);
// the one entry of the surface over HTTP: it writes the gate's refusal (401, 429, 503) from its
// outcome table row, or answers the request. What it came to is ep.report(), the transport's
// refusals included, so nothing downstream re-derives it.
// A gateway first asks which tool calls the request holds: ep.decide_calls(req, visitor, now_ns).
// stdio:  mcp::run_stdio(ep, host, STDIN_FILENO, STDOUT_FILENO).
//
// The request body must be followed by at least body_padding readable bytes (the engine's
// receive buffers guarantee it): it is parsed in place, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/envelope/outcome_table.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/request.h"
#include "tollgate/mcp/host.h"
#include "tollgate/mcp/tool.h"

namespace tollgate::mcp {

/// Readable bytes required after every body handed to the endpoint (= SIMDJSON_PADDING).
inline constexpr size_t body_padding = 64;

/// Legacy (pre-2026) sessions: minted at initialize, ended by DELETE, expired when idle.
/// Thread-safe (one store shared by all cores; a mutex, taken only when sessions are on).
/// Bounded: at `max_sessions` live ones, minting a new session ends the least recently used
/// (its client gets 404 and, as the MCP spec asks, initializes again), so a client minting
/// sessions in a loop costs memory up to the cap, never beyond it.
class session_store {
 public:
  static constexpr size_t id_len = 32;
  explicit session_store(int64_t idle_ns, size_t max_sessions = 100000);
  /// Mints a new session id (32 hex chars from getrandom) for `r`.
  std::string mint(envelope::revision r, int64_t now_ns);
  /// True (and refreshes its idle clock) when `id` is live.
  bool touch(std::string_view id, int64_t now_ns);
  /// Ends a session; false when it was unknown.
  bool end(std::string_view id);
  /// Drops sessions idle for longer than idle_ns (cost: the sessions dropped). Call from on_tick.
  void expire(int64_t now_ns);
  size_t size();
  /// Sessions ended to make room for a new one (the cap was reached).
  uint64_t evicted();

 private:
  struct entry {
    char id[id_len];
    envelope::revision rev;
    int64_t last_ns;
  };
  using lru_list = std::list<entry>;  ///< front: most recently used
  void erase(lru_list::iterator it);

  std::mutex mu_;
  lru_list lru_;
  std::unordered_map<std::string_view, lru_list::iterator> by_id_;  ///< keys view into lru_
  int64_t idle_ns_;
  size_t max_;
  uint64_t evicted_ = 0;
};

struct endpoint_options {
  /// Origins allowed besides the loopback ones (exact match, e.g. "https://app.example.com").
  std::vector<std::string> allowed_origins;
  /// Allow http://localhost, http://127.0.0.1 and http://[::1] with any port.
  bool allow_loopback_origins = true;
  /// Sessions on when non-null (off by default: stateless).
  session_store* sessions = nullptr;
  /// Largest JSON body the parser accepts; larger → 413. The parser is sized for it up front.
  size_t max_body_bytes = 256 * 1024;
  /// Largest JSON-RPC batch (2025-03-26); larger → -32600.
  size_t max_batch = 32;
};

/// A tools/call as the endpoint decided it, before anything ran: the registered tool and its
/// validated arguments (defaults filled in). Views into the request body and the endpoint:
/// valid only during call_visitor::on_call().
struct decided_call {
  const tool_def& tool;
  const arguments& args;
};

/// Receives the tools/calls endpoint::decide_calls() finds in a request.
class call_visitor {
 public:
  virtual void on_call(const decided_call& call) = 0;

 protected:
  ~call_visitor() = default;
};

/// One per core; core-local (not thread-safe). Holds the core's reused simdjson parser and
/// scratch buffers; the registry and envelope cache are shared read-only.
class endpoint {
 public:
  endpoint(const registry& tools, const envelope::cache& env, endpoint_options opts = {});
  ~endpoint();
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  /// Answers one request to /mcp (any HTTP method) with one complete HTTP response appended to
  /// `out`: the refusal the gate decided (`g.row` set: 401, 429 or 503, written as its row
  /// says), or the request itself. `now_ns` drives session idle expiry only.
  http::response_info answer(const http::request& req, const envelope::gate_refusal& g, host& h,
                             out_buffer& out, int64_t now_ns = 0);
  /// answer() of a request the gate let through (tests and benchmarks drive the endpoint so).
  http::response_info handle_http(const http::request& req, host& h, out_buffer& out,
                                  int64_t now_ns = 0);

  /// Decides the request as handle_http() would (the transport's checks, the session, pass 1,
  /// header/body agreement, the tool and its arguments) and hands `v` each tools/call that
  /// handle_http() would run, in message order, without admitting, running or writing
  /// anything: a gateway starts the remote queries of a request from these before answering
  /// it with handle_http(). A call that handle_http() would refuse is not handed over; a
  /// session the request names is touched as handle_http() touches it.
  void decide_calls(const http::request& req, call_visitor& v, int64_t now_ns = 0);

  /// False when `req` carries an `Origin` header that is neither allowed nor (when allowed)
  /// loopback: handle_http() answers it 403 before anything else.
  bool origin_allowed(const http::request& req) const noexcept;

  /// CORS for browser clients: when `req` carries an Origin that origin_allowed() accepts (an
  /// mcp.allowed_origins entry or a loopback origin) and is not a preflight, inserts
  /// Access-Control-Allow-Origin (that origin), Access-Control-Expose-Headers (the session, the
  /// 401 challenge, Retry-After, the rate and quota headers) and `Vary: Origin` after the status
  /// line of the response that starts at `out[response_start]`. Preflights (OPTIONS) are
  /// answered by handle_http() with their own headers.
  void add_cors_headers(const http::request& req, out_buffer& out, size_t response_start) const;
  /// HTTP 413 for a POST whose body the engine refused as larger than the server accepts,
  /// before reading it: a JSON-RPC error (-32600, id null) as the endpoint's other transport
  /// refusals, with `Connection: close`. No key or quota figures (the request was not read).
  http::response_info render_too_large(out_buffer& out) const;
  /// Answers one JSON-RPC message (stdio): appends the response body (no HTTP) to `out`, or
  /// nothing for notifications and responses. `msg` must be followed by body_padding readable
  /// bytes. The revision is the one negotiated by the last initialize (default 2025-03-26).
  void handle_message(std::string_view msg, host& h, out_buffer& out);

  /// What the app lends once per core: the context passed to every tool call (call_context's
  /// env) and, over HTTP, the gate's rate charge (a batch's later requests, a 202's refund).
  /// Null: none (a tool then gets no context; nothing is charged beyond the gate's charge).
  void lend(tool_env* tools, rate_charge* rate = nullptr) noexcept;
  /// What the messages of the last request answered (answer(), handle_http() or
  /// handle_message()) came to; valid until the next one.
  const request_report& report() const noexcept;
  /// The request ids (raw JSON: a number or a quoted string) that the notifications/cancelled
  /// of the request last given to answer() named, in message order; views into its body, valid
  /// while it is handled. The app records them for the calls they name (a call waiting, on this
  /// core or another, is then not admitted).
  std::span<const std::string_view> cancellations() const noexcept;

  /// The revision a stdio session negotiated (initialize), default 2025-03-26.
  envelope::revision stdio_revision() const noexcept { return stdio_rev_; }

  const envelope::cache& envelopes() const noexcept { return env_; }

  struct impl;

 private:
  /// HTTP 401 (missing or invalid key or token). `key_presented`: one was sent (RFC 6750's
  /// error="invalid_token" joins the challenge); `resource_metadata`: OAuth's (RFC 9728), or
  /// empty on a key-only server.
  http::response_info render_unauthorized(const http::request& req, out_buffer& out,
                                          bool key_presented = false,
                                          std::string_view resource_metadata = {}) const;
  /// HTTP 429 for `req`: `Retry-After`, the figures' header lines (which must not carry another
  /// Retry-After), and a JSON-RPC error (code 429, data = the rate_limited object) echoing the
  /// request's id when the body parses, else null. A body of only notifications and responses
  /// does not count toward the rate limit: it is answered by handle_http (202) instead.
  http::response_info render_rate_limited(const http::request& req, host& h, out_buffer& out,
                                          int64_t retry_after_secs, int64_t now_ns = 0);

  const registry& tools_;
  const envelope::cache& env_;
  endpoint_options opts_;
  envelope::revision stdio_rev_ = envelope::revision::v2025_03_26;
  std::unique_ptr<impl> impl_;
};

/// A descriptor run_stdio watches next to its input (the app's signalfd), and what to do when
/// it is readable: `on_ready` returns false to stop serving.
struct stdio_events {
  int fd = -1;  ///< -1: none
  bool (*on_ready)(void* ctx) = nullptr;
  void* ctx = nullptr;
};

/// Runs the stdio transport: newline-delimited JSON-RPC read from `in_fd`, responses written to
/// `out_fd` one per line. Returns 0 at EOF, or when `events.on_ready` says stop, after every
/// line read so far is answered and flushed; 1 on an I/O error. Logs to stderr only.
int run_stdio(endpoint& ep, host& h, int in_fd, int out_fd, const stdio_events& events = {});

}  // namespace tollgate::mcp
