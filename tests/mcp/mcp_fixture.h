// Test fixtures for the MCP endpoint: a fake host with scripted admissions, a fake search tool,
// and helpers that build an http::request around a padded body and split the response.
#pragma once

#include <simdjson.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tollgate/envelope/envelope.h"
#include "tollgate/http/request.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp::test_support {

/// Scripted host: admits according to `next`, counts settles; as the lent rate_charge, writes
/// the answers' header lines from its figures and (stdio) rates each other message according
/// to `rate`.
class fake_host : public host, public rate_charge {
 public:
  admission next;
  int admits = 0;
  int settled_ok = 0;
  int settled_failed = 0;
  int header_calls = 0;
  int64_t limit = 1000;
  int64_t used = 10;
  void write_headers(out_buffer& out) override {
    ++header_calls;
    fmt_header(out, "X-Quota-Limit: ", limit);
    fmt_header(out, "X-Quota-Used: ", used);
    fmt_header(out, "X-Quota-Remaining: ", limit - used);
  }
  admission admit(std::string_view, std::string_view) override {
    ++admits;
    if (next.refusal == envelope::tool_error_code::quota_exceeded) {
      limit = next.quota_limit;
      used = next.quota_used;
    }
    return next;
  }
  void settle(bool success) override { success ? ++settled_ok : ++settled_failed; }
  admission rate = {};
  int rate_checks = 0;
  admission rate_check() override {
    ++rate_checks;
    return rate;
  }
  admission charge_extra() override { return {}; }
  void refund() override {}

 private:
  static void fmt_header(out_buffer& out, std::string_view name, int64_t v) {
    out.append(name);
    std::string s = std::to_string(v);  // tests only
    out.append(s);
    out.append("\r\n");
  }
};

/// A search tool for tests: echoes its arguments in a payload shaped like search_stories.
/// query "outage" → unavailable before writing; "fail-after-write" → writes, then fails.
class fake_search : public tool {
 public:
  int calls = 0;
  tool_result call(const arguments& a, json_out& out, call_context&) override {
    ++calls;
    if (a[0].str == "outage") {
      return tool_result::failure({envelope::tool_error_code::unavailable, -1, -1, -1, -1, {}});
    }
    out.raw("{\"total\":1,\"stories\":[{\"id\":\"s1\",\"title\":");
    out.string(a[0].str);
    out.raw(",\"limit\":");
    out.number(a[1].num);
    out.raw(",\"sort\":");
    out.string(a[2].str);
    out.raw(",\"tags\":[");
    for (size_t i = 0; i < a[3].num_items; ++i) {
      if (i) out.raw(",");
      out.string(a[3].items[i]);
    }
    out.raw("]}]}");
    if (a[0].str == "bad-date") {
      return tool_result::invalid_argument("since", "must be unix seconds or an RFC 3339 date");
    }
    if (a[0].str == "fail-after-write") {
      return tool_result::failure({envelope::tool_error_code::unavailable, -1, -1, -1, -1, {}});
    }
    return tool_result::success();
  }
};

/// A never-billed tool with no arguments.
class fake_usage : public tool {
 public:
  tool_result call(const arguments&, json_out& out, call_context&) override {
    out.raw("{\"used\":1}");
    return tool_result::success();
  }
};

inline registry make_registry(std::shared_ptr<fake_search> search) {
  registry r;
  tool_def s;
  s.name = "search_stories";
  s.title = "Search stories";
  s.description = "Full-text search over stories.";
  arg_spec q{
      "query", arg_type::string, "What to search for.", true, 1, 500, true, true, {}, false, 0, {}};
  arg_spec limit{
      "limit", arg_type::integer, "How many results.", false, 1, 50, true, true, {}, true, 10, {}};
  arg_spec sort{"sort", arg_type::enumeration, "Order.", false, 0,          0, false,
                false,  {"relevance", "date"}, true,     0,     "relevance"};
  arg_spec tags{"tags", arg_type::string_array, "Tags.", false, 0, 8, false, true, {}, false, 0,
                {}};
  s.args = {q, limit, sort, tags};
  s.impl = std::move(search);
  r.add(std::move(s));
  tool_def u;
  u.name = "get_usage";
  u.title = "Usage";
  u.description = "Your usage.";
  u.billable = false;
  u.impl = std::make_shared<fake_usage>();
  r.add(std::move(u));
  r.finish();
  return r;
}

/// One HTTP exchange.
struct http_case {
  std::string method = "POST";
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Accept", "application/json, text/event-stream"}, {"Content-Type", "application/json"}};
  std::string body;
  bool keep_alive = true;

  http_case& set(const std::string& name, const std::string& value) {
    for (auto& h : headers) {
      if (h.first == name) {
        h.second = value;
        return *this;
      }
    }
    headers.emplace_back(name, value);
    return *this;
  }
  /// Another line, even when one of the same name is there.
  http_case& add(const std::string& name, const std::string& value) {
    headers.emplace_back(name, value);
    return *this;
  }
  http_case& drop(const std::string& name) {
    for (size_t i = 0; i < headers.size(); ++i) {
      if (headers[i].first == name) {
        headers.erase(headers.begin() + static_cast<long>(i));
        break;
      }
    }
    return *this;
  }
};

struct http_reply {
  int status = 0;
  bool close = false;
  std::string raw;
  std::string head;
  std::string body;
  std::string header(const std::string& name) const {
    std::string needle = "\r\n" + name + ":";
    size_t p = head.find(needle);
    if (p == std::string::npos) return "";
    p = head.find_first_not_of(" \t", p + needle.size());  // OWS before the value
    return head.substr(p, head.find("\r\n", p) - p);
  }
};

/// Builds the request (body padded by 64 bytes) and returns the parsed-apart response; `h` is
/// lent as the request's figures.
inline http_reply run(endpoint& ep, fake_host& h, const http_case& c, out_buffer& out,
                      int64_t now_ns = 0) {
  ep.lend(nullptr, &h);
  std::string padded = c.body + std::string(body_padding, ' ');
  http::request req;
  req.method = c.method;
  req.target = "/mcp";
  req.path = "/mcp";
  for (const auto& kv : c.headers) {
    req.add_header(kv.first, kv.second);
  }
  req.body = std::string_view(padded.data(), c.body.size());
  req.keep_alive = c.keep_alive;
  out.clear();
  http::response_info info = ep.handle_http(req, h, out, now_ns);
  http_reply r;
  r.raw = std::string(out.view());
  size_t end = r.raw.find("\r\n\r\n");
  r.head = r.raw.substr(0, end + 2);
  r.body = r.raw.substr(end + 4);
  r.status = std::stoi(r.raw.substr(9, 3));
  r.close = info.close;
  if (r.status != info.status) {
    r.status = -info.status;  // mismatch shows up in assertions
  }
  // Framing (RFC 9110 §8.6): a 204 has no Content-Length and no body; every other answer
  // states its body's length.
  const bool no_length = r.status == 204;
  if (no_length ? (r.head.find("\r\nContent-Length:") != std::string::npos || !r.body.empty())
                : r.header("Content-Length") != std::to_string(r.body.size())) {
    r.status = -1;  // framing broken
  }
  return r;
}

/// A parsed JSON body (DOM; tests only).
struct json_doc {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  bool ok = false;
  explicit json_doc(const std::string& s) { ok = parser.parse(s).get(root) == simdjson::SUCCESS; }
  std::string str(const char* ptr) {
    std::string_view v;
    if (root.at_pointer(ptr).get(v)) return "<missing>";
    return std::string(v);
  }
  int64_t num(const char* ptr) {
    int64_t v = 0;
    if (root.at_pointer(ptr).get(v)) return -999999;
    return v;
  }
  bool has(const char* ptr) { return !root.at_pointer(ptr).error(); }
  bool is_null(const char* ptr) {
    simdjson::dom::element e;
    return !root.at_pointer(ptr).get(e) && e.is_null();
  }
  std::string raw(const char* ptr) {
    simdjson::dom::element e;
    if (root.at_pointer(ptr).get(e)) return "<missing>";
    return simdjson::minify(e);
  }
};

}  // namespace tollgate::mcp::test_support
