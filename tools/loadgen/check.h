// Response checks for the load generator: every response is classified into exactly one
// outcome (success, an HTTP status, a JSON-RPC error code, a tool-error code, a bad response,
// or a transport error). Anything the checks cannot positively recognise as a success is an
// error: a wrong id, an unparseable body or a missing field never counts as success.
//
// Core-local: one checker per load thread (it owns two reused simdjson parsers).
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "http_response.h"

namespace tollgate::loadgen {

/// What a request asks for; decides how its response is checked.
enum class req_kind : std::uint8_t {
  mcp_call,     ///< POST /mcp tools/call search_stories
  mcp_init,     ///< POST /mcp initialize
  mcp_list,     ///< POST /mcp tools/list
  rest_search,  ///< GET /v1/stories?q=
  get,          ///< GET of a fixed path; only the status is checked
};

/// How deep the checks go: `full` parses JSON bodies; `status` looks at status and framing only
/// (what wrk does, for like-for-like client CPU comparisons).
enum class check_level : std::uint8_t { full, status };

enum class outcome_kind : std::uint8_t {
  ok,             ///< the response is a positively recognised success
  http_status,    ///< an HTTP status other than success (401, 429, 5xx, ...); detail: REST code
  jsonrpc_error,  ///< a JSON-RPC error object; code is its code
  tool_error,     ///< result.isError = true; detail is the tool-error `code`
  bad_response,   ///< malformed, mismatched or unexpected; detail says what
  transport,      ///< connect/send/recv failed or the peer closed early; detail: errno name
};

/// One classified response. `detail` is valid until the next check() (or is a literal).
struct outcome {
  outcome_kind kind = outcome_kind::ok;
  int code = 0;  ///< HTTP status (http_status) or JSON-RPC error code (jsonrpc_error)
  std::string_view detail;
};

/// What the request that this response answers expects.
struct expectation {
  req_kind kind = req_kind::get;
  std::int64_t id = 0;      ///< JSON-RPC id sent (MCP kinds)
  int expect_status = 200;  ///< for req_kind::get
};

/// Classifies responses. Core-local; allocation-free once its buffers have grown.
class response_checker {
 public:
  outcome check(const response_head& head, std::string_view body, const expectation& want,
                check_level level);

  /// Full checks answered by the memo (a response byte-identical, with the same status line,
  /// checked headers and expectation, to the last one that passed the full check).
  std::uint64_t memo_hits() const noexcept { return memo_hits_; }

 private:
  /// Bodies up to this size are remembered (a larger one is simply checked each time).
  static constexpr std::size_t max_memo = 64 * 1024;

  outcome check_full(const response_head& head, std::string_view body, const expectation& want);
  outcome check_mcp(const response_head& head, std::string_view body, const expectation& want);
  outcome check_rest(const response_head& head, std::string_view body);
  /// The `result` of a 200 JSON-RPC answer: initialize and tools/list by their key field, a
  /// tools/call by its first content block (a tool error's code, or a search payload).
  outcome check_result(simdjson::dom::object result, const expectation& want);
  /// Copies `s` into `buf` with simdjson padding and parses it with `p`.
  simdjson::error_code parse_padded(simdjson::dom::parser& p, std::vector<char>& buf,
                                    std::string_view s, simdjson::dom::element& out);
  /// Copies `s` into `buf` followed by zeroed simdjson padding.
  static simdjson::padded_string_view pad(std::vector<char>& buf, std::string_view s);
  /// True when `text` is a search payload: an object with an unsigned `total` and a
  /// `stories` array of objects, no more of them than `total`.
  bool search_payload_ok(std::string_view text);

  simdjson::dom::parser outer_;
  simdjson::dom::parser inner_;
  std::vector<char> outer_buf_;
  std::vector<char> inner_buf_;
  std::vector<char> sse_buf_;
  // The last response that passed the full check.
  bool memo_valid_ = false;
  bool memo_close_ = false;
  bool memo_retry_after_ = false;
  int memo_status_ = 0;
  int memo_minor_ = 0;
  expectation memo_want_;
  std::string memo_ctype_;
  std::string memo_body_;
  std::uint64_t memo_hits_ = 0;
};

/// Human/JSON label of an outcome: "ok", "http 429", "http 404 not_found",
/// "jsonrpc_error -32602", "tool_error quota_exceeded", "bad_response: id mismatch",
/// "transport: ECONNRESET".
std::string outcome_label(outcome_kind kind, int code, std::string_view detail);

}  // namespace tollgate::loadgen
