// HTTP/1.1 response writer (see response.h).
#include "tollgate/http/response.h"

#include <cstring>
#include <ctime>

#include "tollgate/common/assert.h"
#include "tollgate/common/content_length.h"

namespace tollgate::http {
namespace {

constexpr std::string_view kCrlf = "\r\n";

/// Writes the decimal digits of v ending just before `end`; returns the first digit.
inline char* format_decimal_backwards(char* end, uint64_t v) noexcept {
  do {
    *--end = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  return end;
}

inline void append_raw(out_buffer& out, std::string_view s) { out.append(s.data(), s.size()); }

void write_head_common(out_buffer& out, const response_head& h) {
  write_status_line(out, h.status, 1);
  append_raw(out, h.date_line);
  if (!h.content_type.empty()) {
    write_header(out, "Content-Type", h.content_type);
  }
  append_raw(out, h.extra_headers);
  if (h.close) {
    append_raw(out, "Connection: close\r\n");
  } else if (h.keep_alive_http10) {
    append_raw(out, "Connection: keep-alive\r\n");
  }
}

}  // namespace

// A flat table, one case per status we may send (hence over 80 lines); unknown ones get "".
std::string_view reason_phrase(int status) noexcept {
  switch (status) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 303:
      return "See Other";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 308:
      return "Permanent Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 402:
      return "Payment Required";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 411:
      return "Length Required";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Content";
    case 426:
      return "Upgrade Required";
    case 428:
      return "Precondition Required";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

void write_status_line(out_buffer& out, int status, int version_minor) {
  TOLLGATE_ASSERT(status >= 100 && status <= 999);
  const std::string_view reason = reason_phrase(status);
  char* p = out.prepare(9 + 3 + 1 + reason.size() + 2);
  std::memcpy(p, version_minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ", 9);
  const auto s = static_cast<unsigned>(status);
  p[9] = static_cast<char>('0' + s / 100 % 10);
  p[10] = static_cast<char>('0' + s / 10 % 10);
  p[11] = static_cast<char>('0' + s % 10);
  p[12] = ' ';
  std::memcpy(p + 13, reason.data(), reason.size());
  std::memcpy(p + 13 + reason.size(), "\r\n", 2);
  out.commit(15 + reason.size());
}

void write_header(out_buffer& out, std::string_view name, std::string_view value) {
  char* p = out.prepare(name.size() + 2 + value.size() + 2);
  std::memcpy(p, name.data(), name.size());
  p += name.size();
  *p++ = ':';
  *p++ = ' ';
  std::memcpy(p, value.data(), value.size());
  p += value.size();
  *p++ = '\r';
  *p = '\n';
  out.commit(name.size() + value.size() + 4);
}

void write_header(out_buffer& out, std::string_view name, uint64_t value) {
  char digits[20];
  char* first = format_decimal_backwards(digits + sizeof digits, value);
  write_header(out, name,
               std::string_view(first, static_cast<size_t>(digits + sizeof digits - first)));
}

void append_decimal(out_buffer& out, uint64_t v) {
  char digits[20];
  char* first = format_decimal_backwards(digits + sizeof digits, v);
  out.append(first, static_cast<size_t>(digits + sizeof digits - first));
}

pending_response begin_response(out_buffer& out, const response_head& head) {
  write_head_common(out, head);
  pending_response p;
  p.length_slot = reserve_content_length(out, content_length_width, "\r\n\r\n").at;
  p.body_start = out.size();
  p.omit_body = head.omit_body;
  return p;
}

void end_response(out_buffer& out, const pending_response& p) noexcept {
  patch_content_length(out, content_length_field{p.length_slot, content_length_width},
                       out.size() - p.body_start);
  if (p.omit_body) {
    out.resize(p.body_start);  // shrinking never allocates
  }
}

void write_response(out_buffer& out, const response_head& head, std::string_view body) {
  write_head_common(out, head);
  if (has_no_body(head.status)) {
    append_raw(out, kCrlf);
    return;
  }
  write_header(out, "Content-Length", static_cast<uint64_t>(body.size()));
  append_raw(out, kCrlf);
  if (!head.omit_body) {
    append_raw(out, body);
  }
}

void write_simple_response(out_buffer& out, int status, std::string_view content_type,
                           std::string_view body, std::string_view extra_headers_block,
                           bool close) {
  response_head h;
  h.status = status;
  h.content_type = content_type;
  h.extra_headers = extra_headers_block;
  h.close = close;
  write_response(out, h, body);
}

void write_error_response(out_buffer& out, errc e) {
  response_head h;
  h.status = status_of(e);
  h.content_type = "text/plain; charset=utf-8";
  h.close = true;
  const pending_response p = begin_response(out, h);
  append_raw(out, message(e));
  append_raw(out, "\n");
  end_response(out, p);
}

void format_imf_date(int64_t unix_seconds, char out[29]) noexcept {
  static constexpr char kDays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr char kMonths[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const auto t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  auto two = [](char* p, int v) {
    p[0] = static_cast<char>('0' + v / 10 % 10);
    p[1] = static_cast<char>('0' + v % 10);
  };
  std::memcpy(out, kDays[tm.tm_wday % 7], 3);
  out[3] = ',';
  out[4] = ' ';
  two(out + 5, tm.tm_mday);
  out[7] = ' ';
  std::memcpy(out + 8, kMonths[tm.tm_mon % 12], 3);
  out[11] = ' ';
  const int year = tm.tm_year + 1900;
  two(out + 12, year / 100);
  two(out + 14, year % 100);
  out[16] = ' ';
  two(out + 17, tm.tm_hour);
  out[19] = ':';
  two(out + 20, tm.tm_min);
  out[22] = ':';
  two(out + 23, tm.tm_sec);
  std::memcpy(out + 25, " GMT", 4);
}

date_cache::date_cache() noexcept {
  std::memcpy(line_, "Date: ", 6);
  std::memcpy(line_ + 35, "\r\n", 2);
  update(0);
}

bool date_cache::update(int64_t now_ns) noexcept {
  int64_t sec = now_ns / 1'000'000'000;
  if (now_ns < 0 && sec * 1'000'000'000 != now_ns) {
    --sec;  // floor for times before 1970
  }
  if (sec == second_) {
    return false;
  }
  second_ = sec;
  format_imf_date(sec, line_ + 6);
  return true;
}

}  // namespace tollgate::http
