// The fields of an HTTP/1.1 response head: one parser for tollgate's outbound client
// (src/net/upstream.cc) and the load generator (tools/loadgen/http_response.cc). Each caller
// finds the end of the head itself (they buffer differently) and decides what the fields mean
// for it (the engine refuses any Transfer-Encoding; loadgen decodes chunked and skips 1xx).
// Header-only, so tools/loadgen still builds on its own. Pure: no allocation, no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "tollgate/common/ascii.h"

namespace tollgate::http {

/// What a response head says, as far as its framing and reuse go.
struct response_fields {
  int status = 0;
  int minor_version = 1;  ///< HTTP/1.0 or HTTP/1.1
  bool has_length = false;
  uint64_t content_length = 0;    ///< valid when has_length
  bool chunked = false;           ///< a Transfer-Encoding lists chunked
  bool other_coding = false;      ///< a Transfer-Encoding that does not
  bool close = false;             ///< Connection: close, or HTTP/1.0 without keep-alive
  bool has_retry_after = false;   ///< a non-empty Retry-After
  std::string_view content_type;  ///< a view into the head; empty when absent
};

enum class response_head_error { none, status_line, field_line, content_length };

namespace detail {

/// `HTTP/1.0` or `HTTP/1.1`, SP, three digits, then SP or the line's end.
inline bool parse_status_line(std::string_view line, response_fields& out) noexcept {
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1') ||
      line[8] != ' ' || (line.size() > 12 && line[12] != ' ')) {
    return false;
  }
  for (size_t i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') {
      return false;
    }
    out.status = out.status * 10 + (line[i] - '0');
  }
  out.minor_version = line[7] - '0';
  return true;
}

/// 1 to 18 digits, equal to an earlier Content-Length if there was one.
inline bool parse_content_length(std::string_view value, response_fields& out) noexcept {
  if (value.empty() || value.size() > 18) {
    return false;
  }
  uint64_t n = 0;
  for (const char c : value) {
    if (c < '0' || c > '9') {
      return false;
    }
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (out.has_length && out.content_length != n) {
    return false;
  }
  out.has_length = true;
  out.content_length = n;
  return true;
}

/// One field line's meaning for `out` (Connection's tokens go to saw_close/saw_keep_alive).
inline response_head_error apply_response_field(std::string_view name, std::string_view value,
                                                response_fields& out, bool& saw_close,
                                                bool& saw_keep_alive) noexcept {
  // Only five names matter; the length rules out most fields before any comparison.
  switch (name.size()) {
    case 14:
      if (ascii::iequals(name, "content-length") && !parse_content_length(value, out)) {
        return response_head_error::content_length;
      }
      break;
    case 17:
      if (ascii::iequals(name, "transfer-encoding")) {
        bool chunked = false;
        ascii::for_each_list_element(value, [&](std::string_view coding) {
          chunked = chunked || ascii::iequals(coding, "chunked");
          return true;
        });
        (chunked ? out.chunked : out.other_coding) = true;
      }
      break;
    case 10:
      if (ascii::iequals(name, "connection")) {
        ascii::for_each_list_element(value, [&](std::string_view token) {
          saw_close = saw_close || ascii::iequals(token, "close");
          saw_keep_alive = saw_keep_alive || ascii::iequals(token, "keep-alive");
          return true;
        });
      }
      break;
    case 12:
      if (ascii::iequals(name, "content-type")) {
        out.content_type = value;
      }
      break;
    case 11:
      if (ascii::iequals(name, "retry-after")) {
        out.has_retry_after = !value.empty();
      }
      break;
    default:
      break;
  }
  return response_head_error::none;
}

}  // namespace detail

/// Parses `block`: the status line and the field lines of a head, each ending in CRLF (the head
/// without its final empty line). Refuses a status line that is not `HTTP/1.0` or `HTTP/1.1`,
/// SP, three digits, then SP or the line's end; a field line with a bare CR or LF or no name
/// before its colon; a Content-Length that is not 1 to 18 digits, or two that differ.
inline response_head_error parse_response_fields(std::string_view block,
                                                 response_fields& out) noexcept {
  out = response_fields{};
  const size_t eol = block.find("\r\n");
  if (eol == std::string_view::npos || !detail::parse_status_line(block.substr(0, eol), out)) {
    return response_head_error::status_line;
  }
  bool saw_close = false;
  bool saw_keep_alive = false;
  // One memchr per line for its LF, one for a stray CR inside it.
  size_t pos = eol + 2;
  while (pos < block.size()) {
    const char* begin = block.data() + pos;
    const auto* lf = static_cast<const char*>(std::memchr(begin, '\n', block.size() - pos));
    if (lf == nullptr || lf == begin || lf[-1] != '\r') {
      return response_head_error::field_line;
    }
    const size_t len = static_cast<size_t>(lf - begin) - 1;
    pos += len + 2;
    if (std::memchr(begin, '\r', len) != nullptr) {
      return response_head_error::field_line;
    }
    const std::string_view field(begin, len);
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return response_head_error::field_line;
    }
    const std::string_view name = field.substr(0, colon);
    const std::string_view value = ascii::trim_ows(field.substr(colon + 1));
    const response_head_error e =
        detail::apply_response_field(name, value, out, saw_close, saw_keep_alive);
    if (e != response_head_error::none) {
      return e;
    }
  }
  out.close = saw_close || (out.minor_version == 0 && !saw_keep_alive);
  return response_head_error::none;
}

}  // namespace tollgate::http
