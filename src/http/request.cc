// http::errc descriptions and request header lookups.
#include "tollgate/http/request.h"

#include "http/ascii.h"

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
    if (detail::iequals(headers[i].name, name)) {
      return headers[i].value;
    }
  }
  return {};
}

bool request::has_header(std::string_view name) const noexcept {
  for (size_t i = 0; i < num_headers; ++i) {
    if (detail::iequals(headers[i].name, name)) {
      return true;
    }
  }
  return false;
}

void request::find_headers(const std::string_view* lower_names, size_t count,
                           const header** found) const noexcept {
  // Bit L of `lengths`: some wanted name is L bytes long (names of 64 bytes or more always
  // take the slow compare). Most headers are then skipped by one shift and test.
  uint64_t lengths = 0;
  for (size_t j = 0; j < count; ++j) {
    found[j] = nullptr;
    lengths |= lower_names[j].size() < 64 ? uint64_t{1} << lower_names[j].size() : ~uint64_t{0};
  }
  size_t left = count;
  for (size_t i = 0; i < num_headers && left > 0; ++i) {
    const std::string_view n = headers[i].name;
    if (n.size() < 64 && ((lengths >> n.size()) & 1) == 0) {
      continue;
    }
    for (size_t j = 0; j < count; ++j) {
      if (found[j] == nullptr && n.size() == lower_names[j].size() &&
          detail::iequals_lower(n, lower_names[j])) {
        found[j] = &headers[i];
        --left;
        break;
      }
    }
  }
}

}  // namespace tollgate::http
