// The host: what the MCP endpoint asks of the application per request (admission and settling
// of billable calls, the rate checks, the response's quota header lines, the tools' context).
// The endpoint calls the host, never the reverse: the app implements it on top of the quota core
// (app::core_host; fakes in tests). Called only from the core that handles the request:
// implementations are core-local per core (one host object per core or per request).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/common/outcome.h"
#include "tollgate/envelope/envelope.h"

namespace tollgate::mcp {

struct tool_def;
class tool_env;

/// The outcome of admitting one billable tools/call: nothing (admitted), or the outcome table's
/// tool error code that refuses it, with the figures its row may carry (make_tool_error keeps
/// those the row names). The host looks a quota verdict up in the table
/// (envelope::row_of(quota::admit_verdict)); the endpoint writes the code as it is.
struct admission {
  std::optional<envelope::tool_error_code> refusal;  ///< empty: admitted
  int64_t retry_after_secs = -1;
  int64_t quota_limit = -1;
  int64_t quota_used = -1;
  int64_t quota_remaining = -1;
};

/// What one JSON-RPC message was answered with (the access log and /metrics read it).
struct answer_note {
  std::string_view method;         ///< the method as sent (raw bytes); empty when unparsed
  const tool_def* tool = nullptr;  ///< tools/call of a registered tool
  outcome result = outcome::ok;
};

class host {
 public:
  virtual ~host() = default;
  /// Appends this request's extra response header lines, each "Name: value\r\n" (X-RateLimit-*,
  /// X-Quota-*, RateLimit-Policy, RateLimit). Called once per HTTP response, after admit() when
  /// the request is a billable tools/call, so the figures match the tool error's.
  virtual void write_headers(out_buffer& out) = 0;
  /// Admits one call of billable tool `tool` (reserving a unit); `id` is the request's JSON-RPC
  /// id (raw JSON), for a host that drops calls their client cancelled. rate_limited only on
  /// stdio (HTTP rate limits are answered with a 429 before dispatch).
  virtual admission admit(std::string_view tool, std::string_view id) = 0;
  /// Settles the last admitted call: billed only when `success`; a failed call gives its unit back.
  virtual void settle(bool success) = 0;
  /// stdio only: called once per request that admit() does not rate (handshakes, lists, pings
  /// and calls of free tools such as get_usage count toward the rate limit too, design §5).
  /// Return rate_limited (with retry_after_secs): a free tool call is answered with the
  /// rate_limited tool error, any other request with the JSON-RPC error whose code is 429 and
  /// whose data is the rate_limited object. Over HTTP the app rates every request before
  /// dispatch instead. Default: never limited.
  virtual admission rate_check() { return {}; }
  /// HTTP only: called for each request in a batch after the first (the app rated the HTTP
  /// request itself, which covers one), so a batch of N requests costs N of the rate limit as N
  /// single requests would. rate_limited (with retry_after_secs): that request is answered with
  /// the JSON-RPC error whose code is 429, as a limited single request's body is. Default:
  /// never limited.
  virtual admission rate_extra() { return {}; }
  /// Called once per answered JSON-RPC message (each of a batch; not for notifications and
  /// responses, which get no answer), after its body is written; over HTTP also once for a
  /// request refused whole (the gate's 401, 429 or 503, or a transport refusal such as 405 or
  /// 406), with its outcome. Default: nothing.
  virtual void answered(const answer_note& /*note*/) {}
  /// HTTP only: the POST the app rated before dispatch held only JSON-RPC notifications and
  /// responses (answered 202, no work), which never count toward the rate limit (design §5): the
  /// host gives that charge back. Called before the 202's write_headers(). Default: nothing.
  virtual void refund_rate() {}
  /// A notifications/cancelled of this request's caller named request `id` (raw JSON: a number
  /// or a quoted string): a host may drop that call if it has not admitted it yet (the call may
  /// be waiting, on this core or another). Default: nothing (a call answered at once cannot be
  /// cancelled after the fact).
  virtual void cancelled(std::string_view /*id*/) {}
  /// The context the registry's tools get in each call of this request (call_context::env):
  /// the application's own state for its tools, passed on unread. Default: none.
  virtual tool_env* tools() { return nullptr; }
};

}  // namespace tollgate::mcp
