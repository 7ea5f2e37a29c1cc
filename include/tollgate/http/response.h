// HTTP/1.1 response writing into a caller-owned out_buffer.
//
// Everything here appends to the buffer and allocates nothing once the buffer's capacity has
// grown to its working size. Two ways to frame a body:
//   1. write_simple_response(): the body is already in hand; Content-Length is written exactly.
//   2. begin_response() / end_response(): the head is written with a fixed-width Content-Length
//      field, the caller then appends the body to the same buffer (e.g. JSON rendered in place),
//      and end_response() patches the length in. The field is right-aligned and padded with
//      leading spaces ("Content-Length:        250"), which is plain OWS after the colon, so
//      every HTTP parser reads it (tollgate/common/content_length.h, shared with the envelope).
// Free functions are thread-safe (no shared state); date_cache is core-local.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/http/request.h"

namespace tollgate::http {

/// The RFC 9110 reason phrase for `status` ("Not Found"), or "" for a status without one.
std::string_view reason_phrase(int status) noexcept;

/// Whether a response with this status has no body and no Content-Length (RFC 9110 §6.4.1,
/// §8.6): 1xx, 204 and 304.
constexpr bool has_no_body(int status) noexcept {
  return status < 200 || status == 204 || status == 304;
}

/// The literal interim response an engine sends for `Expect: 100-continue`.
inline constexpr std::string_view continue_response = "HTTP/1.1 100 Continue\r\n\r\n";

/// Appends "HTTP/1.<minor> <status> <reason>\r\n". Precondition: 100 <= status <= 999.
void write_status_line(out_buffer& out, int status, int version_minor = 1);

/// Appends "<name>: <value>\r\n". The caller guarantees name is a token and value has no CR/LF.
void write_header(out_buffer& out, std::string_view name, std::string_view value);
/// Appends "<name>: <decimal value>\r\n".
void write_header(out_buffer& out, std::string_view name, uint64_t value);

/// Appends the decimal digits of v.
void append_decimal(out_buffer& out, uint64_t v);

/// Width of the patchable Content-Length value (leading-space padded, common/content_length.h);
/// a body of 10^(content_length_width - 1) bytes or more widens it.
inline constexpr size_t content_length_width = 10;

/// What a response head carries besides its status.
struct response_head {
  int status = 200;
  std::string_view content_type = {};  ///< omitted when empty
  /// Preformatted header lines, each ending in CRLF ("X-A: 1\r\nX-B: 2\r\n"); may be empty.
  std::string_view extra_headers = {};
  /// A full "Date: ...\r\n" line (date_cache::header_line()), or empty for none.
  std::string_view date_line = {};
  bool close = false;  ///< adds "Connection: close"
  /// Adds "Connection: keep-alive" (answering an HTTP/1.0 keep-alive request, which otherwise
  /// assumes the server closes). Ignored when close is set.
  bool keep_alive_http10 = false;
  /// Answering HEAD: the head carries the body's Content-Length but the body is not sent
  /// (write_response skips it; end_response truncates what was appended).
  bool omit_body = false;
};

/// The fields of response_head that follow from a parsed request: close when the client did
/// not ask to keep the connection, keep_alive_http10 for an HTTP/1.0 keep-alive client,
/// omit_body for HEAD.
inline response_head head_for(const request& req, int status) noexcept {
  response_head h;
  h.status = status;
  h.close = !req.keep_alive;
  h.keep_alive_http10 = req.keep_alive && req.version_minor == 0;
  h.omit_body = req.method == "HEAD";
  return h;
}

/// A response whose body is being appended after begin_response().
struct pending_response {
  size_t length_slot = 0;  ///< offset of the Content-Length value
  size_t body_start = 0;   ///< offset of the first body byte
  bool omit_body = false;  ///< from response_head::omit_body
};

/// Writes the status line and headers (with a patchable Content-Length) and the blank line.
pending_response begin_response(out_buffer& out, const response_head& head);
/// Sets Content-Length to the bytes appended since begin_response() (then drops them when the
/// head said omit_body).
void end_response(out_buffer& out, const pending_response& p) noexcept;

/// Writes a complete response with `body`. 1xx, 204 and 304 get neither Content-Length nor
/// body; every other status gets an exact Content-Length (0 for an empty body).
void write_response(out_buffer& out, const response_head& head, std::string_view body);

/// Convenience form of write_response(): status, Content-Type (omitted if empty), body, extra
/// header lines (each ending CRLF) and whether to add "Connection: close".
void write_simple_response(out_buffer& out, int status, std::string_view content_type,
                           std::string_view body, std::string_view extra_headers_block = {},
                           bool close = false);

/// The answer to a request the parser refused: status_of(e), a one-line text/plain body naming
/// the reason, and Connection: close (the engine closes after sending it).
void write_error_response(out_buffer& out, errc e);

/// Caches the IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") of the current second. Core-local:
/// one per core; update() once per loop pass reformats only when the second has changed.
class date_cache {
 public:
  date_cache() noexcept;
  /// `now_ns`: CLOCK_REALTIME in nanoseconds. Returns true when the text changed.
  bool update(int64_t now_ns) noexcept;
  /// "Sun, 06 Nov 1994 08:49:37 GMT" (29 bytes); valid until the next update().
  std::string_view value() const noexcept { return {line_ + 6, 29}; }
  /// "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"; valid until the next update().
  std::string_view header_line() const noexcept { return {line_, sizeof line_}; }

 private:
  int64_t second_ = INT64_MIN;
  char line_[6 + 29 + 2];
};

/// Formats `unix_seconds` as an IMF-fixdate into out[0, 29).
void format_imf_date(int64_t unix_seconds, char out[29]) noexcept;

}  // namespace tollgate::http
