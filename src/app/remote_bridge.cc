// The protocol half of the stdio bridge (see remote_bridge.h).
#include "remote_bridge.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

#include "tollgate/envelope/outcome_table.h"

namespace tollgate::app::remote {
namespace {

namespace od = simdjson::ondemand;

// One bridge per process, one thread: the parsers are kept, so their buffers are allocated once
// (grown to the largest message seen) rather than per message.
od::parser& line_parser() {
  static thread_local od::parser p;
  return p;
}
simdjson::dom::parser& answer_parser() {
  static thread_local simdjson::dom::parser p;
  return p;
}

constexpr std::string_view kMetaVersionKey = "io.modelcontextprotocol/protocolVersion";

// retry_after_secs when nothing better is known: "retry shortly" (as the server's own
// `unavailable`), and the least a 429 can mean.
constexpr int64_t kDefaultRetrySecs = 1;

std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Calls f(key, field) for each member of `o` while f returns true. False: a member could not be
// read, or f said stop.
template <class F>
bool each_member(od::object& o, F&& f) {
  for (auto fr : o) {
    od::field fl;
    std::string_view key;
    if (std::move(fr).get(fl) || fl.unescaped_key().get(key) || !f(key, fl)) {
      return false;
    }
  }
  return true;
}

// params of a request: name (tools/call) and the _meta protocol version.
void read_params(od::value v, message_facts& m) {
  od::object o;
  if (v.get_object().get(o)) {
    return;
  }
  each_member(o, [&](std::string_view key, od::field& f) {
    if (key == "name") {
      std::string_view s;
      if (!f.value().get_string().get(s)) {
        m.tool = s;
      }
    } else if (key == "_meta") {
      od::object meta;
      if (f.value().get_object().get(meta)) {
        return true;
      }
      return each_member(meta, [&](std::string_view mk, od::field& mf) {
        std::string_view s;
        if (mk == kMetaVersionKey && !mf.value().get_string().get(s)) {
          m.meta_version = s;
        }
        return true;
      });
    }
    return true;
  });
}

bool read_message(od::value v, message_facts& m) {
  od::object o;
  if (v.get_object().get(o)) {
    return false;
  }
  std::string id;
  const bool read = each_member(o, [&](std::string_view key, od::field& f) {
    od::value fv = f.value();
    od::json_type t;
    if (fv.type().get(t)) {
      return false;
    }
    if (key == "id") {
      if (t == od::json_type::string || t == od::json_type::number) {
        id = trim(fv.raw_json_token());
      }
    } else if (key == "method") {
      std::string_view s;
      if (t == od::json_type::string && !fv.get_string().get(s)) {
        m.method = s;
      }
    } else if (key == "params") {
      read_params(fv, m);
    }
    return true;
  });
  if (!read) {
    return false;
  }
  if (!m.method.empty()) {
    m.id = std::move(id);
  }
  return true;
}

// Each message a JSON answer body carries, as complete JSON texts: the body itself (a message or
// a batch's array), or the data of each event of a text/event-stream body.
bool is_event_stream(std::string_view content_type) {
  constexpr std::string_view k = "text/event-stream";
  if (content_type.size() < k.size()) {
    return false;
  }
  for (size_t i = 0; i < k.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(content_type[i])) != k[i]) {
      return false;
    }
  }
  return true;
}

// The data of each event of an SSE body (WHATWG HTML §9.2.6): lines end in CRLF, LF or CR; a
// `data:` field appends its value (one leading space dropped) and a newline; a blank line
// dispatches the event. Comments and other fields are ignored.
std::vector<std::string> sse_events(std::string_view body) {
  std::vector<std::string> events;
  std::string data;
  bool have_data = false;
  size_t i = 0;
  auto dispatch = [&] {
    if (have_data) {
      if (!data.empty() && data.back() == '\n') {
        data.pop_back();
      }
      events.push_back(std::move(data));
      data.clear();
      have_data = false;
    }
  };
  while (i < body.size()) {
    size_t e = i;
    while (e < body.size() && body[e] != '\n' && body[e] != '\r') {
      ++e;
    }
    std::string_view line = body.substr(i, e - i);
    if (e < body.size() && body[e] == '\r' && e + 1 < body.size() && body[e + 1] == '\n') {
      ++e;
    }
    i = e + 1;
    if (line.empty()) {
      dispatch();
      continue;
    }
    std::string_view field = line;
    std::string_view value;
    if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
      field = line.substr(0, colon);
      value = line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') {
        value.remove_prefix(1);
      }
    }
    if (field == "data") {
      data.append(value);
      data.push_back('\n');
      have_data = true;
    }
  }
  dispatch();
  return events;
}

// True when `text` is a JSON-RPC message (an object with "jsonrpc") or a non-empty array of
// them. Parsed whole, so a truncated or otherwise malformed answer is never forwarded.
bool is_jsonrpc(simdjson::dom::parser& parser, std::string_view text) {
  simdjson::dom::element doc;
  if (parser.parse(text.data(), text.size()).get(doc)) {
    return false;
  }
  auto is_message = [](simdjson::dom::element e) {
    simdjson::dom::object o;
    return !e.get_object().get(o) && !o["jsonrpc"].error();
  };
  simdjson::dom::array a;
  if (!doc.get_array().get(a)) {
    if (a.size() == 0) {
      return false;
    }
    for (simdjson::dom::element e : a) {
      if (!is_message(e)) {
        return false;
      }
    }
    return true;
  }
  return is_message(doc);
}

// The messages of a body, or false when it holds none that is well-formed JSON-RPC.
bool answer_messages(const http_answer& a, std::vector<std::string>& out) {
  simdjson::dom::parser& parser = answer_parser();
  if (is_event_stream(a.content_type)) {
    for (std::string& e : sse_events(a.body)) {
      if (!is_jsonrpc(parser, e)) {
        return false;
      }
      out.push_back(std::move(e));
    }
    return !out.empty();
  }
  const std::string_view body = trim(a.body);
  if (!is_jsonrpc(parser, body)) {
    return false;
  }
  out.emplace_back(body);
  return true;
}

// Appends one message and its line end. JSON text never holds a raw CR or LF inside a string,
// so one outside a string is whitespace and becomes a space: the line stays one message.
void put_line(out_buffer& out, std::string_view msg) {
  const size_t at = out.size();
  out.append(msg);
  for (const char c : {'\n', '\r'}) {
    char* p = out.data() + at;
    char* const end = out.data() + out.size();
    while ((p = static_cast<char*>(std::memchr(p, c, static_cast<size_t>(end - p)))) != nullptr) {
      *p++ = ' ';
    }
  }
  out.push_back('\n');
}

envelope::revision revision_of(const message_facts& m, const bridge_view& v) {
  envelope::revision r;
  if (!m.meta_version.empty() && envelope::parse_revision(m.meta_version, r)) {
    return r;
  }
  return v.negotiated;
}

// The quota figures of a 429 body's error.data (the rate_limited object), when there.
void read_figures(std::string_view body, envelope::tool_error& te) {
  simdjson::dom::parser& parser = answer_parser();
  simdjson::dom::element doc;
  if (parser.parse(body.data(), body.size()).get(doc)) {
    return;
  }
  simdjson::dom::object data;
  if (doc["error"]["data"].get_object().get(data)) {
    return;
  }
  auto figure = [&](const char* name, int64_t& into) {
    int64_t n;
    if (!data[name].get_int64().get(n) && n >= 0) {
      into = n;
    }
  };
  figure("retry_after_secs", te.retry_after_secs);
  figure("quota_limit", te.quota_limit);
  figure("quota_used", te.quota_used);
  figure("quota_remaining", te.quota_remaining);
}

// Writes, for each request of `line`, the bridge's own answer (a batch as one array), produced
// by `one(message, out)`.
template <class Fn>
void answer_each_request(const line_facts& line, out_buffer& out, Fn one) {
  if (!line.batch) {
    if (!line.messages.empty() && line.messages[0].is_request()) {
      one(line.messages[0], out);
      out.push_back('\n');
    }
    return;
  }
  bool first = true;
  for (const message_facts& m : line.messages) {
    if (!m.is_request()) {
      continue;
    }
    out.push_back(first ? '[' : ',');
    first = false;
    one(m, out);
  }
  if (!first) {
    out.append("]\n");
  }
}

// A transport-level refusal (400, 403, 404, 413, 415...) answers with a JSON-RPC error whose id
// is null, as the server has not read the request's; a stdio client would wait for its id
// forever. For a single request, that error is written under the request's id: its code,
// message and data unchanged. False (nothing written) when `msg` is not such an error.
bool put_rekeyed(out_buffer& out, std::string_view msg, std::string_view id) {
  simdjson::dom::parser& parser = answer_parser();
  simdjson::dom::element doc;
  simdjson::dom::element err;
  if (parser.parse(msg.data(), msg.size()).get(doc) || !doc["id"].is_null() ||
      doc["error"].get(err) || !err.is_object()) {
    return false;
  }
  out.append(R"({"jsonrpc":"2.0","id":)");
  out.append(id);
  out.append(R"(,"error":)");
  out.append(simdjson::minify(err));
  out.append("}\n");
  return true;
}

}  // namespace

bool line_facts::any_request() const noexcept {
  return std::any_of(messages.begin(), messages.end(),
                     [](const message_facts& m) { return m.is_request(); });
}

line_facts inspect(std::string_view line) {
  line_facts lf;
  od::parser& parser = line_parser();
  od::document doc;
  if (parser.iterate(line.data(), line.size(), line.size() + simdjson::SIMDJSON_PADDING).get(doc)) {
    return lf;
  }
  od::json_type t;
  if (doc.type().get(t)) {
    return lf;
  }
  if (t == od::json_type::array) {
    od::array a;
    if (doc.get_array().get(a)) {
      return lf;
    }
    lf.batch = true;
    for (auto er : a) {
      od::value v;
      if (er.get(v)) {
        return lf;
      }
      message_facts m;
      if (read_message(v, m)) {
        lf.messages.push_back(std::move(m));
      }
    }
    lf.parsed = true;
    return lf;
  }
  od::value v;
  if (doc.get_value().get(v)) {
    return lf;
  }
  message_facts m;
  lf.parsed = read_message(v, m);
  if (lf.parsed) {
    lf.messages.push_back(std::move(m));
  }
  return lf;
}

// Every request of the line answered with the bridge's own error, saying `message` (a sentence
// naming the server and the cause). `retry` >= 1: a transient failure: a tools/call gets the tool
// error `unavailable` with retry_after_secs, another request -32603. `retry` < 0: a refusal no
// retry mends: every request gets -32603, with no retry_after_secs anywhere.
verdict answer_failed(const line_facts& line, const bridge_view& view, int64_t retry,
                      const std::string& message, std::string why, out_buffer& out,
                      std::string& reason) {
  reason = std::move(why);
  answer_each_request(line, out, [&](const message_facts& m, out_buffer& o) {
    if (retry >= 1 && m.is_tools_call()) {
      envelope::tool_error te;
      te.code = envelope::tool_error_code::unavailable;
      te.retry_after_secs = retry;
      te.message = message;
      view.env.tool_error_response(o, m.id, revision_of(m, view), te);
    } else {
      view.env.error_response(
          o, m.id, envelope::rpc_error{envelope::rpc_error_kind::internal_error, message, {}, 0});
    }
  });
  return retry >= 1 ? verdict::failed : verdict::refused;
}

// The "message" of a JSON object body (tollgate's REST-style errors: {"code","message"}), or
// empty; at most 300 bytes of it.
std::string body_message(const http_answer& a) {
  simdjson::dom::parser& parser = answer_parser();
  simdjson::dom::element doc;
  std::string_view m;
  const std::string_view body = trim(a.body);
  if (body.empty() || body.front() != '{' || parser.parse(body.data(), body.size()).get(doc) ||
      doc["message"].get_string().get(m)) {
    return {};
  }
  return std::string(m.substr(0, 300));
}

// What a status that no retry mends means for the bridge's user: the transport's refusals,
// outside the error model (the outcome table's whole refusals, 401 and 429, are read from the
// table in translate()), so a hint to the user rather than an outcome.
struct refusal_hint_row {
  long status;
  std::string_view hint;
};
constexpr std::array<refusal_hint_row, 5> kRefusalHints = {{
    {404, "is the URL the server's MCP endpoint (https://HOST/mcp)?"},
    {405, "is the URL the server's MCP endpoint (https://HOST/mcp)?"},
    {413, "the message is larger than the server accepts (its server.max_body_bytes)."},
    {431, "the request's headers are larger than the server accepts."},
    {403, "the server (or a proxy in front of it) forbids this request."},
}};

std::string_view refusal_hint(long status) {
  for (const refusal_hint_row& r : kRefusalHints) {
    if (r.status == status) {
      return r.hint;
    }
  }
  return status >= 300 && status < 400
             ? "the server redirects elsewhere; give the bridge the final URL."
             : "the server could not accept the request as it is.";
}

// Transport failures (nothing usable came back): each cause its own sentence.
verdict answer_transport_failure(const line_facts& line, const http_answer& a,
                                 const bridge_view& view, out_buffer& out, std::string& reason) {
  constexpr int64_t retry = kDefaultRetrySecs;
  std::string message;
  if (a.timed_out) {
    message = fmt::format(
        "The tollgate server at {} did not answer in time ({}), so the bridge gave up on this "
        "call and cancelled it; a call the server had not started is not billed. This is an "
        "outage or a slow network, not an empty result; retry in {} second(s).",
        view.url, a.failure, retry);
  } else if (a.not_sent) {
    message = fmt::format(
        "The tollgate server at {} cannot be reached ({}), so this call was not sent and not "
        "billed. This is an outage, not an empty result; retry in {} second(s).",
        view.url, a.failure, retry);
  } else {
    message = fmt::format(
        "The connection to the tollgate server at {} failed before an answer came back ({}). "
        "This is an outage, not an empty result; retry in {} second(s).",
        view.url, a.failure, retry);
  }
  return answer_failed(line, view, retry, message, std::string(a.failure), out, reason);
}

// A 429: a single request other than tools/call gets the server's own JSON-RPC error; every
// other request the tool error or JSON-RPC error `rate_limited` with the wait.
verdict answer_rate_limited(const line_facts& line, const http_answer& a, const bridge_view& view,
                            out_buffer& out) {
  std::vector<std::string> msgs;
  const bool has_body = answer_messages(a, msgs);
  // The one case that passes through: a single request other than tools/call, whose answer
  // is the JSON-RPC error the server wrote.
  if (!line.batch && has_body && !line.messages.empty() && line.messages[0].is_request() &&
      !line.messages[0].is_tools_call()) {
    for (const std::string& m : msgs) {
      put_line(out, m);
    }
    return verdict::answered;
  }
  envelope::tool_error te;
  te.code = envelope::tool_error_code::rate_limited;
  if (has_body && !msgs.empty()) {
    read_figures(msgs.front(), te);
  }
  if (a.retry_after_secs >= 1) {
    te.retry_after_secs = a.retry_after_secs;  // the header is the figure of record
  }
  if (te.retry_after_secs < 1) {
    te.retry_after_secs = kDefaultRetrySecs;
  }
  answer_each_request(line, out, [&](const message_facts& m, out_buffer& o) {
    if (m.is_tools_call()) {
      view.env.tool_error_response(o, m.id, revision_of(m, view), te);
    } else {
      view.env.error_response(
          o, m.id,
          envelope::rpc_error{envelope::rpc_error_kind::rate_limited, {}, {}, te.retry_after_secs});
    }
  });
  return verdict::answered;
}

verdict translate(const line_facts& line, const http_answer& a, const bridge_view& view,
                  out_buffer& out, std::string& reason) {
  const int64_t retry = a.retry_after_secs >= 1 ? a.retry_after_secs : kDefaultRetrySecs;
  // A server fault or a malformed answer: worth a retry.
  auto fail = [&](std::string why, std::string message) {
    return answer_failed(line, view, retry, message, std::move(why), out, reason);
  };
  // A refusal the same request would get again: no retry_after_secs.
  auto refuse = [&]() {
    const std::string said = body_message(a);
    const std::string message = fmt::format(
        "The tollgate server at {} refused this request with HTTP {}{}{}; {} Retrying will not "
        "help.",
        view.url, a.status, said.empty() ? "" : ": ", said, refusal_hint(a.status));
    return answer_failed(line, view, -1, message, fmt::format("HTTP {}", a.status), out, reason);
  };
  if (a.transport_failed) {
    return answer_transport_failure(line, a, view, out, reason);
  }
  // A request refused whole, as the outcome table says the server writes it.
  const envelope::outcome_row* whole = envelope::row_of_http_status(static_cast<int>(a.status));
  const outcome refused = whole != nullptr ? whole->result : outcome::ok;
  if (refused == outcome::invalid_key) {
    return verdict::unauthorized;
  }
  if (a.status >= 500) {
    const std::string said = body_message(a);
    return fail(fmt::format("HTTP {}", a.status),
                fmt::format("The tollgate server at {} answered HTTP {}{}{}. This is an outage on "
                            "its side, not an empty result; retry in {} second(s).",
                            view.url, a.status, said.empty() ? "" : ": ", said, retry));
  }
  if (refused == outcome::rate_limited) {
    return answer_rate_limited(line, a, view, out);
  }
  if (a.status >= 200 && a.status < 300 && trim(a.body).empty()) {
    // 202 (or any bodiless success): right for notifications and responses, which get no
    // answer; a request left unanswered would hang its client, so it is an error.
    if (line.any_request()) {
      return fail(fmt::format("HTTP {} with no body to a request", a.status),
                  fmt::format("The tollgate server at {} answered HTTP {} with no answer to this "
                              "request; retry in {} second(s).",
                              view.url, a.status, retry));
    }
    return verdict::answered;
  }
  std::vector<std::string> msgs;
  if (!answer_messages(a, msgs)) {
    if ((a.status >= 300 && a.status < 400) || (a.status >= 400 && a.status < 500)) {
      return refuse();
    }
    return fail(fmt::format("HTTP {} with a body that is not JSON-RPC", a.status),
                fmt::format("The tollgate server at {} answered HTTP {} with a body that is not "
                            "JSON-RPC (a proxy, or a URL that is not its MCP endpoint?); retry in "
                            "{} second(s).",
                            view.url, a.status, retry));
  }
  if (a.status >= 400 && !line.batch && msgs.size() == 1 && line.messages.size() == 1 &&
      line.messages[0].is_request() && put_rekeyed(out, msgs[0], line.messages[0].id)) {
    return verdict::answered;
  }
  for (const std::string& m : msgs) {
    put_line(out, m);
  }
  return verdict::answered;
}

std::string negotiated_version(const http_answer& a) {
  if (a.transport_failed || a.status != 200) {
    return {};
  }
  std::vector<std::string> msgs;
  if (!answer_messages(a, msgs)) {
    return {};
  }
  simdjson::dom::parser& parser = answer_parser();
  for (const std::string& m : msgs) {
    simdjson::dom::element doc;
    std::string_view v;
    if (!parser.parse(m).get(doc) && !doc["result"]["protocolVersion"].get_string().get(v)) {
      return std::string(v);
    }
  }
  return {};
}

std::string header_value(std::string_view v) {
  constexpr std::string_view prefix = "=?base64?";
  constexpr std::string_view suffix = "?=";
  bool plain = !v.empty() && v.front() != ' ' && v.front() != '\t' && v.back() != ' ' &&
               v.back() != '\t' && !(v.starts_with(prefix) && v.ends_with(suffix));
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (!(u == '\t' || (u >= 0x20 && u <= 0x7e))) {
      plain = false;
      break;
    }
  }
  if (plain) {
    return std::string(v);
  }
  static constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s(prefix);
  size_t i = 0;
  for (; i + 3 <= v.size(); i += 3) {
    const uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(v[i])) << 16 |
                       static_cast<uint32_t>(static_cast<unsigned char>(v[i + 1])) << 8 |
                       static_cast<unsigned char>(v[i + 2]);
    s += kB64[n >> 18];
    s += kB64[(n >> 12) & 63];
    s += kB64[(n >> 6) & 63];
    s += kB64[n & 63];
  }
  if (const size_t rest = v.size() - i; rest > 0) {
    uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(v[i])) << 16;
    if (rest == 2) {
      n |= static_cast<uint32_t>(static_cast<unsigned char>(v[i + 1])) << 8;
    }
    s += kB64[n >> 18];
    s += kB64[(n >> 12) & 63];
    s += rest == 2 ? kB64[(n >> 6) & 63] : '=';
    s += '=';
  }
  s += suffix;
  return s;
}

}  // namespace tollgate::app::remote
