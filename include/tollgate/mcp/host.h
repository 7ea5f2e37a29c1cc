// The host: what the MCP endpoint asks of the application about each call it answers, and
// only that: a billable tools/call is admitted (answered with the outcome table's tool error
// code, or none) and later settled. The endpoint calls the host, never the reverse: the app
// implements it on the quota core (app::core_host; fakes in tests). Called only from the core
// that handles the request: core-local.
//
// The rest of what the endpoint needs is not asked call by call:
//   - the tools' context (tool_env) and the request's figures beyond one call's admission
//     (rate_charge: the gate's charge adjusted over HTTP, every other message rated on stdio,
//     and the header lines the figures come to) are lent once per core (endpoint::lend);
//   - what each message was answered with is the endpoint's own report (request_report,
//     endpoint::report()), and the calls its notifications/cancelled named are its
//     endpoint::cancellations(): the app reads both after the answer.
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

/// What the messages of one request were answered with (endpoint::report(); the access log and
/// /metrics read it): the first message's method and tool, and the first outcome that is not
/// ok. Over HTTP a request refused whole (the gate's 401, 429 or 503, or a transport refusal
/// such as 405 or 406) is one answer, with no method.
struct request_report {
  std::string_view method;         ///< as sent (raw bytes, valid while the request is handled)
  const tool_def* tool = nullptr;  ///< tools/call of a registered tool
  outcome result = outcome::ok;
  bool any = false;  ///< some message was answered (notifications and responses are not)

  /// One answered message (each of a batch, after its body is written).
  void add(std::string_view m, const tool_def* t, outcome o) noexcept {
    if (!any) {
      any = true;
      method = m;
      tool = t;
    }
    if (result == outcome::ok) {
      result = o;
    }
  }
};

class host {
 public:
  virtual ~host() = default;
  /// Admits one call of billable tool `tool` (reserving a unit); `id` is the request's JSON-RPC
  /// id (raw JSON), for a host that drops calls their client cancelled. rate_limited only on
  /// stdio (HTTP rate limits are answered with a 429 before dispatch).
  virtual admission admit(std::string_view tool, std::string_view id) = 0;
  /// Settles the last admitted call: billed only when `success`; a failed call gives its unit back.
  virtual void settle(bool success) = 0;
};

/// The request's figures beyond one call's admission: over HTTP, the charge the app's gate made
/// for one request before dispatch, adjusted as the endpoint finds what the body holds, and the
/// header lines those figures come to; on stdio, where no gate rates requests, every message
/// admit() does not rate. Lent once per core (endpoint::lend); none: nothing is charged or
/// given back beyond the gate's charge, nothing else is rated, and an answer carries no figures.
/// Core-local.
class rate_charge {
 public:
  /// Appends this request's extra response header lines, each "Name: value\r\n" (X-RateLimit-*,
  /// X-Quota-*, RateLimit-Policy, RateLimit). Called once per HTTP response, after
  /// host::admit() when the request is a billable tools/call, so the figures match the tool
  /// error's (and again, replacing them, after such a call failed and was not billed).
  virtual void write_headers(out_buffer& out) = 0;
  /// stdio only: called once per request that admit() does not rate (handshakes, lists, pings
  /// and calls of free tools such as get_usage count toward the rate limit too, design §5).
  /// Return rate_limited (with retry_after_secs): a free tool call is answered with the
  /// rate_limited tool error, any other request with the JSON-RPC error whose code is 429 and
  /// whose data is the rate_limited object. Over HTTP the gate rated the request before
  /// dispatch: never limited there.
  virtual admission rate_check() = 0;
  /// Each request of a batch after the first (the gate's charge covered one), so a batch of N
  /// requests costs N of the rate limit as N single requests would. rate_limited (with
  /// retry_after_secs): that request is answered with the JSON-RPC error whose code is 429, as
  /// a limited single request's body is.
  virtual admission charge_extra() = 0;
  /// The POST held only JSON-RPC notifications and responses (answered 202, no work), which
  /// never count toward the rate limit (design §5): the charge is given back. Called before the
  /// 202's write_headers().
  virtual void refund() = 0;

 protected:
  ~rate_charge() = default;
};

}  // namespace tollgate::mcp
