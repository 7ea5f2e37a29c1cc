// HTTP/1.1 request as parsed in place: every string_view points into the connection's receive
// buffer and is valid until the engine consumes that request (after the handler returns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tollgate::http {

inline constexpr size_t max_headers = 64;
static_assert(max_headers < 256, "request::first_line holds 1 + a header index in a byte");

struct header {
  std::string_view name;
  std::string_view value;
};

/// The header fields the server reads on nearly every request: the framing fields the parser
/// acts on and the ones the handlers look up. Each request notes where the first line of each
/// is (see request::field), so a look-up is one load, not a scan of the head.
enum class field : uint8_t {
  host,
  expect,
  connection,
  content_length,
  transfer_encoding,
  authorization,
  x_api_key,
  origin,
  accept,
  content_type,
  mcp_session_id,
  mcp_protocol_version,
  mcp_method,
  mcp_name,
  tollgate_deadline,  ///< the unix ms after which the client has given up (design §5)
  other,              ///< any other name; not indexed
};
inline constexpr size_t indexed_fields = static_cast<size_t>(field::other);

/// Which indexed field `name` is (case-insensitive), or field::other. `name` must hold no
/// control bytes (true of every name the parser accepts).
field classify(std::string_view name) noexcept;

/// Why a request was refused. Each maps to one HTTP status (see status_of()).
enum class errc : uint8_t {
  ok = 0,
  /// Malformed method, target or version → 400.
  bad_request_line,
  /// Malformed field line (bad name byte, no colon, NUL, bare CR/LF, obs-fold; missing or
  /// repeated Host; Transfer-Encoding on HTTP/1.0) → 400.
  bad_header,
  /// More than limits::max_header_count fields → 431.
  too_many_headers,
  /// Head over limits::max_header_bytes → 431.
  header_too_large,
  /// Content-Length or decoded chunked size over limits::max_body_bytes → 413.
  body_too_large,
  /// Both Content-Length and Transfer-Encoding, or differing Content-Lengths → 400.
  conflicting_length,
  /// Content-Length is not a decimal number → 400.
  bad_content_length,
  /// Malformed chunked framing → 400.
  bad_chunk,
  /// Transfer-Encoding other than chunked → 501.
  unsupported_encoding,
  /// HTTP/2.0 and other versions we do not speak → 505.
  unsupported_version,
};

/// The HTTP status an errc answers with.
int status_of(errc e) noexcept;
/// A short human-readable reason, for the error body and logs.
std::string_view message(errc e) noexcept;

struct limits {
  /// The head (request line, headers, final CRLF) may not exceed this; checked before the head
  /// has fully arrived, so a slow, endless head is refused once this many bytes are buffered.
  size_t max_header_bytes = 16 * 1024;
  /// Content-Length, or the decoded size of a chunked body, may not exceed this. A chunked body's
  /// wire size (data plus framing and trailers) may not exceed max_body_bytes + max_header_bytes,
  /// so a receive buffer of 2 * max_header_bytes + max_body_bytes always holds a whole request.
  size_t max_body_bytes = 1024 * 1024;
  /// At most this many header lines (clamped to http::max_headers) → else 431.
  size_t max_header_count = max_headers;
  /// RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host header gets 400 (bad_header).
  bool require_host = true;
};

struct request {
  std::string_view method;
  std::string_view target;  ///< raw request-target, e.g. "/v1/stories?q=x"
  std::string_view path;    ///< target up to '?'
  std::string_view query;   ///< after '?', without it; empty if none
  int version_minor = 1;    ///< HTTP/1.x
  header headers[max_headers];
  size_t num_headers = 0;
  /// first_line[f]: 1 + the index in headers[] of the first line of indexed field f, 0 when
  /// there is none. Kept by the parser and by add_header; read through field().
  uint8_t first_line[indexed_fields] = {};
  /// The body. For chunked requests this is the decoded body, which the parser has compacted in
  /// place inside the receive buffer (so it is contiguous).
  std::string_view body;
  bool keep_alive = true;
  bool expect_continue = false;
  bool chunked = false;
  size_t content_length = 0;

  /// First header with this name (case-insensitive), or empty.
  std::string_view header_value(std::string_view name) const noexcept;
  bool has_header(std::string_view name) const noexcept;
  /// The first line of an indexed field, or nullptr: the answer header_value/has_header give
  /// for its name, in one load.
  const header* field_line(field f) const noexcept {
    const uint8_t i = first_line[static_cast<size_t>(f)];
    return i == 0 ? nullptr : &headers[i - 1];
  }
  /// The value of an indexed field's first line, or empty.
  std::string_view field_value(field f) const noexcept {
    const header* h = field_line(f);
    return h == nullptr ? std::string_view{} : h->value;
  }
  /// Appends a header line to a request built by hand (tests, benchmarks, fuzz targets) and
  /// indexes it as the parser would. False, and nothing added, when headers[] is full.
  bool add_header(std::string_view name, std::string_view value) noexcept;
};

/// A request that owns its bytes: for work finished after the connection's buffer may be gone
/// (a request answered off the core, app/offcore.h). Its views point into the copy.
class request_copy {
 public:
  explicit request_copy(const request& r);
  request_copy(const request_copy&) = delete;
  request_copy& operator=(const request_copy&) = delete;
  const request& get() const noexcept { return req_; }

 private:
  std::string bytes_;
  request req_;
};

}  // namespace tollgate::http
