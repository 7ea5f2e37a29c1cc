// The protocol half of `tollgate stdio --remote URL` (remote_transport.cc holds the transport):
// what the bridge reads from a client's JSON-RPC line before it POSTs it, and what it writes back
// for each way the server or the network can answer (the table of issue 18):
//
//   server or network                          bridge writes (one line per JSON-RPC message)
//   2xx/4xx with a JSON-RPC body or SSE events  each message, byte for byte (202: nothing)
//   4xx whose error has id null, to a request  that error under the request's id (else the
//                                              client would wait for an answer forever)
//   429 on tools/call                          tool error rate_limited: retry_after_secs =
//                                              Retry-After, quota figures from the body's data
//   429 on another request                     the JSON-RPC error of the 429 body
//   401                                        nothing: the caller exits 2
//   not reached, reset, timeout, 5xx,          tools/call: tool error unavailable with
//   malformed 2xx                              retry_after_secs and a message naming the cause
//                                              (never "no shard answered": the bridge cannot
//                                              know that); other requests: -32603 naming it
//   3xx, or 4xx without a JSON-RPC body        every request: -32603 naming the status and
//   (a proxy's 413, a URL without /mcp: 404)   what to fix; no retry_after_secs (a retry
//                                              cannot succeed)
//
// No sockets here, so every row is unit-tested with made-up answers. Errors are rendered by the
// envelope cache, the same writers the server uses. Not thread-safe (one bridge, one thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/envelope/envelope.h"

namespace tollgate::app::remote {

/// One JSON-RPC message of a client's line, as far as the bridge needs it.
struct message_facts {
  std::string id;      ///< raw JSON id when it is a request (has id and method), else empty
  std::string method;  ///< empty when absent (a response) or not a string
  std::string tool;    ///< params.name of a tools/call
  /// params._meta["io.modelcontextprotocol/protocolVersion"], when a string (2026-07-28).
  std::string meta_version;
  bool is_request() const noexcept { return !id.empty() && !method.empty(); }
  bool is_tools_call() const noexcept { return is_request() && method == "tools/call"; }
};

/// A client's line: one message, a batch of them, or something that does not parse (the server
/// answers that one; the bridge only forwards it).
struct line_facts {
  bool parsed = false;
  bool batch = false;
  std::vector<message_facts> messages;  ///< one unless batch
  bool any_request() const noexcept;
};

/// Reads `line`, which must be followed by 64 (SIMDJSON_PADDING) readable bytes.
line_facts inspect(std::string_view line);

/// What came back for one POST.
struct http_answer {
  bool transport_failed = false;  ///< refused, reset, timeout, TLS, DNS: nothing usable came back
  bool not_sent = false;          ///< transport_failed before the request left (DNS, connect)
  bool timed_out = false;         ///< transport_failed: the bridge's --timeout-ms ran out
  std::string_view failure;       ///< transport_failed: libcurl's description of why
  long status = 0;
  std::string_view content_type;
  std::string_view body;
  int64_t retry_after_secs = -1;  ///< the Retry-After header in seconds; -1 when absent
};

/// The bridge's state that shapes what it renders: where it forwards to and what was negotiated.
struct bridge_view {
  const envelope::cache& env;
  std::string_view url;
  envelope::revision negotiated = envelope::revision::v2025_03_26;
};

enum class verdict : uint8_t {
  answered,      ///< the server's messages were forwarded (or nothing was due: 202)
  failed,        ///< the server could not be used; the bridge's own errors were written
  refused,       ///< a refusal a retry cannot mend (3xx, 4xx without JSON-RPC): errors written
  unauthorized,  ///< 401: nothing was written; the key is refused
};

/// Appends to `out` what the client must read for `line` given `answer`, one message per line
/// (each ending in '\n'); `reason` says why when the verdict is `failed` or `refused` (for the
/// log).
verdict translate(const line_facts& line, const http_answer& answer, const bridge_view& view,
                  out_buffer& out, std::string& reason);

/// The protocolVersion of an initialize result in `answer` (JSON or SSE body); empty if none.
std::string negotiated_version(const http_answer& answer);

/// `v` as an HTTP field value: itself when it is non-empty printable ASCII without leading or
/// trailing blanks, else "=?base64?" + base64(v) + "?=" (the MCP clients' form for Mcp-Name).
std::string header_value(std::string_view v);

}  // namespace tollgate::app::remote
