// The Streamable HTTP transport of /mcp: Origin, method, Accept, Content-Type, protocol
// version and size checks; legacy sessions; one response per POST (a single reply, a batch
// array, or 202 for only notifications and responses); the 401 and 429 answers; and
// decide_calls, the same steps up to each message's decision with nothing run or written.
#include <fmt/format.h>

#include "mcp/endpoint_impl.h"

namespace tollgate::mcp {

namespace {

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

// Accept: tollgate answers application/json only (never an event stream), so a request is
// served unless its Accept excludes JSON (RFC 9110 §12.5.1): no Accept field at all accepts
// anything; otherwise the most specific range that matches application/json decides
// (application/json, then application/*, then */*), and it must not carry q=0. Several Accept
// lines are one comma-separated list (§5.3).
// Header values come from the HTTP parser, which refuses every control byte but HTAB, so the
// media-type literals (lowercase letters, '/', '*', '-', all with bit 0x20 set) can be compared
// with ascii::iequals_lower's word-wise fold.

// True when a media range's parameters (after its first ';') give it q=0: "not acceptable".
bool q_is_zero(std::string_view params) {
  while (!params.empty()) {
    const size_t semi = params.find(';');
    std::string_view p = trim(params.substr(0, semi));
    params = semi == std::string_view::npos ? std::string_view() : params.substr(semi + 1);
    if (p.empty() || (p[0] != 'q' && p[0] != 'Q')) {
      continue;
    }
    const std::string_view rest = trim(p.substr(1));
    if (rest.empty() || rest.front() != '=') {
      continue;
    }
    const std::string_view v = trim(rest.substr(1));
    bool zero = !v.empty();
    for (char c : v) {
      zero = zero && (c == '0' || c == '.');
    }
    return zero;
  }
  return false;
}

// Folds one Accept line into `rank`/`zero`: the most specific range matching application/json
// seen so far (3 exact, 2 application/*, 1 */*, 0 none) and whether it says q=0.
void accept_scan(std::string_view accept, int& rank, bool& zero) {
  using ascii::iequals_lower;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view item = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    const size_t semi = item.find(';');
    const std::string_view range = trim(item.substr(0, semi));
    int r = 0;
    if (iequals_lower(range, "application/json")) {
      r = 3;
    } else if (iequals_lower(range, "application/*")) {
      r = 2;
    } else if (iequals_lower(range, "*/*")) {
      r = 1;
    }
    if (r == 0 || r < rank) {
      continue;
    }
    const bool z = semi != std::string_view::npos && q_is_zero(item.substr(semi + 1));
    // The same range twice: acceptable if either says so.
    zero = r == rank ? zero && z : z;
    rank = r;
  }
}

bool accept_ok(const http::request& req) {
  int rank = 0;
  bool zero = false;
  bool any = false;
  for (size_t i = 0; i < req.num_headers; ++i) {
    if (ascii::iequals_lower(req.headers[i].name, "accept")) {
      any = any || !trim(req.headers[i].value).empty();
      accept_scan(req.headers[i].value, rank, zero);
    }
  }
  return !any || (rank > 0 && !zero);
}

bool content_type_ok(std::string_view ct) {
  return ascii::iequals_lower(trim(ct.substr(0, ct.find(';'))), "application/json");
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

constexpr std::string_view kSessionNotFound =
    "Session not found: it has ended or expired; start a new one with initialize.";

// A POST refused whole, before or instead of its messages: answered with `status` and one
// JSON-RPC error.
struct refusal {
  int status = 0;  ///< 0: not refused
  rpc_error err;
  std::string_view id = envelope::null_id;
  bool answered = false;   ///< the body was read: the report holds the error's outcome
  std::string_view extra;  ///< header lines after the status line (405's Allow)
  outcome result = outcome::invalid_request;  ///< a body not read: what the report holds
};

// A request refused by the transport before its body was read, with the outcome the report
// holds (the access log and /metrics print it).
refusal invalid_request(int status, outcome result, std::string_view message,
                        std::string_view extra = {}) {
  return {status,
          rpc_error{rpc_error_kind::invalid_request, message, {}, 0},
          envelope::null_id,
          false,
          extra,
          result};
}

// A refusal of a body that was read (pass 1 or the rewind failed).
refusal whole_error(int status, rpc_error e, std::string_view id = envelope::null_id) {
  return {status, e, id, true, {}};
}

// What answering one HTTP request needs besides the dispatcher's context.
struct http_ctx {
  const envelope::cache& env;
  const endpoint_options& opts;
  endpoint::impl& im;
  host& h;
  out_buffer& out;
  bool close;
  bool omit_body;  // HEAD: the answer GET gets, without its body (RFC 9110 §9.3.2)
  int64_t now_ns;
};

http::response_info write_refusal(const http_ctx& x, const refusal& f) {
  x.im.report.add({}, nullptr, f.answered ? outcome_of(f.err) : f.result);
  x.env.head(x.out, f.status, x.close);
  x.out.append(f.extra);
  write_figures(x.im, x.out);
  envelope::body_mark bm = x.env.body_start(x.out);
  x.env.error_response(x.out, f.id, f.err);
  x.env.body_end(x.out, bm, x.omit_body);
  return {f.status, x.close};
}

http::response_info transport_error(const http_ctx& x, int status, outcome result,
                                    std::string_view message, std::string_view extra = {}) {
  return write_refusal(x, invalid_request(status, result, message, extra));
}

// CORS (Fetch standard): what a browser page on an allowed Origin may send and read. The
// request headers an MCP client sends (the key, the MCP headers, tollgate's deadline), and the
// response headers it reads (the session, the 401 challenge, the wait, the rate and quota
// figures).
constexpr std::string_view kCorsAllowMethods =
    "Access-Control-Allow-Methods: POST, GET, DELETE, OPTIONS\r\n";
constexpr std::string_view kCorsAllowHeaders =
    "Access-Control-Allow-Headers: Authorization, X-API-Key, Content-Type, Accept, "
    "Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID, "
    "Tollgate-Deadline\r\n";
constexpr std::string_view kCorsExposeHeaders =
    "Access-Control-Expose-Headers: Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, "
    "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, X-Quota-Limit, "
    "X-Quota-Used, X-Quota-Remaining, X-Quota-Reset, RateLimit-Policy, RateLimit\r\n";

// The lines every answer to an allowed Origin carries (`origin` is the request's, verbatim: it
// matched an allowed one exactly, or a loopback form).
void cors_lines(out_buffer& out, std::string_view origin) {
  out.append("Access-Control-Allow-Origin: ");
  out.append(origin);
  out.append("\r\n");
  out.append(kCorsExposeHeaders);
  out.append("Vary: Origin\r\n");
}

// GET, DELETE and the rest: a DELETE ends a session (when sessions are on); OPTIONS is a CORS
// preflight (answered 204 with what an allowed Origin may send); anything else is 405 (no
// server-initiated stream).
http::response_info answer_other_method(const http_ctx& x, const known_headers& hd,
                                        std::string_view method) {
  if (method == "OPTIONS") {
    out_buffer& extra = x.im.scratch;
    extra.clear();
    extra.append("Allow: POST, GET, DELETE, OPTIONS\r\n");
    if (const std::string_view origin = trim(hd.value(h_origin)); !origin.empty()) {
      // origin_allowed() passed before: a present Origin here is an allowed one.
      extra.append("Access-Control-Allow-Origin: ");
      extra.append(origin);
      extra.append("\r\n");
      extra.append(kCorsAllowMethods);
      extra.append(kCorsAllowHeaders);
      extra.append(kCorsExposeHeaders);
      extra.append("Access-Control-Max-Age: 600\r\n");
      extra.append(
          "Vary: Origin, Access-Control-Request-Method, Access-Control-Request-Headers\r\n");
    }
    x.env.empty_response(x.out, 204, extra.view(), x.close);
    extra.clear();
    return {204, x.close};
  }
  if (method == "DELETE" && x.opts.sessions != nullptr) {
    std::string_view sid = trim(hd.value(h_session));
    if (sid.empty()) {
      return transport_error(x, 400, outcome::invalid_request,
                             "Bad Request: DELETE needs an Mcp-Session-Id header.");
    }
    if (!x.opts.sessions->end(sid)) {
      return transport_error(x, 404, outcome::not_found, kSessionNotFound);
    }
    write_figures(x.im, x.im.scratch);  // headers are per response: write them via a bodiless reply
    x.env.empty_response(x.out, 204, x.im.scratch.view(), x.close);
    x.im.scratch.clear();
    return {204, x.close};
  }
  return transport_error(x, 405, outcome::method_not_allowed,
                         "Method Not Allowed: this server offers no server-initiated stream; "
                         "send JSON-RPC messages with POST.",
                         "Allow: POST\r\n");
}

// A POST's headers and size: Accept, Content-Type, MCP-Protocol-Version (into `rev`), the body
// limit.
refusal check_post(const http::request& req, const known_headers& hd, const endpoint_options& opts,
                   const endpoint::impl& im, revision& rev) {
  if (hd.has(h_accept) && !accept_ok(req)) {
    return invalid_request(406, outcome::not_acceptable,
                           "Not Acceptable: this server answers application/json only, and the "
                           "Accept header excludes it.");
  }
  if (!content_type_ok(hd.value(h_content_type))) {
    return invalid_request(415, outcome::not_acceptable,
                           "Unsupported Media Type: the body must be application/json.");
  }
  rev = revision::v2025_03_26;
  if (hd.has(h_protocol)) {
    std::string_view v = trim(hd.value(h_protocol));
    if (!envelope::parse_revision(v, rev)) {
      return {400,
              rpc_error{rpc_error_kind::unsupported_version, v, {}, 0},
              envelope::null_id,
              false,
              {}};
    }
  }
  if (req.body.size() > opts.max_body_bytes) {
    return invalid_request(413, outcome::too_large, im.too_large_message);
  }
  return {};
}

// A body pass 1 found to be no request at all (or a batch where the revision has none).
refusal check_shape(const parsed& p, revision rev, const endpoint::impl& im) {
  switch (p.shape) {
    case body_shape::too_large:
      return invalid_request(413, outcome::too_large, im.too_large_message);
    case body_shape::not_json:
      return whole_error(400, rpc_error{rpc_error_kind::parse_error, {}, {}, 0});
    case body_shape::not_request:
      return whole_error(400,
                         rpc_error{rpc_error_kind::invalid_request,
                                   p.batch_too_long ? im.batch_limit_message : std::string_view(),
                                   {},
                                   0});
    case body_shape::batch:
      if (rev != revision::v2025_03_26) {
        return whole_error(400, rpc_error{rpc_error_kind::invalid_request,
                                          "Invalid Request: batches are only accepted under "
                                          "protocol revision 2025-03-26.",
                                          {},
                                          0});
      }
      return {};
    case body_shape::single:
      return {};
  }
  return {};
}

// Sessions (legacy revisions): every request but initialize must name a live session (which
// touching keeps alive).
refusal check_session(const endpoint_options& opts, const known_headers& hd, bool is_initialize,
                      revision rev, int64_t now_ns) {
  if (opts.sessions == nullptr || is_initialize || envelope::is_modern(rev)) {
    return {};
  }
  std::string_view sid = trim(hd.value(h_session));
  if (sid.empty()) {
    return invalid_request(400, outcome::invalid_request,
                           "Bad Request: the Mcp-Session-Id header is required after initialize.");
  }
  if (!opts.sessions->touch(sid, now_ns)) {
    return invalid_request(404, outcome::not_found, kSessionNotFound);
  }
  return {};
}

bool batch_has_initialize(const endpoint::impl& im) {
  bool any = false;
  for (const message& m : im.batch) {
    any = any || m.mid == method_id::initialize;
  }
  return any;
}

http_facts facts_of(const known_headers& hd) {
  http_facts facts;
  facts.is_http = true;
  facts.has_mcp_method = hd.has(h_mcp_method);
  facts.mcp_method = trim(hd.value(h_mcp_method));
  facts.has_mcp_name = hd.has(h_mcp_name);
  facts.mcp_name = trim(hd.value(h_mcp_name));
  return facts;
}

// The steps a single reply and a batch share: the 202 of a body holding only notifications and
// responses, a minted session's header, the status line.

http::response_info answer_202(const http_ctx& x) {
  if (x.im.rate_charged && x.im.rate != nullptr) {
    x.im.rate->refund();  // notifications and responses never count toward the rate limit
  }
  out_buffer& scratch = x.im.scratch;
  scratch.clear();
  write_figures(x.im, scratch);
  x.env.empty_response(x.out, 202, scratch.view(), x.close);
  scratch.clear();
  return {202, x.close};
}

void mint_session(const http_ctx& x, revision rev) {
  x.im.session_header = "Mcp-Session-Id: " + x.opts.sessions->mint(rev, x.now_ns) + "\r\n";
}

void begin_response(const http_ctx& x, int status, bool with_session) {
  x.env.head(x.out, status, x.close);
  if (with_session) {
    x.out.append(x.im.session_header);
  }
}

http::response_info answer_single(const http_ctx& x, const dispatch_ctx& c, const known_headers& hd,
                                  const message& m) {
  endpoint::impl& im = x.im;
  const bool is_initialize = m.mid == method_id::initialize;
  if (refusal f = check_session(x.opts, hd, is_initialize, c.rev, x.now_ns); f.status != 0) {
    if (!(m.has_id && m.has_method) && !m.invalid && im.rate_charged && im.rate != nullptr) {
      im.rate->refund();  // a notification or response never counts (design §5), refused or not
    }
    return write_refusal(x, f);
  }
  reply r;
  if (!classify(m, r, im.duplicate_message)) {
    im.doc.rewind();
    od::object o;
    if (im.doc.get_object().get(o)) {
      return write_refusal(
          x, whole_error(500, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, m.id));
    }
    decide(c, m, &o, r);
  }
  if (r.k == reply::kind::none) {
    if (m.mid == method_id::cancelled) {
      im.doc.rewind();
      od::object o;
      if (!im.doc.get_object().get(o)) {
        note_notification(c, m, o);
      }
    }
    return answer_202(x);
  }
  prepare(r, x.h, x.im.rate);
  if (r.mint_session) {
    mint_session(x, r.rev);
  }
  begin_response(x, r.status, r.mint_session);
  const size_t headers_at = x.out.size();
  write_figures(x.im, x.out);
  const size_t headers_end = x.out.size();
  envelope::body_mark bm = x.env.body_start(x.out);
  const bool unbilled = write_body(c, r, x.h, x.out, m.method);
  x.env.body_end(x.out, bm);
  if (unbilled) {
    rewrite_headers(im, x.out, headers_at, headers_end);
  }
  return {r.status, x.close};
}

// The reply of one batch entry `m` (element `er` of the array). `rated`: an earlier entry was a
// request (the HTTP request's own rating covered it; each further one is rated here).
void decide_batch_entry(const http_ctx& x, const dispatch_ctx& c, const message& m,
                        simdjson::simdjson_result<od::value> er, bool& rated, reply& r) {
  if (m.has_id && m.has_method && !m.invalid) {
    if (rated && x.im.rate != nullptr) {
      if (admission a = x.im.rate->charge_extra();
          a.refusal == envelope::tool_error_code::rate_limited) {
        r = error_reply(m.id,
                        rpc_error{rpc_error_kind::rate_limited,
                                  {},
                                  {},
                                  a.retry_after_secs < 1 ? 1 : a.retry_after_secs},
                        200);
        rated = true;
        return;
      }
    }
    rated = true;
  }
  if (classify(m, r, x.im.duplicate_message)) {
    od::value v;
    od::object o;
    if (m.mid == method_id::cancelled && !er.get(v) && !v.get_object().get(o)) {
      note_notification(c, m, o);
    }
    return;
  }
  od::value v;
  od::object o;
  if (er.get(v) || v.get_object().get(o)) {
    r = error_reply(m.id, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, 200);
  } else {
    decide(c, m, &o, r);
  }
}

// Batch (2025-03-26): an array in, an array out; only notifications/responses → 202.
http::response_info answer_batch(const http_ctx& x, const dispatch_ctx& c,
                                 const known_headers& hd) {
  endpoint::impl& im = x.im;
  if (refusal f = check_session(x.opts, hd, batch_has_initialize(im), c.rev, x.now_ns);
      f.status != 0) {
    return write_refusal(x, f);
  }
  im.doc.rewind();
  od::array arr;
  if (im.doc.get_array().get(arr)) {
    return write_refusal(x, whole_error(500, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}));
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
    decide_batch_entry(x, c, m, er, rated, r);
    if (r.k == reply::kind::none) {
      continue;
    }
    if (r.mint_session && !minted) {
      mint_session(x, r.rev);
      minted = true;
    }
    if (written++ != 0) {
      body.push_back(',');
    }
    prepare(r, x.h, x.im.rate);
    write_body(c, r, x.h, body, m.method);
  }
  body.push_back(']');
  if (written == 0) {
    return answer_202(x);
  }
  begin_response(x, 200, minted);
  write_figures(x.im, x.out);
  envelope::body_mark bm = x.env.body_start(x.out);
  x.out.append(body.view());
  x.env.body_end(x.out, bm);
  body.clear();
  return {200, x.close};
}

// decide_calls' step for one message of a request pass 1 kept: a request that decides to a
// tools/call is handed to `v`. `element`: the message object, when it can be read.
template <class Element>
void visit_call(const dispatch_ctx& c, const message& m, Element&& element, call_visitor& v) {
  reply r;
  if (classify(m, r, c.im.duplicate_message)) {
    return;
  }
  od::object o;
  if (element(o)) {
    decide(c, m, &o, r);
    if (r.k == reply::kind::tool_call) {
      v.on_call(decided_call{*r.tool, c.im.args});
    }
  }
}

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

void endpoint::add_cors_headers(const http::request& req, out_buffer& out,
                                size_t response_start) const {
  const known_headers hd{req};
  if (!hd.has(h_origin) || req.method == "OPTIONS" || !origin_allowed(req)) {
    return;  // not a browser's cross-origin request, or a preflight (answered with its own)
  }
  const std::string_view origin = trim(hd.value(h_origin));
  const std::string_view written(out.data() + response_start, out.size() - response_start);
  const size_t line_end = written.find("\r\n");
  if (origin.empty() || line_end == std::string_view::npos) {
    return;
  }
  // After the status line: copy the rest aside, write the lines, put the rest back (only
  // browsers send Origin; agents' requests never pay for this).
  out_buffer& tail = impl_->cors_tail;
  tail.clear();
  const size_t at = response_start + line_end + 2;
  tail.append(std::string_view(out.data() + at, out.size() - at));
  out.resize(at);
  cors_lines(out, origin);
  out.append(tail.view());
  tail.clear();
}

// One request to /mcp:
//   1. Origin (DNS-rebinding protection), before anything else;
//   2. a method other than POST: DELETE ends a session, the rest is 405;
//   3. the POST's headers and size (check_post), then pass 1 over its body (check_shape);
//   4. its one message (answer_single) or its batch (answer_batch), each behind the session
//      check; a body of only notifications and responses is 202.
http::response_info endpoint::handle_http(const http::request& req, host& h, out_buffer& out,
                                          int64_t now_ns) {
  impl_->report = {};
  const bool post = req.method == "POST";  // (a POST is never HEAD: one comparison on its path)
  const bool head = !post && req.method == "HEAD";
  const http_ctx x{env_, opts_, *impl_, h, out, !req.keep_alive, head, now_ns};
  const known_headers hd{req};
  if (!origin_allowed(req)) {
    return transport_error(x, 403, outcome::forbidden, "Forbidden: this Origin is not allowed.");
  }
  if (!post) {
    return answer_other_method(x, hd, req.method);
  }
  revision rev = revision::v2025_03_26;
  if (refusal f = check_post(req, hd, opts_, *impl_, rev); f.status != 0) {
    return write_refusal(x, f);
  }
  const http_facts facts = facts_of(hd);
  const dispatch_ctx c{tools_, env_, *impl_, rev, facts, opts_.sessions != nullptr};
  parsed p = parse_body(*impl_, req.body, opts_.max_batch);
  if (refusal f = check_shape(p, rev, *impl_); f.status != 0) {
    return write_refusal(x, f);
  }
  if (p.shape == body_shape::single) {
    return answer_single(x, c, hd, p.single);
  }
  return answer_batch(x, c, hd);
}

// handle_http's steps 1-4 up to deciding each message, with nothing admitted or written.
void endpoint::decide_calls(const http::request& req, call_visitor& v, int64_t now_ns) {
  const known_headers hd{req};
  revision rev = revision::v2025_03_26;
  if (!origin_allowed(req) || req.method != "POST" ||
      check_post(req, hd, opts_, *impl_, rev).status != 0) {
    return;
  }
  impl& im = *impl_;
  const http_facts facts = facts_of(hd);
  const dispatch_ctx c{tools_, env_, im, rev, facts, opts_.sessions != nullptr};
  parsed p = parse_body(im, req.body, opts_.max_batch);
  const bool single = p.shape == body_shape::single;
  const bool is_initialize =
      single ? p.single.mid == method_id::initialize : batch_has_initialize(im);
  if (check_shape(p, rev, im).status != 0 ||
      check_session(opts_, hd, is_initialize, rev, now_ns).status != 0) {
    return;
  }
  im.doc.rewind();
  if (single) {
    visit_call(
        c, p.single, [&](od::object& o) { return !im.doc.get_object().get(o); }, v);
    return;
  }
  od::array arr;
  if (im.doc.get_array().get(arr)) {
    return;
  }
  size_t i = 0;
  for (auto er : arr) {
    if (i >= im.batch.size()) {
      break;
    }
    od::value e;
    visit_call(
        c, im.batch[i++], [&](od::object& o) { return !er.get(e) && !e.get_object().get(o); }, v);
  }
}

http::response_info endpoint::render_too_large(out_buffer& out) const {
  env_.head(out, 413, true);
  envelope::body_mark bm = env_.body_start(out);
  env_.error_response(out, envelope::null_id,
                      rpc_error{rpc_error_kind::invalid_request, impl_->too_large_message, {}, 0});
  env_.body_end(out, bm);
  return {413, true};
}

http::response_info endpoint::render_unauthorized(const http::request& req, out_buffer& out,
                                                  bool key_presented,
                                                  std::string_view resource_metadata) const {
  const bool close = !req.keep_alive;
  env_.unauthorized(out, close, key_presented, resource_metadata, req.method == "HEAD");
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
  impl_->report.add({}, nullptr, outcome::rate_limited);
  env_.head(out, 429, close);
  out.append("Retry-After: ");
  fmt::format_int f(retry_after_secs);
  out.append(f.data(), f.size());
  out.append("\r\n");
  write_figures(*impl_, out);
  envelope::body_mark bm = env_.body_start(out);
  env_.error_response(out, id, rpc_error{rpc_error_kind::rate_limited, {}, {}, retry_after_secs});
  env_.body_end(out, bm);
  return {429, close};
}

}  // namespace tollgate::mcp
