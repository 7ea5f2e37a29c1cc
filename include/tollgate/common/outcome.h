// outcome: what one answered request came to, in the words of the error model (design §2).
//
// One set of names for every surface: the app's gate decides a refusal's outcome from the
// outcome table, the MCP endpoint reports each answer's to its host, the REST api sets its own,
// and /metrics and the access log print them; nothing reads an outcome back from a status.
#pragma once

#include <cstdint>
#include <string_view>

namespace tollgate {

enum class outcome : uint8_t {
  ok,                  ///< answered as asked (including notifications' 202)
  invalid_key,         ///< 401: missing or unknown key
  rate_limited,        ///< 429 / JSON-RPC 429 / stdio tool error
  quota_exceeded,      ///< tool error, REST 429
  suspended,           ///< tool error, REST 403
  unavailable,         ///< no shard answered (tool error, REST 503)
  not_found,           ///< story id, route or session unknown
  invalid_argument,    ///< -32602 naming an argument, REST 400
  unknown_tool,        ///< -32602 "Unknown tool"
  method_not_found,    ///< -32601
  parse_error,         ///< -32700, body not JSON
  invalid_request,     ///< -32600, -32020 header mismatch, -32022 unsupported version
  method_not_allowed,  ///< 405
  not_acceptable,      ///< 406, 415: Accept or Content-Type the endpoint cannot serve
  forbidden,           ///< 403 that is not a suspension (an Origin not allowed)
  too_large,           ///< 413, 431
  bad_request,         ///< another 4xx
  internal_error,      ///< -32603, 5xx other than 503
  expired,             ///< a tools/call past its Tollgate-Deadline: dropped before admission
  cancelled,           ///< a tools/call its client cancelled: dropped before admission
  count_
};
inline constexpr size_t num_outcomes = static_cast<size_t>(outcome::count_);

/// The label value ("ok", "quota_exceeded", ...).
constexpr std::string_view name_of(outcome o) noexcept {
  switch (o) {
    case outcome::ok:
      return "ok";
    case outcome::invalid_key:
      return "invalid_key";
    case outcome::rate_limited:
      return "rate_limited";
    case outcome::quota_exceeded:
      return "quota_exceeded";
    case outcome::suspended:
      return "suspended";
    case outcome::unavailable:
      return "unavailable";
    case outcome::not_found:
      return "not_found";
    case outcome::invalid_argument:
      return "invalid_argument";
    case outcome::unknown_tool:
      return "unknown_tool";
    case outcome::method_not_found:
      return "method_not_found";
    case outcome::parse_error:
      return "parse_error";
    case outcome::invalid_request:
      return "invalid_request";
    case outcome::method_not_allowed:
      return "method_not_allowed";
    case outcome::not_acceptable:
      return "not_acceptable";
    case outcome::forbidden:
      return "forbidden";
    case outcome::too_large:
      return "too_large";
    case outcome::bad_request:
      return "bad_request";
    case outcome::internal_error:
      return "internal_error";
    case outcome::expired:
      return "expired";
    case outcome::cancelled:
      return "cancelled";
    case outcome::count_:
      break;
  }
  return "unknown";
}

}  // namespace tollgate
