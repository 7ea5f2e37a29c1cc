// Envelope cache: every byte of an MCP/JSON-RPC/HTTP response that never changes, rendered once
// at start-up, plus the writers that assemble a response from those pieces and the variable
// parts (the JSON-RPC id copied raw from the request, numbers, the already-escaped payload).
//
// A response on the HTTP surface is written in four steps into the caller's out_buffer:
//   1. head(out, status, close)    status line + fixed headers
//   2. the caller appends extra header lines ("Name: value\r\n"; e.g. the host's quota headers)
//   3. body_start(out) -> mark      "Content-Length:" + a field of spaces + "\r\n\r\n"
//   4. body writers, then body_end(out, mark), which writes the length right-aligned into the
//      field (the spaces before it are OWS), so the body is not moved (below 10 MB); answering
//      HEAD (body_end's omit_body), it then drops the body: the head says what GET would get.
// On stdio only the body writers are used.
//
// The cache is built once and is then immutable: thread-safe for concurrent readers (all cores
// share one). The writers allocate nothing once the out_buffer has reached its working size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tollgate/common/buffer.h"

namespace tollgate::envelope {

/// MCP protocol revisions this server speaks, oldest first.
enum class revision : uint8_t { v2025_03_26, v2025_06_18, v2025_11_25, v2026_07_28 };
inline constexpr size_t num_revisions = 4;
inline constexpr std::array<std::string_view, num_revisions> revision_names = {
    "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"};
inline constexpr std::string_view name_of(revision r) {
  return revision_names[static_cast<size_t>(r)];
}
/// The revision named `s`, or false when it is not one we speak.
bool parse_revision(std::string_view s, revision& out) noexcept;
/// 2026-07-28 and later: stateless, `resultType` on every result.
inline constexpr bool is_modern(revision r) { return r >= revision::v2026_07_28; }

/// Tool error codes (design §2): a tool that ran and could not do the thing.
/// usage_unavailable is the code `unavailable` with its own message: a billable call that was
/// not made because its usage could not be recorded (the usage journal cannot be written).
/// quota_unreachable is also written with the code `unavailable` and its own message: a cluster
/// node that cannot reach the quota service (Redis) for a stop key whose lease ran out.
/// story_unreadable is the code `unavailable` with its own message too: get_story of a story
/// whose stored text cannot be read (a damaged index), a fault of the server that a retry does
/// not mend (so no retry_after_secs).
/// call_expired and call_cancelled (code `unavailable`, own messages): a tools/call dropped
/// before admission because its client had given up on it (its Tollgate-Deadline passed, or a
/// notifications/cancelled named it); not run, not billed. Its client seldom reads the answer.
/// corpus_loading (code `unavailable`, own message): local stdio still indexing its corpus.
enum class tool_error_code : uint8_t {
  suspended,
  quota_exceeded,
  rate_limited,
  unavailable,
  not_found,
  usage_unavailable,
  quota_unreachable,
  story_unreadable,
  call_expired,
  call_cancelled,
  corpus_loading
};
inline constexpr size_t num_tool_error_codes = 11;
std::string_view name_of(tool_error_code c) noexcept;
/// The full-sentence message an agent sees for `c`.
std::string_view message_of(tool_error_code c) noexcept;

/// A tool error with its optional figures; a negative figure is omitted from the JSON.
struct tool_error {
  tool_error_code code = tool_error_code::unavailable;
  int64_t retry_after_secs = -1;
  int64_t quota_limit = -1;
  int64_t quota_used = -1;
  int64_t quota_remaining = -1;
  /// Non-empty: this sentence instead of the code's own (the stdio bridge names the cause it
  /// saw: a server it cannot reach, a timeout, an HTTP status). Rendered per call, allocating:
  /// never on the server's hot path, which uses the pre-rendered messages.
  std::string_view message;
};

/// JSON-RPC errors the server sends. Each has a fixed code and message template.
enum class rpc_error_kind : uint8_t {
  parse_error,          ///< -32700 "Parse error" (id always null)
  invalid_request,      ///< -32600, message = detail (or a default)
  method_not_found,     ///< -32601
  invalid_params,       ///< -32602, detail = argument, rule = the rule; data {"argument","rule"}
  unknown_tool,         ///< -32602, message "Unknown tool: " + detail
  internal_error,       ///< -32603, message = detail (or a default)
  header_mismatch,      ///< -32020, message = detail
  unsupported_version,  ///< -32022, detail = requested; data {"requested","supported":[...]}
  rate_limited,         ///< 429, "Rate limit exceeded: retry in N second(s).", data = the
                        ///< rate_limited tool-error object (retry_after_secs = N)
};
inline constexpr size_t num_rpc_error_kinds = 9;
int code_of(rpc_error_kind k) noexcept;

/// The variable parts of one JSON-RPC error.
struct rpc_error {
  rpc_error_kind kind = rpc_error_kind::internal_error;
  std::string_view detail;       ///< see rpc_error_kind (escaped when written)
  std::string_view rule;         ///< invalid_params only
  int64_t retry_after_secs = 1;  ///< rate_limited only
};

/// Where body_start() left its Content-Length field; pass to body_end().
/// Two words, so that it goes in registers: every answer passes one.
struct body_mark {
  size_t gap = 0;   ///< offset of the Content-Length value field (after the colon)
  size_t body = 0;  ///< offset of the first body byte
};

/// The JSON-RPC id of a request as raw JSON text (a number or a quoted string exactly as it
/// appeared in the request), or "null".
inline constexpr std::string_view null_id = "null";

/// Server identity rendered into initialize and server/discover results.
struct server_identity {
  std::string name = "tollgate";
  std::string title = "tollgate story search";
  std::string version = "0.0.0";
  std::string instructions;  ///< optional; empty = omitted
};

class cache {
 public:
  explicit cache(const server_identity& id);

  // --- HTTP framing ---
  /// Status line and the fixed headers for `status` (Content-Type: application/json for statuses
  /// with a body), plus "Connection: close" when `close`.
  void head(out_buffer& out, int status, bool close) const;
  /// "Content-Length:" + a field of spaces + CRLF CRLF. Returns the mark for body_end().
  body_mark body_start(out_buffer& out) const;
  /// Writes the body length right-aligned into the field: "Content-Length:   4123". The body
  /// stays where it is unless its length has 8 or more digits.
  void body_end(out_buffer& out, body_mark m) const;
  /// body_end(), then, when `omit_body` (the request is HEAD: http::response_head::omit_body),
  /// drops the body it counted.
  void body_end(out_buffer& out, body_mark m, bool omit_body) const;
  /// A whole bodiless response with extra header lines: a 202 says "Content-Length: 0", a 204
  /// has no Content-Length (RFC 9110 §8.6).
  void empty_response(out_buffer& out, int status, std::string_view extra_headers,
                      bool close) const;

  // --- JSON-RPC bodies ---
  /// `{"jsonrpc":"2.0","id":ID,"result":{"content":[{"type":"text","text":"` (2026-07-28 adds
  /// `"resultType":"complete",` before "content"). The payload follows, already escaped.
  void success_prefix(out_buffer& out, std::string_view id, revision r) const;
  /// `"}],"isError":false}}`
  void success_suffix(out_buffer& out) const;
  /// A whole tool-error response (result.isError = true, text = compact error JSON).
  void tool_error_response(out_buffer& out, std::string_view id, revision r,
                           const tool_error& e) const;
  /// A whole JSON-RPC error response.
  void error_response(out_buffer& out, std::string_view id, const rpc_error& e) const;
  /// `{"jsonrpc":"2.0","id":ID,"result":` + result_json + `}`; result_json is pre-rendered JSON.
  void result_response(out_buffer& out, std::string_view id, std::string_view result_json) const;
  /// The tool-error JSON object alone (REST body, 429 `data`): compact, not escaped.
  void tool_error_json(out_buffer& out, const tool_error& e) const;

  // --- Whole responses the app sends before dispatch ---
  /// HTTP 401 with `WWW-Authenticate: Bearer realm="tollgate"` and {"code":"invalid_key",...}.
  /// `key_presented` (a key was sent and is not valid) adds RFC 6750's
  /// `error="invalid_token", error_description="..."` to the challenge; a request that sent none
  /// gets no error code (RFC 6750 §3.1). `resource_metadata` (OAuth on: the URL of the protected
  /// resource metadata, RFC 9728 §5.1) adds `resource_metadata="URL"`; empty: none, as on a
  /// key-only server. It must hold no '"' or control byte (the gate builds it).
  void unauthorized(out_buffer& out, bool close, bool key_presented = false,
                    std::string_view resource_metadata = {}, bool omit_body = false) const;
  /// HTTP 503 with `Retry-After: 1` and {"code":"unavailable",...}: cluster mode, before the
  /// node's first key load, when no key can be checked yet (the outcome table's "keys not
  /// loaded yet"; the same answer on MCP and REST).
  void keys_not_loaded(out_buffer& out, bool close, bool omit_body = false) const;

  // --- Pre-rendered results ---
  /// The initialize result for a legacy revision (2026-07-28 has no handshake).
  std::string_view initialize_result(revision r) const {
    return initialize_[static_cast<size_t>(r)];
  }
  /// The server/discover result (2026-07-28).
  std::string_view discover_result() const { return discover_; }
  /// `{}` for legacy revisions, `{"resultType":"complete"}` for 2026-07-28 (ping etc.).
  std::string_view empty_result(revision r) const {
    return is_modern(r) ? std::string_view(R"({"resultType":"complete"})") : std::string_view("{}");
  }

 private:
  std::array<std::string, num_revisions> initialize_;
  std::string discover_;
  std::array<std::string, num_tool_error_codes> tool_error_text_;  // escaped, up to message end
  std::array<std::string, num_rpc_error_kinds> rpc_error_mid_;  // `,"error":{"code":N,"message":"`
  std::string unauthorized_body_;
  std::string supported_json_;  // ["2025-03-26",...]
};

}  // namespace tollgate::envelope
