// Envelope cache: pre-rendering at start-up and the fast writers (see envelope.h).
#include "tollgate/envelope/envelope.h"

#include <fmt/format.h>

#include <cstring>

#include "tollgate/common/assert.h"
#include "tollgate/common/content_length.h"
#include "tollgate/common/json_out.h"
#include "tollgate/http/response.h"

namespace tollgate::envelope {
namespace {

constexpr std::string_view kRpcPrefix = R"({"jsonrpc":"2.0","id":)";
// The Content-Length field (common/content_length.h): a body of up to kField - 1 digits (under
// 10 MB) is framed without moving it; a longer body moves once.
constexpr size_t kField = 8;

constexpr std::array<std::string_view, num_tool_error_codes> kToolErrorNames = {
    "suspended",   "quota_exceeded", "rate_limited", "unavailable", "not_found",  "unavailable",
    "unavailable", "unavailable",    "unavailable",  "unavailable", "unavailable"};
constexpr std::array<std::string_view, num_tool_error_codes> kToolErrorMessages = {
    "This account is suspended (its subscription was canceled or a payment failed), so no "
    "billable call can be made until the account is settled.",
    "The monthly quota for this key is used up and the key is set to stop at its quota rather "
    "than bill overage. Retry after retry_after_secs seconds, or upgrade the plan.",
    "The rate limit for this key was exceeded. Wait retry_after_secs seconds and send the same "
    "request again.",
    "The search backend is unavailable: no shard answered in time. This is an outage, not an "
    "empty result; retry shortly.",
    "No story exists with this id. Check the id, for example by searching with search_stories.",
    "Usage cannot be recorded right now (the server cannot write its usage journal), so this "
    "billable call was not run and not billed. This is an outage, not an empty result; retry "
    "after retry_after_secs seconds.",
    "The quota service cannot be reached, so this key's monthly quota cannot be checked. This "
    "is an outage, not a spent quota; retry after retry_after_secs seconds.",
    "This story's stored text cannot be read: the server's search index is damaged. This is a "
    "fault of the server, not a missing story, and retrying will not help until its operator "
    "rebuilds the index; other stories are unaffected.",
    "This call reached the server after its deadline (the Tollgate-Deadline its client sent) "
    "had passed, so it was not run and not billed. The server or the network was slow; retry "
    "after retry_after_secs seconds.",
    "This call was cancelled by its client (notifications/cancelled) before the server started "
    "it, so it was not run and not billed.",
    "The server is still loading its story corpus, so this call was not run and not billed. "
    "Retry after retry_after_secs seconds.",
};

// The 401 challenges (RFC 6750 §3): no error code when no key was presented.
constexpr std::string_view kChallenge = "WWW-Authenticate: Bearer realm=\"tollgate\"\r\n";
constexpr std::string_view kChallengeInvalidToken =
    "WWW-Authenticate: Bearer realm=\"tollgate\", error=\"invalid_token\", "
    "error_description=\"The API key is not valid: it is unknown or revoked.\"\r\n";

// The error part of the challenge when OAuth is on: the credential may be a key or a token.
constexpr std::string_view kOauthInvalidToken =
    ", error=\"invalid_token\", error_description=\"The API key or access token is not valid: "
    "it is unknown, expired or revoked.\"";

struct rpc_error_info {
  int code;
  std::string_view message;  // fixed message (or prefix for kinds with a detail)
};
constexpr std::array<rpc_error_info, num_rpc_error_kinds> kRpcErrors = {{
    {-32700, "Parse error: the request body is not valid JSON."},
    {-32600, "Invalid Request: the message is not a valid JSON-RPC 2.0 request."},
    {-32601, "Method not found."},
    {-32602, "Invalid params: "},
    {-32602, "Unknown tool: "},
    {-32603, "Internal error."},
    {-32020, "Header mismatch: the HTTP headers do not match the request body."},
    {-32022, "Unsupported protocol version: "},
    // The number goes into the sentence (clients often show a model only the message):
    // "Rate limit exceeded: retry in N second(s)." with N = data.retry_after_secs.
    {429, "Rate limit exceeded: retry in "},
}};

void append_int(out_buffer& out, int64_t v) {
  fmt::format_int f(v);
  out.append(f.data(), f.size());
}

// Escaped-once JSON string contents of `s`, as a std::string (start-up only).
std::string escaped(std::string_view s) {
  out_buffer b;
  append_json_escaped(b, s);
  return std::string(b.view());
}

std::string quoted(std::string_view s) { return "\"" + escaped(s) + "\""; }

std::string server_info_json(const server_identity& id) {
  return R"({"name":)" + quoted(id.name) + R"(,"title":)" + quoted(id.title) + R"(,"version":)" +
         quoted(id.version) + "}";
}

struct status_head {
  int status;
  std::string_view bytes;
};
// The fixed head of every status we answer with (close variants add one header).
constexpr status_head kHeads[] = {
    {200, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"},
    {202, "HTTP/1.1 202 Accepted\r\n"},
    {204, "HTTP/1.1 204 No Content\r\n"},
    {400, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"},
    {401, "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"},
    {403, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"},
    {404, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"},
    {405, "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n"},
    {406, "HTTP/1.1 406 Not Acceptable\r\nContent-Type: application/json\r\n"},
    {413, "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"},
    {415, "HTTP/1.1 415 Unsupported Media Type\r\nContent-Type: application/json\r\n"},
    {429, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"},
    {500, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"},
    {503, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"},
};

}  // namespace

bool parse_revision(std::string_view s, revision& out) noexcept {
  for (size_t i = 0; i < num_revisions; ++i) {
    if (revision_names[i] == s) {
      out = static_cast<revision>(i);
      return true;
    }
  }
  return false;
}

std::string_view name_of(tool_error_code c) noexcept {
  return kToolErrorNames[static_cast<size_t>(c)];
}
std::string_view message_of(tool_error_code c) noexcept {
  return kToolErrorMessages[static_cast<size_t>(c)];
}
int code_of(rpc_error_kind k) noexcept { return kRpcErrors[static_cast<size_t>(k)].code; }

cache::cache(const server_identity& id) {
  const std::string info = server_info_json(id);
  const std::string instructions =
      id.instructions.empty() ? std::string() : R"(,"instructions":)" + quoted(id.instructions);
  const std::string caps = R"({"tools":{"listChanged":false}})";
  for (size_t i = 0; i < num_revisions; ++i) {
    initialize_[i] = R"({"protocolVersion":")" + std::string(revision_names[i]) +
                     R"(","capabilities":)" + caps + R"(,"serverInfo":)" + info + instructions +
                     "}";
  }
  supported_json_ = "[";
  for (size_t i = 0; i < num_revisions; ++i) {
    supported_json_ += (i ? ",\"" : "\"") + std::string(revision_names[i]) + "\"";
  }
  supported_json_ += "]";
  // Every revision served (a dual-era server): the same list -32022 names.
  discover_ =
      R"({"resultType":"complete","supportedVersions":)" + supported_json_ + R"(,"capabilities":)" +
      caps + R"(,"serverInfo":)" + info + instructions +
      R"(,"ttlMs":3600000,"cacheScope":"public","_meta":{"io.modelcontextprotocol/serverInfo":)" +
      info + "}}";

  // Tool-error text, escaped once for its place inside the text block: {"code":"x","message":"..."
  for (size_t i = 0; i < num_tool_error_codes; ++i) {
    const std::string obj = R"({"code":")" + std::string(kToolErrorNames[i]) + R"(","message":)" +
                            quoted(kToolErrorMessages[i]);
    tool_error_text_[i] = escaped(obj);
  }
  for (size_t i = 0; i < num_rpc_error_kinds; ++i) {
    rpc_error_mid_[i] =
        R"(,"error":{"code":)" + std::to_string(kRpcErrors[i].code) + R"(,"message":")";
  }
  unauthorized_body_ =
      R"({"code":"invalid_key","message":)" +
      quoted(
          "A valid API key is required. Send it as Authorization: Bearer KEY or X-API-Key: "
          "KEY.") +
      "}";
}

void cache::head(out_buffer& out, int status, bool close) const {
  bool found = false;
  for (const auto& h : kHeads) {
    if (h.status == status) {
      out.append(h.bytes);
      found = true;
      break;
    }
  }
  if (!found) {
    out.append("HTTP/1.1 ");
    append_int(out, status);
    out.push_back(' ');
    out.append(http::reason_phrase(status));
    out.append("\r\nContent-Type: application/json\r\n");
  }
  if (close) {
    out.append("Connection: close\r\n");
  }
}

body_mark cache::body_start(out_buffer& out) const {
  body_mark m;
  m.gap = reserve_content_length(out, kField, "\r\n\r\n").at;
  m.body = out.size();
  return m;
}

void cache::body_end(out_buffer& out, body_mark m) const {
  TOLLGATE_ASSERT(out.size() >= m.body);
  patch_content_length(out, content_length_field{m.gap, kField}, out.size() - m.body);
}

void cache::body_end(out_buffer& out, body_mark m, bool omit_body) const {
  const size_t length = out.size() - m.body;
  body_end(out, m);
  if (omit_body) {
    out.resize(out.size() - length);  // (the patch may have moved the body: count from the end)
  }
}

void cache::empty_response(out_buffer& out, int status, std::string_view extra_headers,
                           bool close) const {
  head(out, status, close);
  out.append(extra_headers);
  // RFC 9110 §8.6: a 204 carries no Content-Length at all; a bodiless 202 says 0.
  out.append(http::has_no_body(status) ? std::string_view("\r\n")
                                       : std::string_view("Content-Length: 0\r\n\r\n"));
}

void cache::success_prefix(out_buffer& out, std::string_view id, revision r) const {
  out.append(kRpcPrefix);
  out.append(id);
  if (is_modern(r)) {
    out.append(R"(,"result":{"resultType":"complete","content":[{"type":"text","text":")");
  } else {
    out.append(R"(,"result":{"content":[{"type":"text","text":")");
  }
}

void cache::success_suffix(out_buffer& out) const { out.append(R"("}],"isError":false}})"); }

namespace {
// The figures of a tool error that apply (>= 0), `,"name":N` each; Escaped writes the quotes as
// \" for inside the MCP text block.
template <bool Escaped>
void append_figures(out_buffer& out, const tool_error& e) {
  constexpr std::string_view open = Escaped ? ",\\\"" : ",\"";
  constexpr std::string_view close = Escaped ? "\\\":" : "\":";
  const auto figure = [&](std::string_view name, int64_t v) {
    if (v < 0) {
      return;
    }
    out.append(open);
    out.append(name);
    out.append(close);
    append_int(out, v);
  };
  figure("retry_after_secs", e.retry_after_secs);
  figure("quota_limit", e.quota_limit);
  figure("quota_used", e.quota_used);
  figure("quota_remaining", e.quota_remaining);
}
}  // namespace

void cache::tool_error_response(out_buffer& out, std::string_view id, revision r,
                                const tool_error& e) const {
  out.append(kRpcPrefix);
  out.append(id);
  if (is_modern(r)) {
    out.append(
        R"(,"result":{"resultType":"complete","isError":true,"content":[{"type":"text","text":")");
  } else {
    out.append(R"(,"result":{"isError":true,"content":[{"type":"text","text":")");
  }
  if (e.message.empty()) {
    out.append(tool_error_text_[static_cast<size_t>(e.code)]);
  } else {
    out.append(escaped(R"({"code":")" + std::string(kToolErrorNames[static_cast<size_t>(e.code)]) +
                       R"(","message":)" + quoted(e.message)));
  }
  append_figures<true>(out, e);
  out.append(R"(}"}]}})");
}

void cache::tool_error_json(out_buffer& out, const tool_error& e) const {
  out.append(R"({"code":")");
  out.append(kToolErrorNames[static_cast<size_t>(e.code)]);
  out.append(R"(","message":")");
  append_json_escaped(
      out, e.message.empty() ? kToolErrorMessages[static_cast<size_t>(e.code)] : e.message);
  out.push_back('"');
  append_figures<false>(out, e);
  out.push_back('}');
}

namespace {

// Appends `json` (already JSON) and then `text` escaped into a JSON string's content.
void append_after(out_buffer& out, std::string_view json, std::string_view text) {
  out.append(json);
  append_json_escaped(out, text);
}

}  // namespace

void cache::error_response(out_buffer& out, std::string_view id, const rpc_error& e) const {
  const auto k = static_cast<size_t>(e.kind);
  out.append(kRpcPrefix);
  out.append(e.kind == rpc_error_kind::parse_error ? null_id : id);
  out.append(rpc_error_mid_[k]);
  switch (e.kind) {
    case rpc_error_kind::invalid_request:
    case rpc_error_kind::header_mismatch:
    case rpc_error_kind::internal_error:
      if (e.detail.empty()) {
        out.append(kRpcErrors[k].message);
      } else {
        append_json_escaped(out, e.detail);
      }
      out.append("\"}}");
      return;
    case rpc_error_kind::invalid_params:
      append_after(out, kRpcErrors[k].message, e.detail);
      append_after(out, ": ", e.rule);
      append_after(out, R"(","data":{"argument":")", e.detail);
      append_after(out, R"(","rule":")", e.rule);
      out.append("\"}}}");
      return;
    case rpc_error_kind::unknown_tool:
      append_after(out, kRpcErrors[k].message, e.detail);
      out.append("\"}}");
      return;
    case rpc_error_kind::unsupported_version:
      append_after(out, kRpcErrors[k].message, e.detail);
      append_after(out, R"(","data":{"requested":")", e.detail);
      out.append(R"(","supported":)");
      out.append(supported_json_);
      out.append("}}}");
      return;
    case rpc_error_kind::rate_limited: {
      out.append(kRpcErrors[k].message);
      append_int(out, e.retry_after_secs);
      out.append(R"( second(s).","data":)");
      tool_error te;
      te.code = tool_error_code::rate_limited;
      te.retry_after_secs = e.retry_after_secs;
      tool_error_json(out, te);
      out.append("}}");
      return;
    }
    default:
      out.append(kRpcErrors[k].message);
      out.append("\"}}");
      return;
  }
}

void cache::result_response(out_buffer& out, std::string_view id,
                            std::string_view result_json) const {
  out.append(kRpcPrefix);
  out.append(id);
  out.append(R"(,"result":)");
  out.append(result_json);
  out.push_back('}');
}

void cache::keys_not_loaded(out_buffer& out, bool close, bool omit_body) const {
  head(out, 503, close);
  out.append("Retry-After: 1\r\n");
  const body_mark m = body_start(out);
  out.append(R"({"code":"unavailable","message":"This node has not loaded its keys from the quota )"
             R"(service yet (Redis cannot be reached). Retry shortly or use another node."})");
  body_end(out, m, omit_body);
}

void cache::unauthorized(out_buffer& out, bool close, bool key_presented,
                         std::string_view resource_metadata, bool omit_body) const {
  head(out, 401, close);
  if (resource_metadata.empty()) {
    out.append(key_presented ? std::string_view(kChallengeInvalidToken)
                             : std::string_view(kChallenge));
  } else {
    // An OAuth protected resource (RFC 9728 §5.1): where its metadata is, so an OAuth-only
    // client finds the authorization server from this answer alone.
    out.append(kChallenge.substr(0, kChallenge.size() - 2));
    out.append(", resource_metadata=\"");
    out.append(resource_metadata);
    out.append("\"");
    if (key_presented) {
      out.append(kOauthInvalidToken);
    }
    out.append("\r\n");
  }
  const body_mark m = body_start(out);
  out.append(unauthorized_body_);
  body_end(out, m, omit_body);
}

}  // namespace tollgate::envelope
