// http::errc descriptions and request header lookups.
#include "tollgate/http/request.h"

#include <iterator>

#include "tollgate/common/ascii.h"

namespace tollgate::http {
namespace {

/// What each errc means to a client: its status and its message. One row per errc, in the
/// order errc declares them.
struct errc_row {
  int status;
  std::string_view message;
};
constexpr errc_row kErrcRows[] = {
    {200, "ok"},                                               // ok
    {400, "malformed request line"},                           // bad_request_line
    {400, "malformed header field"},                           // bad_header
    {431, "too many header fields"},                           // too_many_headers
    {431, "request header section too large"},                 // header_too_large
    {413, "request body too large"},                           // body_too_large
    {400, "conflicting Content-Length or Transfer-Encoding"},  // conflicting_length
    {400, "malformed Content-Length"},                         // bad_content_length
    {400, "malformed chunked body"},                           // bad_chunk
    {501, "unsupported Transfer-Encoding"},                    // unsupported_encoding
    {505, "HTTP version not supported"},                       // unsupported_version
};
static_assert(std::size(kErrcRows) == static_cast<size_t>(errc::unsupported_version) + 1,
              "one row per errc");

// The first field named `name` (any case), or null.
const header* find_header(const request& r, std::string_view name) noexcept {
  for (size_t i = 0; i < r.num_headers; ++i) {
    if (ascii::iequals(r.headers[i].name, name)) {
      return &r.headers[i];
    }
  }
  return nullptr;
}

}  // namespace

int status_of(errc e) noexcept {
  const auto i = static_cast<size_t>(e);
  return i < std::size(kErrcRows) ? kErrcRows[i].status : 400;
}

std::string_view message(errc e) noexcept {
  const auto i = static_cast<size_t>(e);
  return i < std::size(kErrcRows) ? kErrcRows[i].message : "unknown error";
}

std::string_view request::header_value(std::string_view name) const noexcept {
  const header* h = find_header(*this, name);
  return h != nullptr ? h->value : std::string_view();
}

bool request::has_header(std::string_view name) const noexcept {
  return find_header(*this, name) != nullptr;
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

request_copy::request_copy(const request& r) {
  // (path and query counted too: a request built by hand may hold them apart from its target)
  size_t n = r.method.size() + r.target.size() + r.path.size() + r.query.size() + r.body.size();
  for (size_t i = 0; i < r.num_headers; ++i) {
    n += r.headers[i].name.size() + r.headers[i].value.size();
  }
  bytes_.reserve(n);  // never grows below: the views taken stay valid
  auto keep = [&](std::string_view v) {
    const size_t at = bytes_.size();
    bytes_.append(v);
    return std::string_view(bytes_.data() + at, v.size());
  };
  req_.method = keep(r.method);
  req_.target = keep(r.target);
  // A view inside the target (the path, the query) keeps its place in the copy's target.
  auto within = [&](std::string_view part) {
    const std::string_view whole = r.target;
    if (part.empty() || part.data() < whole.data() ||
        part.data() + part.size() > whole.data() + whole.size()) {
      return keep(part);
    }
    return req_.target.substr(static_cast<size_t>(part.data() - whole.data()), part.size());
  };
  req_.path = within(r.path);
  req_.query = within(r.query);
  for (size_t i = 0; i < r.num_headers; ++i) {
    (void)req_.add_header(keep(r.headers[i].name), keep(r.headers[i].value));
  }
  req_.body = keep(r.body);
  req_.version_minor = r.version_minor;
  req_.keep_alive = r.keep_alive;
  req_.expect_continue = r.expect_continue;
  req_.chunked = r.chunked;
  req_.content_length = r.content_length;
}

}  // namespace tollgate::http
