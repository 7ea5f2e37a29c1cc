// Reference renderer (see reference.h): deliberately naive, written from the spec of each
// response shape rather than from the fast path's pieces.
#include "tollgate/envelope/reference.h"

#include <cstdint>
#include <cstdio>

#include "tollgate/http/response.h"

namespace tollgate::envelope::reference {

namespace {
// The number of bytes of the well-formed UTF-8 character at s[i], or 0: decodes the code point
// and checks it against RFC 3629 (shortest form, not a surrogate, at most U+10FFFF).
size_t utf8_char(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (n == 0 || c >= 0xF8 || i + n > s.size()) {
    return 0;
  }
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      return 0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    return 0;
  }
  return n;
}
}  // namespace

namespace {
// `s` escaped; bytes >= 0x80 that are not well-formed UTF-8 become U+FFFD when `text` (a
// client's bytes in an error body), else are copied (a payload, UTF-8 by construction).
std::string escape_as(std::string_view s, bool text) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80 && text) {
      // Not UTF-8: U+FFFD for the byte; UTF-8: the character as it is.
      const size_t n = utf8_char(s, i);
      if (n == 0) {
        r += "\\ufffd";
      } else {
        r.append(s.substr(i, n));
        i += n - 1;
      }
    } else if (c == '"') {
      r += "\\\"";
    } else if (c == '\\') {
      r += "\\\\";
    } else if (c == '\n') {
      r += "\\n";
    } else if (c == '\r') {
      r += "\\r";
    } else if (c == '\t') {
      r += "\\t";
    } else if (c == '\b') {
      r += "\\b";
    } else if (c == '\f') {
      r += "\\f";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else {
      r += ch;
    }
  }
  return r;
}
}  // namespace

std::string escape(std::string_view s) { return escape_as(s, false); }

namespace {
std::string str(std::string_view s) { return "\"" + escape(s) + "\""; }
// An error body's strings: written by append_json_escaped, which replaces what is not UTF-8.
std::string text(std::string_view s) { return "\"" + escape_as(s, true) + "\""; }
}  // namespace

std::string http(int status, bool close, std::string_view extra_headers, std::string_view body) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " +
                  std::string(http::reason_phrase(status)) + "\r\n";
  if (status != 202 && status != 204) {
    r += "Content-Type: application/json\r\n";
  }
  if (close) {
    r += "Connection: close\r\n";
  }
  r += extra_headers;
  if (http::has_no_body(status)) {
    r += "\r\n";  // RFC 9110 §8.6: no Content-Length on a 204
  } else if (status == 202) {
    r += "Content-Length: 0\r\n\r\n";  // bodiless: written whole by empty_response
  } else {
    // The value right-aligned in an 8-byte field after the colon (at least one space before
    // it), as envelope::cache writes it so that the body need not move.
    const std::string digits = std::to_string(body.size());
    r += "Content-Length:" + std::string(digits.size() < 8 ? 8 - digits.size() : 1, ' ') + digits +
         "\r\n\r\n";
  }
  r += body;
  return r;
}

std::string success(std::string_view id, revision r, std::string_view raw_payload) {
  std::string result = "{";
  if (is_modern(r)) {
    result += "\"resultType\":\"complete\",";
  }
  result +=
      "\"content\":[{\"type\":\"text\",\"text\":" + str(raw_payload) + "}],\"isError\":false}";
  return "{\"jsonrpc\":\"2.0\",\"id\":" + std::string(id) + ",\"result\":" + result + "}";
}

std::string tool_error_json(const tool_error& e) {
  std::string o = "{\"code\":" + str(name_of(e.code)) +
                  ",\"message\":" + str(e.message.empty() ? message_of(e.code) : e.message);
  auto fig = [&](const char* name, int64_t v) {
    if (v >= 0) {
      o += ",\"" + std::string(name) + "\":" + std::to_string(v);
    }
  };
  fig("retry_after_secs", e.retry_after_secs);
  fig("quota_limit", e.quota_limit);
  fig("quota_used", e.quota_used);
  fig("quota_remaining", e.quota_remaining);
  return o + "}";
}

std::string tool_error_response(std::string_view id, revision r, const tool_error& e) {
  std::string result = "{";
  if (is_modern(r)) {
    result += "\"resultType\":\"complete\",";
  }
  result += "\"isError\":true,\"content\":[{\"type\":\"text\",\"text\":" + str(tool_error_json(e)) +
            "}]}";
  return "{\"jsonrpc\":\"2.0\",\"id\":" + std::string(id) + ",\"result\":" + result + "}";
}

std::string supported_versions() {
  std::string s = "[";
  for (size_t i = 0; i < num_revisions; ++i) {
    if (i) {
      s += ",";
    }
    s += str(revision_names[i]);
  }
  return s + "]";
}

std::string error_response(std::string_view id, const rpc_error& e) {
  std::string message;
  std::string data;
  switch (e.kind) {
    case rpc_error_kind::parse_error:
      id = "null";
      message = "Parse error: the request body is not valid JSON.";
      break;
    case rpc_error_kind::invalid_request:
      message =
          e.detail.empty()
              ? std::string("Invalid Request: the message is not a valid JSON-RPC 2.0 request.")
              : std::string(e.detail);
      break;
    case rpc_error_kind::method_not_found:
      message = "Method not found.";
      break;
    case rpc_error_kind::invalid_params:
      message = "Invalid params: " + std::string(e.detail) + ": " + std::string(e.rule);
      data = "{\"argument\":" + text(e.detail) + ",\"rule\":" + text(e.rule) + "}";
      break;
    case rpc_error_kind::unknown_tool:
      message = "Unknown tool: " + std::string(e.detail);
      break;
    case rpc_error_kind::internal_error:
      message = e.detail.empty() ? std::string("Internal error.") : std::string(e.detail);
      break;
    case rpc_error_kind::header_mismatch:
      message =
          e.detail.empty()
              ? std::string("Header mismatch: the HTTP headers do not match the request body.")
              : std::string(e.detail);
      break;
    case rpc_error_kind::unsupported_version:
      message = "Unsupported protocol version: " + std::string(e.detail);
      data = "{\"requested\":" + text(e.detail) + ",\"supported\":" + supported_versions() + "}";
      break;
    case rpc_error_kind::rate_limited: {
      message =
          "Rate limit exceeded: retry in " + std::to_string(e.retry_after_secs) + " second(s).";
      tool_error te;
      te.code = tool_error_code::rate_limited;
      te.retry_after_secs = e.retry_after_secs;
      data = tool_error_json(te);
      break;
    }
  }
  std::string err =
      "{\"code\":" + std::to_string(code_of(e.kind)) + ",\"message\":" + text(message);
  if (!data.empty()) {
    err += ",\"data\":" + data;
  }
  err += "}";
  return "{\"jsonrpc\":\"2.0\",\"id\":" + std::string(id) + ",\"error\":" + err + "}";
}

std::string result_response(std::string_view id, std::string_view result_json) {
  return "{\"jsonrpc\":\"2.0\",\"id\":" + std::string(id) +
         ",\"result\":" + std::string(result_json) + "}";
}

std::string unauthorized(bool close, bool key_presented) {
  const std::string body =
      "{\"code\":\"invalid_key\",\"message\":" +
      str("A valid API key is required. Send it as Authorization: Bearer KEY or X-API-Key: KEY.") +
      "}";
  return http(401, close,
              key_presented
                  ? "WWW-Authenticate: Bearer realm=\"tollgate\", error=\"invalid_token\", "
                    "error_description=\"The API key is not valid: it is unknown or revoked.\"\r\n"
                  : "WWW-Authenticate: Bearer realm=\"tollgate\"\r\n",
              body);
}

}  // namespace tollgate::envelope::reference
