// Zero-copy HTTP/1.1 request parser (see parser.h for the contract).
//
// The parser is stateless: each call parses from buf[0] again, so the engine simply calls it
// after every read until it answers complete or error. Heads are small, so re-parsing costs
// little; a chunked body is validated in a first walk that hops over chunk data and only then,
// once complete, decoded in place by a second walk.
//
// Prefix consistency: every decision is taken on bytes that any longer input also contains,
// and the head is only ever scanned inside buf[0, min(len, max_header_bytes)), so an error a
// prefix reports is the error the whole input reports, and a valid request's prefixes are
// all incomplete. The table tests feed every input byte by byte to check exactly this.
#include "tollgate/http/parser.h"

#include <cstdint>
#include <cstring>

#include "http/ascii.h"

namespace tollgate::http {
namespace {

using ascii::iequals_lower;
using ascii::is_ows;
using detail::find_ctl;
using detail::is_target;
using detail::is_tchar;

enum class line_status { ok, more, bad };

/// Scans one `name ":" OWS value OWS CRLF` field line starting at p (which is not CR).
/// On ok, p is moved past the CRLF.
inline line_status scan_field_line(const char*& p, const char* end, std::string_view& name,
                                   std::string_view& value) noexcept {
  const char* n = p;
  const char* q = detail::skip_name_bytes(p, end);  // the common name bytes, 16 at a time
  while (q < end && is_tchar(*q)) {
    ++q;
  }
  if (q == end) {
    return line_status::more;
  }
  if (*q != ':' || q == n) {  // also refuses obs-fold, whitespace before ':' and bare LF
    return line_status::bad;
  }
  name = std::string_view(n, static_cast<size_t>(q - n));
  ++q;
  while (q < end && is_ows(*q)) {
    ++q;
  }
  const char* v = q;
  for (;;) {
    q = find_ctl(q, end);
    if (q == end) {
      return line_status::more;
    }
    if (*q == '\t') {
      ++q;
      continue;
    }
    if (*q != '\r') {
      return line_status::bad;  // NUL, bare LF, other controls, DEL
    }
    if (q + 1 == end) {
      return line_status::more;
    }
    if (q[1] != '\n') {
      return line_status::bad;  // bare CR
    }
    break;
  }
  const char* ve = q;
  while (ve > v && is_ows(ve[-1])) {
    --ve;
  }
  value = std::string_view(v, static_cast<size_t>(ve - v));
  p = q + 2;
  return line_status::ok;
}

inline size_t sat_add(size_t a, size_t b) noexcept { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

inline int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  const char l = static_cast<char>(c | 0x20);
  if (l >= 'a' && l <= 'f') {
    return l - 'a' + 10;
  }
  return -1;
}

/// What the header lines told us about framing and connection handling.
struct head_state {
  size_t content_length = 0;
  int host_count = 0;
  bool have_cl = false;
  bool have_te = false;
  bool conn_close = false;
  bool conn_keep_alive = false;
  bool expect_continue = false;
};

errc on_content_length(std::string_view v, const limits& lim, head_state& st) noexcept {
  if (st.have_te) {
    return errc::conflicting_length;
  }
  if (v.empty()) {
    return errc::bad_content_length;
  }
  size_t n = 0;
  bool over = false;
  for (const char c : v) {
    if (c < '0' || c > '9') {
      return errc::bad_content_length;
    }
    const auto d = static_cast<size_t>(c - '0');
    if (!over) {
      if (n > (SIZE_MAX - d) / 10) {
        over = true;
      } else {
        n = n * 10 + d;
        over = n > lim.max_body_bytes;
      }
    }
  }
  if (st.have_cl) {
    // Equal duplicates are harmless (RFC 9110 §8.6); differing ones are a smuggling attempt.
    if (over || n != st.content_length) {
      return errc::conflicting_length;
    }
    return errc::ok;
  }
  if (over) {
    return errc::body_too_large;
  }
  st.have_cl = true;
  st.content_length = n;
  return errc::ok;
}

errc on_transfer_encoding(std::string_view v, head_state& st) noexcept {
  if (st.have_cl) {
    return errc::conflicting_length;
  }
  if (st.have_te) {  // a second field would apply chunked twice or add a coding we lack
    return errc::bad_header;
  }
  int chunked = 0;
  errc e = errc::ok;
  ascii::for_each_list_element(v, [&](std::string_view el) {
    if (!iequals_lower(el, "chunked")) {
      e = errc::unsupported_encoding;
      return false;
    }
    if (++chunked > 1) {
      e = errc::bad_header;
      return false;
    }
    return true;
  });
  if (e != errc::ok) {
    return e;
  }
  if (chunked == 0) {
    return errc::bad_header;
  }
  st.have_te = true;
  return errc::ok;
}

void on_connection(std::string_view v, head_state& st) noexcept {
  ascii::for_each_list_element(v, [&](std::string_view el) {
    if (iequals_lower(el, "close")) {
      st.conn_close = true;
    } else if (iequals_lower(el, "keep-alive")) {
      st.conn_keep_alive = true;
    }
    return true;
  });
}

/// Interprets the few header fields that affect framing and the connection.
inline errc on_header(field f, std::string_view value, const limits& lim, head_state& st) noexcept {
  switch (f) {
    case field::host:
      if (++st.host_count > 1) {
        return errc::bad_header;
      }
      break;
    case field::expect:
      if (iequals_lower(value, "100-continue")) {
        st.expect_continue = true;
      }
      break;
    case field::connection:
      on_connection(value, st);
      break;
    case field::content_length:
      return on_content_length(value, lim, st);
    case field::transfer_encoding:
      return on_transfer_encoding(value, st);
    default:
      break;
  }
  return errc::ok;
}

inline parse_result fail(errc e) noexcept {
  parse_result r;
  r.status = parse_status::error;
  r.error = e;
  return r;
}

inline parse_result need_more(bool head_complete) noexcept {
  parse_result r;
  r.status = parse_status::incomplete;
  r.head_complete = head_complete;
  return r;
}

/// Walk 1 over a chunked body from q: each chunk's size line (extensions skipped) and CRLFs,
/// hopping over chunk data, up to and including the last chunk's line. On ok, q is past it and
/// `total` is the body's size; on bad, `e` says why.
inline line_status scan_chunks(const char*& q, const char* end, const limits& lim, size_t& total,
                               errc& e) noexcept {
  e = errc::bad_chunk;
  for (;;) {
    const char* s = q;
    size_t size = 0;
    const size_t remaining = lim.max_body_bytes - total;
    while (q < end) {
      const int d = hex_value(*q);
      if (d < 0) {
        break;
      }
      if (size > (remaining >> 4)) {
        e = errc::body_too_large;
        return line_status::bad;
      }
      size = size * 16 + static_cast<size_t>(d);
      if (size > remaining) {
        e = errc::body_too_large;
        return line_status::bad;
      }
      ++q;
    }
    if (q == end) {
      return line_status::more;
    }
    if (q == s) {
      return line_status::bad;
    }
    if (*q == ';' || is_ows(*q)) {  // chunk extensions (and BWS before them) are skipped
      for (;;) {
        if (q == end) {
          return line_status::more;
        }
        const auto c = static_cast<unsigned char>(*q);
        if (c == '\r') {
          break;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
          return line_status::bad;
        }
        ++q;
      }
    }
    if (*q != '\r') {
      return line_status::bad;
    }
    if (q + 1 == end) {
      return line_status::more;
    }
    if (q[1] != '\n') {
      return line_status::bad;
    }
    q += 2;
    if (size == 0) {
      return line_status::ok;
    }
    if (static_cast<size_t>(end - q) < size + 2) {
      return line_status::more;
    }
    if (q[size] != '\r' || q[size + 1] != '\n') {
      return line_status::bad;
    }
    total += size;
    q += size + 2;
  }
}

/// The trailer section after the last chunk, from q: validated like header lines, then
/// dropped. On ok, q is past its final CRLF.
inline line_status skip_trailers(const char*& q, const char* end) noexcept {
  for (;;) {
    if (q == end) {
      return line_status::more;
    }
    if (*q == '\r') {
      if (q + 1 == end) {
        return line_status::more;
      }
      if (q[1] != '\n') {
        return line_status::bad;
      }
      q += 2;
      return line_status::ok;
    }
    std::string_view name;
    std::string_view value;
    const line_status ls = scan_field_line(q, end, name, value);
    if (ls != line_status::ok) {
      return ls;
    }
  }
}

/// Walk 2: the framing from `body` on is known good; moves each chunk's data down next to the
/// previous one, so the decoded body starts at `body`.
inline void decode_chunks(char* body, const char* end) noexcept {
  char* dst = body;
  const char* r = body;
  for (;;) {
    size_t size = 0;
    for (int d = hex_value(*r); d >= 0; d = hex_value(*++r)) {
      size = size * 16 + static_cast<size_t>(d);
    }
    r = static_cast<const char*>(std::memchr(r, '\n', static_cast<size_t>(end - r))) + 1;
    if (size == 0) {
      break;
    }
    if (dst != r) {
      std::memmove(dst, r, size);
    }
    dst += size;
    r += size + 2;
  }
}

/// Validates the chunked body starting at buf[head_len] and, when it is complete, decodes it in
/// place right after the head.
parse_result parse_chunked(char* buf, size_t len, size_t head_len, const limits& lim,
                           request& out) noexcept {
  // Walk 1: validate framing without writing, so an incomplete body stays re-parseable.
  const size_t cap = sat_add(head_len, sat_add(lim.max_body_bytes, lim.max_header_bytes));
  const bool capped = len >= cap;
  const char* const end = buf + (capped ? cap : len);
  auto more = [&]() noexcept { return capped ? fail(errc::body_too_large) : need_more(true); };
  const char* q = buf + head_len;
  size_t total = 0;
  errc e = errc::ok;
  line_status ls = scan_chunks(q, end, lim, total, e);
  if (ls == line_status::ok) {
    ls = skip_trailers(q, end);
    e = errc::bad_header;
  }
  if (ls == line_status::more) {
    return more();
  }
  if (ls == line_status::bad) {
    return fail(e);
  }
  const size_t consumed = static_cast<size_t>(q - buf);
  decode_chunks(buf + head_len, end);
  out.body = std::string_view(buf + head_len, total);
  out.content_length = total;
  parse_result res;
  res.status = parse_status::complete;
  res.consumed = consumed;
  return res;
}

}  // namespace

// Here rather than in request.cc so that the parser's per-line call inlines.
field classify(std::string_view name) noexcept {
  // By length first: most names are then told apart by one compare, usually of one word. A
  // flat table written as a switch, so each compare is against a constant.
  switch (name.size()) {
    case 4:
      return iequals_lower(name, "host") ? field::host : field::other;
    case 6:
      if (iequals_lower(name, "accept")) {
        return field::accept;
      }
      if (iequals_lower(name, "origin")) {
        return field::origin;
      }
      return iequals_lower(name, "expect") ? field::expect : field::other;
    case 8:
      return iequals_lower(name, "mcp-name") ? field::mcp_name : field::other;
    case 9:
      return iequals_lower(name, "x-api-key") ? field::x_api_key : field::other;
    case 10:
      if (iequals_lower(name, "connection")) {
        return field::connection;
      }
      return iequals_lower(name, "mcp-method") ? field::mcp_method : field::other;
    case 12:
      return iequals_lower(name, "content-type") ? field::content_type : field::other;
    case 13:
      return iequals_lower(name, "authorization") ? field::authorization : field::other;
    case 14:
      if (iequals_lower(name, "content-length")) {
        return field::content_length;
      }
      return iequals_lower(name, "mcp-session-id") ? field::mcp_session_id : field::other;
    case 17:
      if (iequals_lower(name, "transfer-encoding")) {
        return field::transfer_encoding;
      }
      return iequals_lower(name, "tollgate-deadline") ? field::tollgate_deadline : field::other;
    case 20:
      return iequals_lower(name, "mcp-protocol-version") ? field::mcp_protocol_version
                                                         : field::other;
    default:
      return field::other;
  }
}

namespace {

/// RFC 9112 §2.2: skips empty lines before the request line.
inline line_status skip_empty_lines(const char*& p, const char* end) noexcept {
  for (;;) {
    if (p == end) {
      return line_status::more;
    }
    if (*p != '\r') {
      return line_status::ok;
    }
    if (p + 1 == end) {
      return line_status::more;
    }
    if (p[1] != '\n') {
      return line_status::bad;
    }
    p += 2;
  }
}

/// An absolute-form target: "http" or "https", "://", a non-empty authority, then the
/// origin-form's path and query, to which `target` is cut (what the request is about: the
/// authority names this server; Host is still required). False: malformed.
inline bool to_origin_form(std::string_view& target) noexcept {
  const std::string_view tv = target;
  const size_t colon = tv.find("://");
  if (colon == std::string_view::npos || !(ascii::iequals(tv.substr(0, colon), "http") ||
                                           ascii::iequals(tv.substr(0, colon), "https"))) {
    return false;
  }
  const size_t rest = tv.find_first_of("/?", colon + 3);
  if (rest == colon + 3 || tv.size() == colon + 3) {
    return false;  // no authority
  }
  if (rest == std::string_view::npos || tv[rest] != '/') {
    // No path ("http://host", "http://host?q"): clients send "/" (RFC 9112 §3.2.1), and a
    // target that is not a view of the request's own bytes is not worth its exceptions.
    return false;
  }
  target = tv.substr(rest);
  return true;
}

/// `method SP request-target SP HTTP-version CRLF` from p; on ok, p is past the CRLF. On bad,
/// `e` says why.
inline line_status scan_request_line(const char*& p, const char* end, request& out,
                                     errc& e) noexcept {
  e = errc::bad_request_line;
  // method SP
  const char* m = p;
  while (p < end && is_tchar(*p)) {
    ++p;
  }
  if (p == end) {
    return line_status::more;
  }
  if (*p != ' ' || p == m) {
    return line_status::bad;
  }
  out.method = std::string_view(m, static_cast<size_t>(p - m));
  ++p;

  // request-target SP: origin-form ("/..."), asterisk-form ("*", OPTIONS only) or
  // absolute-form ("http://host/...", which RFC 9112 §3.2.2 says a server MUST accept).
  const char* t = p;
  const bool absolute = p < end && (*p == 'h' || *p == 'H');
  if (p < end && *p != '/' && *p != '*' && !absolute) {
    return line_status::bad;
  }
  while (p < end && is_target(*p)) {
    ++p;
  }
  if (p == end) {
    return line_status::more;
  }
  if (*p != ' ' || p == t) {
    return line_status::bad;
  }
  out.target = std::string_view(t, static_cast<size_t>(p - t));
  if (absolute && !to_origin_form(out.target)) {
    return line_status::bad;
  }
  ++p;

  // HTTP-version CRLF
  if (end - p < 10) {
    return line_status::more;
  }
  if (std::memcmp(p, "HTTP/", 5) != 0 || p[5] < '0' || p[5] > '9' || p[6] != '.' || p[7] < '0' ||
      p[7] > '9' || p[8] != '\r' || p[9] != '\n') {
    return line_status::bad;
  }
  if (p[5] != '1') {
    e = errc::unsupported_version;
    return line_status::bad;
  }
  // Checked after the version so an HTTP/2 preface ("PRI * HTTP/2.0") answers 505.
  if (*t == '*' && (out.target.size() != 1 || out.method != "OPTIONS")) {
    return line_status::bad;
  }
  // RFC 9110 §2.5: a higher minor version of a major we speak is handled as our highest, 1.1.
  out.version_minor = p[7] == '0' ? 0 : 1;
  p += 10;
  return line_status::ok;
}

/// The header fields from p up to and including the empty line; on ok, p is past it. Each
/// field is stored in `out` and the framing ones interpreted into `st`. On bad, `e` says why.
inline line_status scan_header_fields(const char*& p, const char* end, const limits& lim,
                                      request& out, head_state& st, errc& e) noexcept {
  e = errc::bad_header;
  const size_t max_count = lim.max_header_count < max_headers ? lim.max_header_count : max_headers;
  for (;;) {
    if (p == end) {
      return line_status::more;
    }
    if (*p == '\r') {
      if (p + 1 == end) {
        return line_status::more;
      }
      if (p[1] != '\n') {
        return line_status::bad;
      }
      p += 2;
      return line_status::ok;
    }
    if (out.num_headers == max_count) {
      e = errc::too_many_headers;
      return line_status::bad;
    }
    header& h = out.headers[out.num_headers];
    const line_status ls = scan_field_line(p, end, h.name, h.value);
    if (ls != line_status::ok) {
      return ls;
    }
    const field f = classify(h.name);
    ++out.num_headers;
    if (f != field::other) {
      uint8_t& first = out.first_line[static_cast<size_t>(f)];
      if (first == 0) {
        first = static_cast<uint8_t>(out.num_headers);
      }
    }
    e = on_header(f, h.value, lim, st);
    if (e != errc::ok) {
      return line_status::bad;
    }
    e = errc::bad_header;
  }
}

/// Checks that need the whole head, then what it says about the connection, the framing and
/// the target's path and query.
inline errc apply_head(const head_state& st, const limits& lim, request& out) noexcept {
  if (out.version_minor == 1 && lim.require_host && st.host_count != 1) {
    return errc::bad_header;
  }
  if (out.version_minor == 0 && st.have_te) {
    // RFC 9112 §6.1: HTTP/1.0 with Transfer-Encoding has faulty framing.
    return errc::bad_header;
  }
  out.keep_alive = !st.conn_close && (out.version_minor == 1 || st.conn_keep_alive);
  out.expect_continue = st.expect_continue && out.version_minor == 1;  // 1.0: must ignore
  out.chunked = st.have_te;
  out.content_length = st.content_length;
  const size_t qmark = out.target.find('?');
  if (qmark == std::string_view::npos) {
    out.path = out.target;
  } else {
    out.path = out.target.substr(0, qmark);
    out.query = out.target.substr(qmark + 1);
  }
  return errc::ok;
}

}  // namespace

parse_result parse_request(char* buf, size_t len, const limits& lim, request& out) noexcept {
  out.method = out.target = out.path = out.query = out.body = std::string_view();
  out.version_minor = 1;
  out.num_headers = 0;
  std::memset(out.first_line, 0, sizeof out.first_line);
  out.keep_alive = true;
  out.expect_continue = false;
  out.chunked = false;
  out.content_length = 0;

  // The head is scanned only inside this window; running out of it means 431.
  const bool capped = len >= lim.max_header_bytes;
  const char* const end = buf + (capped ? lim.max_header_bytes : len);
  const char* p = buf;
  head_state st;
  errc e = errc::bad_request_line;
  line_status ls = skip_empty_lines(p, end);
  if (ls == line_status::ok) {
    ls = scan_request_line(p, end, out, e);
  }
  if (ls == line_status::ok) {
    ls = scan_header_fields(p, end, lim, out, st, e);
  }
  if (ls == line_status::more) {
    return capped ? fail(errc::header_too_large) : need_more(false);
  }
  if (ls == line_status::bad) {
    return fail(e);
  }
  const auto head_len = static_cast<size_t>(p - buf);
  if (e = apply_head(st, lim, out); e != errc::ok) {
    return fail(e);
  }

  parse_result r;
  if (st.have_te) {
    r = parse_chunked(buf, len, head_len, lim, out);
  } else if (len - head_len < st.content_length) {
    r = need_more(true);
  } else {
    out.body = std::string_view(buf + head_len, st.content_length);
    r.status = parse_status::complete;
    r.consumed = head_len + st.content_length;
  }
  if (r.status != parse_status::error) {
    r.head_bytes = head_len;
  }
  return r;
}

}  // namespace tollgate::http
