// The outcome table: how each refusal reaches an agent on every surface (design §2, the error
// model). One row per condition; the MCP endpoint (prepare()), the tools and the REST api all
// read it, so a new condition is a new row here and nowhere else.
//
// A row says:
//   1. how MCP over HTTP reports it: an HTTP status (the request could not be accepted), a
//      JSON-RPC error (the message was unroutable) or a tool error (the tool ran and could not
//      do the thing; the session is fine);
//   2. the tool error code, where there is one (rate_limited is also stdio's form of the 429);
//   3. the REST status, and whether the answer carries retry_after_secs (REST: Retry-After) and
//      the quota figures;
//   4. the outcome name /metrics and the access log print;
//   5. the quota core's verdict that raises it, where one does (quota/verdict.h): a surface
//      answers a refused admission by looking the verdict up here, never by a switch of its own.
//
// Thread-safe: constant data.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tollgate/common/outcome.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/quota/verdict.h"

namespace tollgate::envelope {

/// How MCP over HTTP reports a condition.
enum class mcp_form : uint8_t { http_status, jsonrpc_error, tool_error };

/// What retry_after_secs a tool error of the row carries.
enum class retry_after : uint8_t {
  none,       ///< never
  figure,     ///< the figure as given (quota_exceeded: seconds to the quota's reset)
  at_least_1  ///< the figure, at least 1 second
};

struct outcome_row {
  std::string_view condition;           ///< as the README's "What an agent sees" names it
  mcp_form mcp;                         ///< over HTTP
  int mcp_code;                         ///< HTTP status or JSON-RPC code; 0 for a tool error
  std::optional<tool_error_code> code;  ///< the tool error (stdio's form of a 429 too)
  int rest_status;                      ///< REST's status; 0 where REST has no such case
  retry_after retry;                    ///< tool error's retry_after_secs, REST's Retry-After
  bool quota_figures;                   ///< tool error carries quota_limit/used/remaining
  outcome result;                       ///< the name /metrics and the access log print
  std::optional<quota::admit_verdict> verdict = std::nullopt;  ///< the admission refusal
};

// A flat table, one line per row, read top to bottom like the seed's "What goes where".
inline constexpr std::array<outcome_row, 16> outcome_table = {{
    // condition                         MCP over HTTP                   tool error code
    //                                   REST  retry_after  figures  outcome  quota verdict
    {"missing or invalid key", mcp_form::http_status, 401, std::nullopt, 401, retry_after::none,
     false, outcome::invalid_key},
    {"rate limit exceeded", mcp_form::http_status, 429, tool_error_code::rate_limited, 429,
     retry_after::at_least_1, false, outcome::rate_limited},
    {"unknown tool", mcp_form::jsonrpc_error, -32602, std::nullopt, 0, retry_after::none, false,
     outcome::unknown_tool},
    {"bad argument", mcp_form::jsonrpc_error, -32602, std::nullopt, 400, retry_after::none, false,
     outcome::invalid_argument},
    {"unknown method", mcp_form::jsonrpc_error, -32601, std::nullopt, 0, retry_after::none, false,
     outcome::method_not_found},
    {"account suspended", mcp_form::tool_error, 0, tool_error_code::suspended, 403,
     retry_after::none, false, outcome::suspended, quota::admit_verdict::suspended},
    {"monthly quota used up", mcp_form::tool_error, 0, tool_error_code::quota_exceeded, 429,
     retry_after::figure, true, outcome::quota_exceeded, quota::admit_verdict::quota_exceeded},
    {"story id not found", mcp_form::tool_error, 0, tool_error_code::not_found, 404,
     retry_after::none, false, outcome::not_found},
    {"no shard answered", mcp_form::tool_error, 0, tool_error_code::unavailable, 503,
     retry_after::at_least_1, false, outcome::unavailable},
    {"usage cannot be recorded", mcp_form::tool_error, 0, tool_error_code::usage_unavailable, 503,
     retry_after::at_least_1, false, outcome::unavailable, quota::admit_verdict::unavailable},
    {"quota service unreachable", mcp_form::tool_error, 0, tool_error_code::quota_unreachable, 503,
     retry_after::at_least_1, false, outcome::unavailable, quota::admit_verdict::quota_unreachable},
    {"stored story unreadable", mcp_form::tool_error, 0, tool_error_code::story_unreadable, 503,
     retry_after::none, false, outcome::unavailable},
    {"call past its deadline", mcp_form::tool_error, 0, tool_error_code::call_expired, 0,
     retry_after::at_least_1, false, outcome::expired},
    {"call cancelled by its client", mcp_form::tool_error, 0, tool_error_code::call_cancelled, 0,
     retry_after::none, false, outcome::cancelled},
    {"corpus still loading", mcp_form::tool_error, 0, tool_error_code::corpus_loading, 0,
     retry_after::at_least_1, false, outcome::unavailable},
    // Cluster mode, before the node's first key load: no key can be checked yet, so no key is
    // called invalid; the request is refused as a whole, on MCP as on REST.
    {"keys not loaded yet", mcp_form::http_status, 503, std::nullopt, 503, retry_after::at_least_1,
     false, outcome::unavailable},
}};

/// The row of tool error `c` (every code has exactly one; outcome_table_test checks it).
constexpr const outcome_row& row_of(tool_error_code c) noexcept {
  for (const outcome_row& r : outcome_table) {
    if (r.code == c) {
      return r;
    }
  }
  return outcome_table[0];  // unreachable: every code has a row
}

/// The first row whose outcome is `o` (one per outcome but unavailable's five).
constexpr const outcome_row& row_of(outcome o) noexcept {
  for (const outcome_row& r : outcome_table) {
    if (r.result == o) {
      return r;
    }
  }
  return outcome_table[0];  // unreachable for the outcomes the table names
}

/// The row of a refused admission (`v` is neither ok nor lease_pending, which is never an
/// answer: outcome_table_test checks that every other verdict has exactly one row).
constexpr const outcome_row& row_of(quota::admit_verdict v) noexcept {
  for (const outcome_row& r : outcome_table) {
    if (r.verdict == v) {
      return r;
    }
  }
  return row_of(tool_error_code::unavailable);  // unreachable for a refusal
}

/// The row of `condition` (as the table writes it); the first row when there is none
/// (outcome_table_test checks the names the code asks for).
constexpr const outcome_row& row_named(std::string_view condition) noexcept {
  for (const outcome_row& r : outcome_table) {
    if (r.condition == condition) {
      return r;
    }
  }
  return outcome_table[0];
}

/// A request the app's gate refused whole, before a surface read it: the row (an http_status
/// row: a bad key's 401, a rate limit's 429, keys not loaded's 503), or null (not refused), and
/// what that row's answer shows. Each surface's one entry point writes it.
struct gate_refusal {
  const outcome_row* row = nullptr;
  bool key_presented = false;    ///< 401: a key was sent (RFC 6750's error="invalid_token")
  int64_t retry_after_secs = 0;  ///< 429: seconds until the rate limit lets one through
  /// 401 with OAuth on: `<base>/.well-known/oauth-protected-resource/mcp`, which the challenge
  /// names (RFC 9728 §5.1); empty: a key-only server. Valid until the gate's next admission.
  std::string_view resource_metadata = {};
};

/// The REST status that answers tool error `c`.
constexpr int rest_status_of(tool_error_code c) noexcept { return row_of(c).rest_status; }

/// The row whose MCP-over-HTTP form is HTTP status `status` (a request refused whole: 401,
/// 429, 503), or null: what such a status stands for, read from the table by whoever receives
/// one (the stdio bridge reading its server's answer) rather than decided again.
constexpr const outcome_row* row_of_http_status(int status) noexcept {
  for (const outcome_row& r : outcome_table) {
    if (r.mcp == mcp_form::http_status && r.mcp_code == status) {
      return &r;
    }
  }
  return nullptr;
}

/// The outcome of an answer from a public route outside the table (the OAuth authorization
/// server, the Stripe webhook, the ops routes), which reports only its HTTP status: the one
/// place an outcome is read from a status (a whole refusal's row, else success, bad request or
/// unavailable).
constexpr outcome outcome_of_status(int status) noexcept {
  const outcome_row* r = row_of_http_status(status);
  return status < 400    ? outcome::ok
         : r != nullptr  ? r->result
         : status >= 500 ? outcome::unavailable
                         : outcome::bad_request;
}

/// Tool error `c` with the figures its row carries; the others are left out (-1).
constexpr tool_error make_tool_error(tool_error_code c, int64_t retry_after_secs = -1,
                                     int64_t quota_limit = -1, int64_t quota_used = -1,
                                     int64_t quota_remaining = -1) noexcept {
  const outcome_row& r = row_of(c);
  tool_error e;
  e.code = c;
  if (r.retry == retry_after::figure) {
    e.retry_after_secs = retry_after_secs;
  } else if (r.retry == retry_after::at_least_1) {
    e.retry_after_secs = retry_after_secs < 1 ? 1 : retry_after_secs;
  }
  if (r.quota_figures) {
    e.quota_limit = quota_limit;
    e.quota_used = quota_used;
    e.quota_remaining = quota_remaining;
  }
  return e;
}

}  // namespace tollgate::envelope
