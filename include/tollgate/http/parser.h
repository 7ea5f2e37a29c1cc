// Zero-copy HTTP/1.1 request parser (picohttpparser-style tri-state).
//
// parse_request() looks at buf[0, len) and either
//   - fills `out` and returns complete with `consumed` = bytes of this request (head + body as
//     framed on the wire); the caller consumes exactly that many bytes afterwards,
//   - returns incomplete (feed more bytes and call again from the same start), or
//   - returns error with the reason; the connection answers status_of(err) and closes.
// It never reads outside buf[0, len). For chunked bodies it decodes in place: the decoded body
// is moved to directly follow the header block inside buf (so buf must be writable), and
// out.body views it; calling again on the same bytes after that is not supported.
// `head_complete` (set on incomplete when the head has been parsed but the body has not fully
// arrived; `out` then holds the parsed head) lets the engine send "100 Continue" for an
// `Expect: 100-continue` request before the body arrives.
//
// Strictness (RFC 9112): request line `token SP origin-form|"*" SP HTTP/1.x CRLF` (leading empty
// lines are skipped); header names are tokens directly followed by ':'; values lose their
// surrounding OWS; obs-fold, NUL, DEL, bare CR and bare LF are refused; an HTTP/1.1 request
// needs exactly one Host (limits::require_host). Every prefix of a valid request returns
// incomplete, and an error found in a prefix is the error the whole input gets.
#pragma once

#include <cstddef>

#include "tollgate/http/request.h"

namespace tollgate::http {

enum class parse_status { complete, incomplete, error };

struct parse_result {
  parse_status status = parse_status::incomplete;
  size_t consumed = 0;         ///< complete: bytes this request occupied in buf
  errc error = errc::ok;       ///< error: the reason
  bool head_complete = false;  ///< incomplete: the head was parsed, the body is still arriving
  /// complete, or incomplete with head_complete: bytes of the head (request line, fields and
  /// the empty line, plus any empty lines skipped before it). With content_length this tells
  /// how many bytes the whole request needs: head_bytes + content_length (not for chunked).
  size_t head_bytes = 0;
};

parse_result parse_request(char* buf, size_t len, const limits& lim, request& out) noexcept;

}  // namespace tollgate::http
