// http::errc descriptions and request header lookups.
#include "tollgate/http/request.h"

#include "tollgate/common/ascii.h"

namespace tollgate::http {

int status_of(errc e) noexcept {
  switch (e) {
    case errc::ok:
      return 200;
    case errc::bad_request_line:
    case errc::bad_header:
    case errc::conflicting_length:
    case errc::bad_content_length:
    case errc::bad_chunk:
      return 400;
    case errc::too_many_headers:
    case errc::header_too_large:
      return 431;
    case errc::body_too_large:
      return 413;
    case errc::unsupported_encoding:
      return 501;
    case errc::unsupported_version:
      return 505;
  }
  return 400;
}

std::string_view message(errc e) noexcept {
  switch (e) {
    case errc::ok:
      return "ok";
    case errc::bad_request_line:
      return "malformed request line";
    case errc::bad_header:
      return "malformed header field";
    case errc::too_many_headers:
      return "too many header fields";
    case errc::header_too_large:
      return "request header section too large";
    case errc::body_too_large:
      return "request body too large";
    case errc::conflicting_length:
      return "conflicting Content-Length or Transfer-Encoding";
    case errc::bad_content_length:
      return "malformed Content-Length";
    case errc::bad_chunk:
      return "malformed chunked body";
    case errc::unsupported_encoding:
      return "unsupported Transfer-Encoding";
    case errc::unsupported_version:
      return "HTTP version not supported";
  }
  return "unknown error";
}

std::string_view request::header_value(std::string_view name) const noexcept {
  for (size_t i = 0; i < num_headers; ++i) {
    if (ascii::iequals(headers[i].name, name)) {
      return headers[i].value;
    }
  }
  return {};
}

bool request::has_header(std::string_view name) const noexcept {
  for (size_t i = 0; i < num_headers; ++i) {
    if (ascii::iequals(headers[i].name, name)) {
      return true;
    }
  }
  return false;
}

bool request::add_header(std::string_view name, std::string_view value) noexcept {
  if (num_headers == max_headers) {
    return false;
  }
  const field f = classify(name);
  if (f != field::other && first_line[static_cast<size_t>(f)] == 0) {
    first_line[static_cast<size_t>(f)] = static_cast<uint8_t>(num_headers + 1);
  }
  headers[num_headers++] = header{name, value};
  return true;
}

}  // namespace tollgate::http
