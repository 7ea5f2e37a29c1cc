// Fuzz target for whole requests: raw HTTP bytes through the real parser and one core_handler
// (routing, key check, rate limit, MCP, REST, ops; tests/app/handler_world.h), so every place a
// client's bytes can reach a response is reached. Every answer must be one well-framed
// HTTP/1.1 response: a status line, no header twice, a Content-Length equal to its body (HEAD:
// no body), and a body that is valid JSON when declared application/json. Never a crash.
//
// Byte 0 of an input: bits 0-1 add a key header after the request line (1: the roomy key as
// Bearer, 2: the tight key as X-API-Key, 3: the suspended account's key); bits 2-7 advance the
// clock by that many 100 ms (so the tight key's burst of 2 and its quota are both reached).
// The rest is the request as sent.
#include <simdjson.h>
#include <strings.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "app/handler_world.h"

namespace {

void require(bool ok) {
  if (!ok) {
    __builtin_trap();
  }
}

void require_json(std::string_view s) {
  static simdjson::dom::parser p;
  simdjson::dom::element e;
  // NUMBER_ERROR: simdjson's DOM refuses integers beyond 64 bits, which JSON allows (an id is
  // echoed as the client wrote it).
  auto err = p.parse(s.data(), s.size()).get(e);
  require(!err || err == simdjson::NUMBER_ERROR);
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) {
    c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  }
  return r;
}

void check(std::string_view r, bool head_request) {
  const size_t end = r.find("\r\n\r\n");
  require(end != std::string_view::npos && r.substr(0, 9) == "HTTP/1.1 ");
  std::string names[64];
  size_t n = 0;
  std::string content_type;
  std::string content_length;
  bool has_length = false;
  size_t at = r.find("\r\n") + 2;
  while (at < end + 2) {
    const size_t eol = r.find("\r\n", at);
    const std::string_view line = r.substr(at, eol - at);
    const size_t colon = line.find(':');
    require(colon != std::string_view::npos && colon > 0);
    std::string name = lower(line.substr(0, colon));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') {
      value.remove_prefix(1);
    }
    for (size_t i = 0; i < n; ++i) {
      require(names[i] != name);  // no header twice
    }
    require(n < 64);
    if (name == "content-type") {
      content_type = std::string(value);
    } else if (name == "content-length") {
      content_length = std::string(value);
      has_length = true;
    }
    names[n++] = std::move(name);
    at = eol + 2;
  }
  const std::string_view body = r.substr(end + 4);
  const int status = (r[9] - '0') * 100 + (r[10] - '0') * 10 + (r[11] - '0');
  if (status == 204 || status == 304 || status < 200) {
    require(body.empty() && !has_length);
    return;
  }
  require(has_length);
  if (head_request) {
    require(body.empty());
    return;
  }
  require(content_length == std::to_string(body.size()));
  if (content_type.rfind("application/json", 0) == 0) {
    require_json(body);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tollgate::app::test::handler_world w;
  static int64_t now = w.start_ns();
  if (size < 1 || !w.ok()) {
    return 0;
  }
  const uint8_t sel = data[0];
  now += static_cast<int64_t>(sel >> 2) * 100000000;
  std::string raw(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((sel & 3) != 0) {
    const size_t eol = raw.find("\r\n");
    if (eol != std::string::npos) {
      std::string line;
      switch (sel & 3) {
        case 1:
          line = "Authorization: Bearer " + w.roomy();
          break;
        case 2:
          line = "X-API-Key: " + w.tight();
          break;
        default:
          line = "Authorization: Bearer " + w.suspended();
          break;
      }
      raw.insert(eol + 2, line + "\r\n");
    }
  }
  const std::string out = w.respond(std::move(raw), now);
  if (!out.empty()) {
    check(out, w.last_method() == "HEAD");
  }
  return 0;
}
