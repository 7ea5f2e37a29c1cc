// Response classification (see check.h).
#include "check.h"

#include <cstring>

namespace tollgate::loadgen {
namespace {

outcome bad(std::string_view why) { return outcome{outcome_kind::bad_response, 0, why}; }

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) {
    return false;
  }
  for (std::size_t i = 0; i < prefix.size(); i++) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    if (c != prefix[i]) {
      return false;
    }
  }
  return true;
}

/// Pulls the data of the first event out of a text/event-stream body into `out` (data lines
/// joined by LF, as the SSE spec says). False when there is no data line.
bool first_sse_event(std::string_view body, std::vector<char>& out) {
  out.clear();
  bool seen = false;
  while (!body.empty()) {
    std::size_t lf = body.find('\n');
    std::string_view line = body.substr(0, lf);
    body.remove_prefix(lf == std::string_view::npos ? body.size() : lf + 1);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (line.empty()) {
      if (seen) {
        break;
      }
      continue;
    }
    if (line.substr(0, 5) == "data:") {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ') {
        line.remove_prefix(1);
      }
      if (seen) {
        out.push_back('\n');
      }
      out.insert(out.end(), line.begin(), line.end());
      seen = true;
    }
  }
  return seen;
}

}  // namespace

simdjson::padded_string_view response_checker::pad(std::vector<char>& buf, std::string_view s) {
  // The size only grows (resize zero-fills whatever it adds: doing that per response showed
  // up in profiles); the padding after the copy is cleared each time.
  std::size_t need = s.size() + simdjson::SIMDJSON_PADDING;
  if (buf.size() < need) {
    buf.resize(need < 4096 ? 4096 : 2 * need);
  }
  if (!s.empty()) {
    std::memcpy(buf.data(), s.data(), s.size());
  }
  std::memset(buf.data() + s.size(), 0, simdjson::SIMDJSON_PADDING);
  return simdjson::padded_string_view(buf.data(), s.size(), buf.size());
}

simdjson::error_code response_checker::parse_padded(simdjson::dom::parser& p,
                                                    std::vector<char>& buf, std::string_view s,
                                                    simdjson::dom::element& out) {
  simdjson::padded_string_view v = pad(buf, s);
  return p.parse(v.data(), v.size(), false).get(out);
}

bool response_checker::search_payload_ok(std::string_view text) {
  simdjson::dom::element doc;
  if (parse_padded(inner_, inner_buf_, text, doc) != simdjson::SUCCESS) {
    return false;
  }
  std::uint64_t total = 0;
  simdjson::dom::array stories;
  if (doc["total"].get_uint64().get(total) != simdjson::SUCCESS ||
      doc["stories"].get_array().get(stories) != simdjson::SUCCESS) {
    return false;
  }
  std::uint64_t n = 0;
  for (simdjson::dom::element story : stories) {
    if (!story.is_object()) {
      return false;
    }
    n++;
  }
  return n <= total;
}

outcome response_checker::check(const response_head& head, std::string_view body,
                                const expectation& want, check_level level) {
  if (want.kind == req_kind::get) {
    if (head.status == want.expect_status) {
      return outcome{};
    }
    return outcome{outcome_kind::http_status, head.status, {}};
  }
  if (level == check_level::status) {
    if (head.status == 200) {
      return outcome{};
    }
    return outcome{outcome_kind::http_status, head.status, {}};
  }
  // The full check is a pure function of the status line, the two headers it reads, the body
  // and the expectation: an answer byte-identical to the last one that passed gets the same
  // verdict from one comparison instead of two JSON parses.
  if (memo_valid_ && head.status == memo_status_ && head.minor_version == memo_minor_ &&
      head.close == memo_close_ && head.has_retry_after == memo_retry_after_ &&
      want.kind == memo_want_.kind && want.id == memo_want_.id &&
      head.content_type == std::string_view(memo_ctype_) && body == std::string_view(memo_body_)) {
    memo_hits_++;
    return outcome{};
  }
  outcome o = check_full(head, body, want);
  if (o.kind == outcome_kind::ok && body.size() <= max_memo) {
    memo_status_ = head.status;
    memo_minor_ = head.minor_version;
    memo_close_ = head.close;
    memo_retry_after_ = head.has_retry_after;
    memo_want_ = want;
    memo_ctype_.assign(head.content_type);
    memo_body_.assign(body);
    memo_valid_ = true;
  }
  return o;
}

outcome response_checker::check_full(const response_head& head, std::string_view body,
                                     const expectation& want) {
  if (head.status == 429 && !head.has_retry_after) {
    return bad("429 without Retry-After");
  }
  if (want.kind == req_kind::rest_search) {
    return check_rest(head, body);
  }
  return check_mcp(head, body, want);
}

outcome response_checker::check_rest(const response_head& head, std::string_view body) {
  simdjson::dom::element doc;
  bool parsed = parse_padded(outer_, outer_buf_, body, doc) == simdjson::SUCCESS;
  if (head.status != 200) {
    std::string_view code;
    if (parsed) {
      if (doc["code"].get_string().get(code) != simdjson::SUCCESS) {
        code = {};
      }
    }
    return outcome{outcome_kind::http_status, head.status, code};
  }
  if (!parsed) {
    return bad("REST body is not JSON");
  }
  std::uint64_t total = 0;
  simdjson::dom::array stories;
  if (doc["total"].get_uint64().get(total) != simdjson::SUCCESS ||
      doc["stories"].get_array().get(stories) != simdjson::SUCCESS) {
    return bad("REST body lacks total/stories");
  }
  return outcome{};
}

outcome response_checker::check_mcp(const response_head& head, std::string_view body,
                                    const expectation& want) {
  if (head.status == 401) {
    return outcome{outcome_kind::http_status, 401, {}};
  }
  if (head.status == 429) {
    return outcome{outcome_kind::http_status, 429, {}};
  }
  std::string_view json = body;
  if (starts_with_ci(head.content_type, "text/event-stream")) {
    if (!first_sse_event(body, sse_buf_)) {
      return head.status == 200 ? bad("SSE stream without a data event")
                                : outcome{outcome_kind::http_status, head.status, {}};
    }
    json = std::string_view(sse_buf_.data(), sse_buf_.size());
  } else if (head.status == 200 && !starts_with_ci(head.content_type, "application/json")) {
    return bad("unexpected Content-Type");
  }

  simdjson::dom::element doc;
  if (parse_padded(outer_, outer_buf_, json, doc) != simdjson::SUCCESS) {
    if (head.status != 200) {
      return outcome{outcome_kind::http_status, head.status, {}};
    }
    return bad("body is not JSON");
  }
  simdjson::dom::object msg;
  if (doc.get_object().get(msg) != simdjson::SUCCESS) {
    return head.status != 200 ? outcome{outcome_kind::http_status, head.status, {}}
                              : bad("body is not a JSON object");
  }
  std::string_view version;
  if (msg["jsonrpc"].get_string().get(version) != simdjson::SUCCESS || version != "2.0") {
    return head.status != 200 ? outcome{outcome_kind::http_status, head.status, {}}
                              : bad("jsonrpc is not \"2.0\"");
  }
  simdjson::dom::element id;
  if (msg["id"].get(id) != simdjson::SUCCESS) {
    return bad("response without id");
  }
  simdjson::dom::object error;
  if (msg["error"].get_object().get(error) == simdjson::SUCCESS) {
    std::int64_t code = 0;
    if (error["code"].get_int64().get(code) != simdjson::SUCCESS) {
      return bad("error without integer code");
    }
    // A parse error may carry id null; anything else must echo ours.
    std::int64_t got = 0;
    if (!id.is_null() && (id.get_int64().get(got) != simdjson::SUCCESS || got != want.id)) {
      return bad("id mismatch");
    }
    return outcome{outcome_kind::jsonrpc_error, static_cast<int>(code), {}};
  }
  std::int64_t got = 0;
  if (id.get_int64().get(got) != simdjson::SUCCESS || got != want.id) {
    return bad("id mismatch");
  }
  if (head.status != 200) {
    return outcome{outcome_kind::http_status, head.status, {}};
  }
  simdjson::dom::object result;
  if (msg["result"].get_object().get(result) != simdjson::SUCCESS) {
    return bad("neither result nor error");
  }
  return check_result(result, want);
}

outcome response_checker::check_result(simdjson::dom::object result, const expectation& want) {
  switch (want.kind) {
    case req_kind::mcp_init: {
      std::string_view pv;
      if (result["protocolVersion"].get_string().get(pv) != simdjson::SUCCESS) {
        return bad("initialize result without protocolVersion");
      }
      return outcome{};
    }
    case req_kind::mcp_list: {
      simdjson::dom::array tools;
      if (result["tools"].get_array().get(tools) != simdjson::SUCCESS) {
        return bad("tools/list result without tools");
      }
      return outcome{};
    }
    default:
      break;
  }
  bool is_error = false;
  simdjson::dom::element is_error_el;
  if (result["isError"].get(is_error_el) == simdjson::SUCCESS &&
      is_error_el.get_bool().get(is_error) != simdjson::SUCCESS) {
    return bad("isError is not a boolean");
  }
  simdjson::dom::array content;
  if (result["content"].get_array().get(content) != simdjson::SUCCESS) {
    return bad("tool result without content");
  }
  simdjson::dom::object block;
  if (content.at(0).get_object().get(block) != simdjson::SUCCESS) {
    return bad("tool result with empty content");
  }
  std::string_view type;
  std::string_view text;
  if (block["type"].get_string().get(type) != simdjson::SUCCESS || type != "text" ||
      block["text"].get_string().get(text) != simdjson::SUCCESS) {
    return bad("first content block is not text");
  }
  if (is_error) {
    simdjson::dom::element inner;
    if (parse_padded(inner_, inner_buf_, text, inner) != simdjson::SUCCESS) {
      return bad("tool error text is not JSON");
    }
    std::string_view code;
    if (inner["code"].get_string().get(code) != simdjson::SUCCESS) {
      return bad("tool error without code");
    }
    return outcome{outcome_kind::tool_error, 0, code};
  }
  if (!search_payload_ok(text)) {
    return bad("tool result text is not a search payload");
  }
  return outcome{};
}

std::string outcome_label(outcome_kind kind, int code, std::string_view detail) {
  std::string s;
  switch (kind) {
    case outcome_kind::ok:
      return "ok";
    case outcome_kind::http_status:
      s = "http " + std::to_string(code);
      if (!detail.empty()) {
        s += ' ';
        s += detail;
      }
      return s;
    case outcome_kind::jsonrpc_error:
      return "jsonrpc_error " + std::to_string(code);
    case outcome_kind::tool_error:
      s = "tool_error ";
      s += detail;
      return s;
    case outcome_kind::bad_response:
      s = "bad_response: ";
      s += detail;
      return s;
    case outcome_kind::transport:
      s = "transport: ";
      s += detail;
      return s;
  }
  return "unknown";
}

}  // namespace tollgate::loadgen
