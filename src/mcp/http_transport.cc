// The Streamable HTTP transport of /mcp: Origin, method, Accept, Content-Type, protocol
// version and size checks; legacy sessions; one response per POST (a single reply, a batch
// array, or 202 for only notifications and responses); the 401 and 429 answers.
#include <fmt/format.h>

#include "mcp/endpoint_impl.h"
#include "tollgate/common/ascii.h"

namespace tollgate::mcp {

namespace od = simdjson::ondemand;
using envelope::revision;
using envelope::rpc_error;
using envelope::rpc_error_kind;

namespace {

using ascii::trim;

bool origin_is_loopback(std::string_view o) {
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (o.substr(0, scheme.size()) != scheme) {
      continue;
    }
    std::string_view rest = o.substr(scheme.size());
    for (std::string_view host : {std::string_view("localhost"), std::string_view("127.0.0.1"),
                                  std::string_view("[::1]")}) {
      if (rest.substr(0, host.size()) != host) {
        continue;
      }
      std::string_view port = rest.substr(host.size());
      if (port.empty()) {
        return true;
      }
      if (port[0] != ':' || port.size() == 1 || port.size() > 6) {
        continue;
      }
      bool digits = true;
      for (char c : port.substr(1)) {
        digits = digits && c >= '0' && c <= '9';
      }
      if (digits) {
        return true;
      }
    }
  }
  return false;
}

// Accept must admit both application/json and text/event-stream (wildcards count).
// Header values come from the HTTP parser, which refuses every control byte but HTAB, so the
// media-type literals (lowercase letters, '/', '*', '-', all with bit 0x20 set) can be compared
// with ascii::iequals_lower's word-wise fold.
void accept_scan(std::string_view accept, bool& json, bool& sse) {
  using ascii::iequals_lower;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view item = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    item = trim(item.substr(0, item.find(';')));
    if (iequals_lower(item, "*/*")) {
      json = sse = true;
    } else if (iequals_lower(item, "application/json") || iequals_lower(item, "application/*")) {
      json = true;
    } else if (iequals_lower(item, "text/event-stream") || iequals_lower(item, "text/*")) {
      sse = true;
    }
  }
}

bool accept_ok(const http::request& req, std::string_view first) {
  bool json = false;
  bool sse = false;
  accept_scan(first, json, sse);
  if (json && sse) {
    return true;
  }
  // RFC 9110 §5.3: several Accept lines are one comma-separated list (rare: looked at only
  // when the first line alone does not admit both).
  for (size_t i = 0; i < req.num_headers; ++i) {
    if (ascii::iequals_lower(req.headers[i].name, "accept")) {
      accept_scan(req.headers[i].value, json, sse);
    }
  }
  return json && sse;
}

bool content_type_ok(std::string_view ct) {
  return ascii::iequals_lower(trim(ct.substr(0, ct.find(';'))), "application/json");
}

http::response_info transport_error(const envelope::cache& env, host& h, out_buffer& out,
                                    int status, std::string_view message, bool close,
                                    std::string_view extra = {}) {
  env.head(out, status, close);
  out.append(extra);
  h.write_headers(out);
  envelope::body_mark bm = env.body_start(out);
  env.error_response(out, envelope::null_id, rpc_error{rpc_error_kind::invalid_request, message, {}, 0});
  env.body_end(out, bm);
  return {status, close};
}

// The request headers the transport reads; the parser indexed each (http::field).
constexpr http::field h_origin = http::field::origin;
constexpr http::field h_session = http::field::mcp_session_id;
constexpr http::field h_accept = http::field::accept;
constexpr http::field h_content_type = http::field::content_type;
constexpr http::field h_protocol = http::field::mcp_protocol_version;
constexpr http::field h_mcp_method = http::field::mcp_method;
constexpr http::field h_mcp_name = http::field::mcp_name;

struct known_headers {
  const http::request& req;
  bool has(http::field f) const noexcept { return req.field_line(f) != nullptr; }
  std::string_view value(http::field f) const noexcept { return req.field_value(f); }
};

}  // namespace

bool endpoint::origin_allowed(const http::request& req) const noexcept {
  const known_headers hd{req};
  if (!hd.has(h_origin)) {
    return true;
  }
  std::string_view origin = trim(hd.value(h_origin));
  bool ok = opts_.allow_loopback_origins && origin_is_loopback(origin);
  for (const auto& allowed : opts_.allowed_origins) {
    ok = ok || allowed == origin;
  }
  return ok;
}

http::response_info endpoint::handle_http(const http::request& req, host& h, out_buffer& out,
                                          int64_t now_ns) {
  const bool close = !req.keep_alive;
  impl& im = *impl_;
  const known_headers hd{req};

  // Origin: DNS-rebinding protection, before anything else.
  if (!origin_allowed(req)) {
    return transport_error(env_, h, out, 403, "Forbidden: this Origin is not allowed.", close);
  }

  if (req.method != "POST") {
    if (req.method == "DELETE" && opts_.sessions != nullptr) {
      std::string_view sid = trim(hd.value(h_session));
      if (sid.empty()) {
        return transport_error(env_, h, out, 400,
                               "Bad Request: DELETE needs an Mcp-Session-Id header.", close);
      }
      if (!opts_.sessions->end(sid)) {
        return transport_error(env_, h, out, 404,
                               "Session not found: it has ended or expired; start a new one with "
                               "initialize.",
                               close);
      }
      h.write_headers(im.scratch);  // headers are per response: write them via a bodiless reply
      env_.empty_response(out, 204, im.scratch.view(), close);
      im.scratch.clear();
      return {204, close};
    }
    return transport_error(env_, h, out, 405,
                           "Method Not Allowed: this server offers no server-initiated stream; "
                           "send JSON-RPC messages with POST.",
                           close, "Allow: POST\r\n");
  }

  if (!accept_ok(req, hd.value(h_accept))) {
    return transport_error(env_, h, out, 406,
                           "Not Acceptable: the client must accept both application/json and "
                           "text/event-stream.",
                           close);
  }
  if (!content_type_ok(hd.value(h_content_type))) {
    return transport_error(env_, h, out, 415,
                           "Unsupported Media Type: the body must be application/json.", close);
  }

  revision rev = revision::v2025_03_26;
  if (hd.has(h_protocol)) {
    std::string_view v = trim(hd.value(h_protocol));
    if (!envelope::parse_revision(v, rev)) {
      env_.head(out, 400, close);
      h.write_headers(out);
      envelope::body_mark bm = env_.body_start(out);
      env_.error_response(out, envelope::null_id,
                          rpc_error{rpc_error_kind::unsupported_version, v, {}, 0});
      env_.body_end(out, bm);
      return {400, close};
    }
  }

  if (req.body.size() > opts_.max_body_bytes) {
    return transport_error(env_, h, out, 413, "Content Too Large: the request body is too large.",
                           close);
  }

  http_facts facts;
  facts.is_http = true;
  facts.has_mcp_method = hd.has(h_mcp_method);
  facts.mcp_method = trim(hd.value(h_mcp_method));
  facts.has_mcp_name = hd.has(h_mcp_name);
  facts.mcp_name = trim(hd.value(h_mcp_name));
  dispatch_ctx c{tools_, env_, im, rev, facts, opts_.sessions != nullptr};

  parsed p = parse_body(im, req.body, opts_.max_batch);
  auto whole_error = [&](int status, rpc_error e, std::string_view id) {
    h.answered(answer_note{{}, nullptr, outcome_of(e)});
    env_.head(out, status, close);
    h.write_headers(out);
    envelope::body_mark bm = env_.body_start(out);
    env_.error_response(out, id, e);
    env_.body_end(out, bm);
    return http::response_info{status, close};
  };
  switch (p.shape) {
    case body_shape::too_large:
      return transport_error(env_, h, out, 413, "Content Too Large: the request body is too large.",
                             close);
    case body_shape::not_json:
      return whole_error(400, rpc_error{rpc_error_kind::parse_error, {}, {}, 0}, envelope::null_id);
    case body_shape::not_request:
      return whole_error(400,
                         rpc_error{rpc_error_kind::invalid_request,
                                   p.batch_too_long ? im.batch_limit_message : std::string_view(),
                                   {}, 0},
                         envelope::null_id);
    case body_shape::batch:
      if (rev != revision::v2025_03_26) {
        return whole_error(400,
                           rpc_error{rpc_error_kind::invalid_request,
                                     "Invalid Request: batches are only accepted under protocol "
                                     "revision 2025-03-26.",
                                     {}, 0},
                           envelope::null_id);
      }
      break;
    case body_shape::single:
      break;
  }

  // Sessions (legacy revisions): every request but initialize must name a live session.
  // Returns 0, or the status of the error response it wrote.
  auto session_gate = [&](bool is_initialize) -> int {
    if (opts_.sessions == nullptr || is_initialize || envelope::is_modern(rev)) {
      return 0;
    }
    std::string_view sid = trim(hd.value(h_session));
    if (sid.empty()) {
      return transport_error(env_, h, out, 400,
                             "Bad Request: the Mcp-Session-Id header is required after initialize.",
                             close)
          .status;
    }
    if (!opts_.sessions->touch(sid, now_ns)) {
      return transport_error(env_, h, out, 404,
                             "Session not found: it has ended or expired; start a new one with "
                             "initialize.",
                             close)
          .status;
    }
    return 0;
  };

  if (p.shape == body_shape::single) {
    const message& m = p.single;
    reply r;
    if (int st = session_gate(m.mid == method_id::initialize); st != 0) {
      return {st, close};
    }
    if (!classify(m, r, im.duplicate_message)) {
      im.doc.rewind();
      od::object o;
      if (im.doc.get_object().get(o)) {
        return whole_error(500, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, m.id);
      }
      decide(c, m, &o, r);
    }
    if (r.k == reply::kind::none) {
      if (im.rate_charged) {
        h.refund_rate();  // notifications and responses never count toward the rate limit
      }
      h.write_headers(im.scratch);
      env_.empty_response(out, 202, im.scratch.view(), close);
      im.scratch.clear();
      return {202, close};
    }
    prepare(r, h);
    env_.head(out, r.status, close);
    if (r.mint_session) {
      im.session_header = "Mcp-Session-Id: " + opts_.sessions->mint(r.rev, now_ns) + "\r\n";
      out.append(im.session_header);
    }
    const size_t headers_at = out.size();
    h.write_headers(out);
    const size_t headers_end = out.size();
    envelope::body_mark bm = env_.body_start(out);
    const bool unbilled = write_body(c, r, h, out, m.method);
    env_.body_end(out, bm);
    if (unbilled) {
      rewrite_headers(h, out, headers_at, headers_end, im.scratch);
    }
    return {r.status, close};
  }

  // Batch (2025-03-26): an array in, an array out; only notifications/responses → 202.
  bool any_initialize = false;
  for (const message& m : im.batch) {
    any_initialize = any_initialize || m.mid == method_id::initialize;
  }
  if (int st = session_gate(any_initialize); st != 0) {
    return {st, close};
  }
  im.doc.rewind();
  od::array arr;
  if (im.doc.get_array().get(arr)) {
    return whole_error(500, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, envelope::null_id);
  }
  out_buffer& body = im.scratch;
  body.clear();
  body.push_back('[');
  size_t i = 0;
  size_t written = 0;
  bool minted = false;
  bool rated = false;  // the HTTP request's own rating covers the batch's first request
  for (auto er : arr) {
    if (i >= im.batch.size()) {
      break;
    }
    const message& m = im.batch[i++];
    reply r;
    bool limited = false;
    if (m.has_id && m.has_method && !m.invalid) {
      if (rated) {
        if (admission a = h.rate_extra(); a.outcome == admission::kind::rate_limited) {
          r = error_reply(m.id,
                          rpc_error{rpc_error_kind::rate_limited, {}, {},
                                    a.retry_after_secs < 1 ? 1 : a.retry_after_secs},
                          200);
          limited = true;
        }
      }
      rated = true;
    }
    if (!limited && !classify(m, r, im.duplicate_message)) {
      od::value v;
      od::object o;
      if (er.get(v) || v.get_object().get(o)) {
        r = error_reply(m.id, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, 200);
      } else {
        decide(c, m, &o, r);
      }
    }
    if (r.k == reply::kind::none) {
      continue;
    }
    if (r.mint_session && !minted) {
      im.session_header = "Mcp-Session-Id: " + opts_.sessions->mint(r.rev, now_ns) + "\r\n";
      minted = true;
    }
    if (written++ != 0) {
      body.push_back(',');
    }
    prepare(r, h);
    write_body(c, r, h, body, m.method);
  }
  body.push_back(']');
  if (written == 0) {
    if (im.rate_charged) {
      h.refund_rate();  // notifications and responses never count toward the rate limit
    }
    body.clear();
    h.write_headers(body);
    env_.empty_response(out, 202, body.view(), close);
    body.clear();
    return {202, close};
  }
  env_.head(out, 200, close);
  if (minted) {
    out.append(im.session_header);
  }
  h.write_headers(out);
  envelope::body_mark bm = env_.body_start(out);
  out.append(body.view());
  env_.body_end(out, bm);
  body.clear();
  return {200, close};
}

http::response_info endpoint::render_unauthorized(const http::request& req, out_buffer& out,
                                                  bool key_presented) const {
  const bool close = !req.keep_alive;
  env_.unauthorized(out, close, key_presented);
  return {401, close};
}

http::response_info endpoint::render_rate_limited(const http::request& req, host& h,
                                                  out_buffer& out, int64_t retry_after_secs,
                                                  int64_t now_ns) {
  const bool close = !req.keep_alive;
  if (retry_after_secs < 1) {
    retry_after_secs = 1;
  }
  std::string_view id = envelope::null_id;
  if (req.body.size() <= opts_.max_body_bytes) {
    parsed p = parse_body(*impl_, req.body, opts_.max_batch);
    if (p.shape == body_shape::single && p.single.has_id && !p.single.invalid) {
      id = p.single.id;
    }
    // Only notifications and responses: they do not count, so they are not refused either;
    // answered as any POST is (its checks, then 202), with nothing charged to give back.
    bool exempt = p.shape == body_shape::single || p.shape == body_shape::batch;
    if (p.shape == body_shape::single) {
      exempt = !p.single.invalid && !(p.single.has_id && p.single.has_method);
    }
    for (const message& m : impl_->batch) {
      exempt = exempt && !m.invalid && !(m.has_id && m.has_method);
    }
    if (exempt) {
      impl_->rate_charged = false;
      http::response_info info = handle_http(req, h, out, now_ns);
      impl_->rate_charged = true;
      return info;
    }
  }
  env_.head(out, 429, close);
  out.append("Retry-After: ");
  fmt::format_int f(retry_after_secs);
  out.append(f.data(), f.size());
  out.append("\r\n");
  h.write_headers(out);
  envelope::body_mark bm = env_.body_start(out);
  env_.error_response(out, id, rpc_error{rpc_error_kind::rate_limited, {}, {}, retry_after_secs});
  env_.body_end(out, bm);
  return {429, close};
}

}  // namespace tollgate::mcp
