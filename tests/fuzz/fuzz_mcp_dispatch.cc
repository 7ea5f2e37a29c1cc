// Fuzz target for the JSON-RPC/MCP dispatcher: arbitrary bodies (byte 0 picks the revision
// header and transport) must always produce one well-framed HTTP response whose body, when
// present, is valid JSON, and stdio must produce valid JSON or nothing. Never a crash.
#include <simdjson.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tollgate/envelope/envelope.h"
#include "tollgate/mcp/endpoint.h"

namespace {

using namespace tollgate;

class echo_tool : public mcp::tool {
 public:
  mcp::tool_result call(const mcp::arguments& a, json_out& out, mcp::call_context&) override {
    if (a[0].str == "fail") {
      out.raw("{\"partial\":");
      return mcp::tool_result::failure(
          {envelope::tool_error_code::unavailable, -1, -1, -1, -1, {}});
    }
    out.raw("{\"q\":");
    out.string(a[0].str);
    out.raw(",\"tags\":[");
    for (size_t i = 0; i < a[2].num_items; ++i) {
      if (i) out.raw(",");
      out.string(a[2].items[i]);
    }
    out.raw("]}");
    return mcp::tool_result::success();
  }
};

class fuzz_host : public mcp::host, public mcp::rate_charge {
 public:
  int n = 0;
  void write_headers(out_buffer& out) override { out.append("X-Quota-Used: 1\r\n"); }
  mcp::admission admit(std::string_view, std::string_view) override {
    ++n;
    mcp::admission a;
    if (n % 4 != 0) {  // admitted, then suspended, quota_exceeded, rate_limited in turn
      a.refusal = static_cast<envelope::tool_error_code>(n % 4 - 1);
    }
    a.retry_after_secs = 5;
    a.quota_limit = 10;
    a.quota_used = 10;
    a.quota_remaining = 0;
    return a;
  }
  void settle(bool) override {}
  mcp::admission rate_check() override { return {}; }
  mcp::admission charge_extra() override { return {}; }
  void refund() override {}
};

struct world {
  envelope::cache env{envelope::server_identity{}};
  mcp::registry tools;
  std::unique_ptr<mcp::endpoint> ep;
  world() {
    mcp::tool_def t;
    t.name = "search_stories";
    t.description = "search";
    t.args = {
        {"query", mcp::arg_type::string, "q", true, 1, 50, true, true, {}, false, 0, {}},
        {"limit", mcp::arg_type::integer, "n", false, 1, 50, true, true, {}, true, 10, {}},
        {"tags", mcp::arg_type::string_array, "t", false, 0, 4, false, true, {}, false, 0, {}},
        {"sort",
         mcp::arg_type::enumeration,
         "s",
         false,
         0,
         0,
         false,
         false,
         {"a", "b"},
         true,
         0,
         "a"},
    };
    t.impl = std::make_shared<echo_tool>();
    tools.add(std::move(t));
    tools.finish();
    mcp::endpoint_options o;
    o.max_body_bytes = 64 * 1024;
    ep = std::make_unique<mcp::endpoint>(tools, env, o);
  }
};

void require_json(std::string_view s) {
  static simdjson::dom::parser p;
  simdjson::dom::element e;
  // NUMBER_ERROR: simdjson's DOM refuses integers beyond 64 bits, which JSON allows (an id
  // echoed raw may be one).
  auto err = p.parse(s.data(), s.size()).get(e);
  if (err && err != simdjson::NUMBER_ERROR) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static world w;
  if (size < 1) {
    return 0;
  }
  const uint8_t sel = data[0];
  std::string padded(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t body_len = padded.size();
  padded.append(mcp::body_padding, '\0');
  fuzz_host h;
  w.ep->lend(nullptr, &h);
  out_buffer out;
  if (sel & 0x80) {
    w.ep->handle_message(std::string_view(padded.data(), body_len), h, out);
    if (!out.empty()) {
      require_json(out.view());
    }
    return 0;
  }
  static const char* versions[] = {nullptr,      "2025-03-26", "2025-06-18",
                                   "2025-11-25", "2026-07-28", "1999-01-01"};
  http::request req;
  req.method = "POST";
  req.path = "/mcp";
  req.add_header("Accept", "application/json, text/event-stream");
  req.add_header("Content-Type", "application/json");
  if (const char* v = versions[sel % 6]) {
    req.add_header("MCP-Protocol-Version", v);
  }
  if (sel & 0x40) {
    req.add_header("Mcp-Method", "tools/call");
    req.add_header("Mcp-Name", "search_stories");
  }
  req.body = std::string_view(padded.data(), body_len);
  http::response_info info = w.ep->handle_http(req, h, out);
  std::string_view r = out.view();
  const size_t end = r.find("\r\n\r\n");
  if (end == std::string_view::npos || r.substr(0, 9) != "HTTP/1.1 " ||
      std::to_string(info.status) != r.substr(9, 3)) {
    __builtin_trap();
  }
  std::string_view body = r.substr(end + 4);
  // One Content-Length line whose value (after the OWS) is the body's size.
  const std::string_view head = r.substr(0, end + 2);
  size_t cl = head.find("\r\nContent-Length:");
  if (cl == std::string_view::npos ||
      head.find("\r\nContent-Length:", cl + 1) != std::string_view::npos) {
    __builtin_trap();
  }
  cl = head.find_first_not_of(' ', cl + 17);
  if (head.substr(cl, head.find("\r\n", cl) - cl) != std::to_string(body.size())) {
    __builtin_trap();
  }
  if (!body.empty()) {
    require_json(body);
  } else if (info.status != 202) {
    __builtin_trap();
  }
  return 0;
}
