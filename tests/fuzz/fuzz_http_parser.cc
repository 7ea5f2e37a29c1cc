// libFuzzer target for http::parse_request. Beyond "no crash, no sanitizer report" it checks
// the parser's invariants on every input:
//   - complete: 0 < consumed <= len, every view lies inside the buffer (the body inside the
//     request), path/query split the target, a Content-Length body has exactly that size, and
//     re-parsing exactly the consumed bytes gives the same answer while one byte fewer is
//     incomplete (framing is self-delimiting);
//   - error: the errc has a 4xx/5xx status, and a prefix never reports a different error;
//   - pipelined remainders are parsed in turn.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "tollgate/http/parser.h"

namespace {

using tollgate::http::errc;
using tollgate::http::limits;
using tollgate::http::parse_request;
using tollgate::http::parse_result;
using tollgate::http::parse_status;
using tollgate::http::request;

void require(bool cond) {
  if (!cond) {
    __builtin_trap();
  }
}

bool inside(std::string_view v, const char* lo, const char* hi) {
  return v.empty() || (v.data() >= lo && v.data() + v.size() <= hi);
}

// Parses a fresh, exactly sized heap copy of data[0, n) (chunked decoding writes into it).
parse_result parse_copy(const uint8_t* data, size_t n, const limits& lim, request& req) {
  char* buf = static_cast<char*>(std::malloc(n ? n : 1));
  std::memcpy(buf, data, n);
  const parse_result r = parse_request(buf, n, lim, req);
  std::free(buf);  // views are not used after this
  return r;
}

void check_one(const uint8_t* data, size_t size, const limits& lim, int depth) {
  char* buf = static_cast<char*>(std::malloc(size ? size : 1));
  std::memcpy(buf, data, size);
  request req;
  const parse_result r = parse_request(buf, size, lim, req);
  const char* lo = buf;
  const char* hi = buf + size;
  switch (r.status) {
    case parse_status::complete: {
      require(r.consumed > 0 && r.consumed <= size);
      require(r.error == errc::ok);
      const char* end = buf + r.consumed;
      require(inside(req.method, lo, end) && !req.method.empty());
      require(inside(req.target, lo, end) && !req.target.empty());
      require(inside(req.path, lo, end) && inside(req.query, lo, end));
      require(req.path.data() == req.target.data());
      require(req.num_headers <= tollgate::http::max_headers);
      for (size_t i = 0; i < req.num_headers; ++i) {
        require(inside(req.headers[i].name, lo, end) && !req.headers[i].name.empty());
        require(inside(req.headers[i].value, lo, end));
      }
      require(inside(req.body, lo, end));
      require(req.body.size() <= lim.max_body_bytes);
      require(req.body.size() == req.content_length);
      require(req.version_minor == 0 || req.version_minor == 1);
      // Exactly the consumed bytes frame the same request; one byte fewer does not.
      request again;
      const parse_result exact = parse_copy(data, r.consumed, lim, again);
      require(exact.status == parse_status::complete && exact.consumed == r.consumed);
      const parse_result shorter = parse_copy(data, r.consumed - 1, lim, again);
      require(shorter.status == parse_status::incomplete);
      if (depth < 4 && r.consumed < size) {
        std::free(buf);
        check_one(data + r.consumed, size - r.consumed, lim, depth + 1);
        return;
      }
      break;
    }
    case parse_status::error: {
      const int st = tollgate::http::status_of(r.error);
      require(r.error != errc::ok && st >= 400 && st <= 505);
      require(!tollgate::http::message(r.error).empty());
      request again;
      const parse_result half = parse_copy(data, size / 2, lim, again);
      require(half.status == parse_status::incomplete ||
              (half.status == parse_status::error && half.error == r.error));
      break;
    }
    case parse_status::incomplete:
      require(r.error == errc::ok);
      if (r.head_complete) {
        require(inside(req.method, lo, hi) && inside(req.target, lo, hi));
      }
      break;
  }
  std::free(buf);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_one(data, size, limits{}, 0);
  limits small;
  small.max_header_bytes = 200;
  small.max_body_bytes = 40;
  small.max_header_count = 6;
  small.require_host = false;
  check_one(data, size, small, 0);
  return 0;
}
