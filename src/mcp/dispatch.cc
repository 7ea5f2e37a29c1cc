// Deciding and writing replies (pass 2, see endpoint.cc): a message pass 1 classified gets its
// reply decided (header/body agreement, the _meta protocol version, method routing, tools/call's
// name and arguments), prepared (admission through the host) and written (the tool runs here).
#include "mcp/endpoint_impl.h"
#include "tollgate/common/json_out.h"
#include "tollgate/envelope/outcome_table.h"

namespace tollgate::mcp {

namespace {

constexpr std::string_view kMetaVersionKey = "io.modelcontextprotocol/protocolVersion";

}  // namespace

reply error_reply(std::string_view id, rpc_error e, int status) {
  reply r;
  r.k = reply::kind::error;
  r.id = id;
  r.err = e;
  r.status = status;
  return r;
}

namespace {

reply header_mismatch(std::string_view id, std::string_view message) {
  return error_reply(id, rpc_error{rpc_error_kind::header_mismatch, message, {}, 0}, 400);
}

// Header/body agreement (2026-07-28 over HTTP): Mcp-Method must match the body's method.
bool method_header_agrees(const dispatch_ctx& c, const message& m, reply& r) {
  if (!c.http.has_mcp_method) {
    r = header_mismatch(m.id, "Header mismatch: the Mcp-Method header is required.");
    return false;
  }
  if (c.http.mcp_method != m.method) {
    r = header_mismatch(
        m.id, "Header mismatch: the Mcp-Method header does not match the method in the body.");
    return false;
  }
  return true;
}

// The _meta protocol version: 2026-07-28 requires it in every request, a string naming the
// revision. Over HTTP under that revision (the header's) it must be there and agree with the
// header; on stdio, which has no headers, it selects the revision of this one message (`modern`,
// r.rev), and its absence means a legacy message. `params`: null when the request has none.
// False with `r` set when it is refused: missing or not a string (-32602, HTTP 400), a revision
// not spoken (-32022), a header it contradicts (-32020).
bool meta_version_agrees(const dispatch_ctx& c, od::object* params, bool& modern, reply& r) {
  od::value meta;
  od::object mo;
  od::value ver;
  const bool present = params != nullptr && !member(*params, "_meta", c.im.body_has_escape, meta) &&
                       !meta.get_object().get(mo) &&
                       !member(mo, kMetaVersionKey, c.im.body_has_escape, ver);
  const bool required = modern && c.http.is_http;
  std::string_view v;
  if (!present && !required) {
    return true;
  }
  if (!present || ver.get_string().get(v)) {
    r = error_reply(r.id,
                    rpc_error{rpc_error_kind::invalid_params, "_meta",
                              "must hold io.modelcontextprotocol/protocolVersion, a string naming "
                              "the protocol revision (\"2026-07-28\"), in every request of "
                              "revision 2026-07-28",
                              0},
                    c.http.is_http ? 400 : 200);
    return false;
  }
  revision declared;
  if (!envelope::parse_revision(v, declared)) {
    r = error_reply(r.id, rpc_error{rpc_error_kind::unsupported_version, v, {}, 0}, 400);
    return false;
  }
  if (!c.http.is_http) {
    if (envelope::is_modern(declared)) {
      modern = true;
      r.rev = declared;
    }
  } else if (declared != c.rev) {
    r = header_mismatch(r.id,
                        "Header mismatch: the MCP-Protocol-Version header does not match "
                        "io.modelcontextprotocol/protocolVersion in _meta.");
    return false;
  }
  return true;
}

// initialize (handshake revisions only): the revision asked for when supported, else the latest.
void decide_initialize(const dispatch_ctx& c, od::object* params, reply& r) {
  revision negotiated = revision::v2025_11_25;  // latest handshake revision
  if (params != nullptr) {
    od::value pv;
    std::string_view v;
    revision asked;
    if (!member(*params, "protocolVersion", c.im.body_has_escape, pv) && !pv.get_string().get(v) &&
        envelope::parse_revision(v, asked) && !envelope::is_modern(asked)) {
      negotiated = asked;
    }
  }
  r.k = reply::kind::result;
  r.result = c.env.initialize_result(negotiated);
  r.rev = negotiated;
  r.mint_session = c.sessions_on;
}

// tools/call: a string name (matching Mcp-Name over 2026-07-28 HTTP) of a registered tool, and
// arguments its specs accept (into im.args).
void decide_tools_call(const dispatch_ctx& c, od::object* params, bool modern, reply& r) {
  const std::string_view id = r.id;
  if (params == nullptr) {
    r = error_reply(id,
                    rpc_error{rpc_error_kind::invalid_params, "params",
                              "must be an object with name and arguments", 0},
                    200);
    return;
  }
  od::value nv;
  std::string_view name;
  od::json_type nt;
  if (member(*params, "name", c.im.body_has_escape, nv) || nv.type().get(nt) ||
      nt != od::json_type::string || nv.get_string().get(name)) {
    r = error_reply(
        id,
        rpc_error{rpc_error_kind::invalid_params, "name", "is required and must be a string", 0},
        200);
    return;
  }
  if (modern && c.http.is_http && (!c.http.has_mcp_name || c.http.mcp_name != name)) {
    r = header_mismatch(id,
                        c.http.has_mcp_name
                            ? "Header mismatch: the Mcp-Name header does not match params.name."
                            : "Header mismatch: the Mcp-Name header is required for tools/call.");
    return;
  }
  const tool_def* t = c.tools.find(name);
  if (t == nullptr) {
    r = error_reply(id, rpc_error{rpc_error_kind::unknown_tool, name, {}, 0}, 200);
    return;
  }
  od::value av;
  auto e = member(*params, "arguments", c.im.body_has_escape, av);
  bool args_null = false;
  if (!e) {
    bool is_null = false;
    args_null = !av.is_null().get(is_null) && is_null;
  }
  if (!validate_arguments(c, *t, (e || args_null) ? nullptr : &av, id, r)) {
    return;
  }
  r.k = reply::kind::tool_call;
  r.tool = t;
}

}  // namespace

// Pass 2 for one request (m.has_id, m.has_method, valid): decides its reply. `o` is the message
// object, positioned at its start.
void decide(const dispatch_ctx& c, const message& m, od::object* o, reply& r) {
  const std::string_view id = m.id;
  bool modern = envelope::is_modern(c.rev);
  r = reply{};
  r.id = id;
  r.rev = c.rev;
  if (modern && c.http.is_http && !method_header_agrees(c, m, r)) {
    return;
  }
  // A params member given twice (name, arguments, _meta...): refused, naming it.
  if (!m.params_duplicate.empty() && m.mid != method_id::unknown) {
    r = error_reply(id,
                    rpc_error{rpc_error_kind::invalid_params, m.params_duplicate,
                              "must not appear more than once in params", 0},
                    200);
    return;
  }
  if (!m.meta_duplicate.empty() && m.mid != method_id::unknown) {
    r = error_reply(id,
                    rpc_error{rpc_error_kind::invalid_params, m.meta_duplicate,
                              "must not appear more than once in _meta", 0},
                    200);
    return;
  }
  // params: _meta protocol version (modern), then what the method needs.
  od::object params;
  bool have_params = false;
  if (m.has_params && o != nullptr) {
    od::value pv;
    if (!member(*o, "params", c.im.body_has_escape, pv) && !pv.get_object().get(params)) {
      have_params = true;
    }
  }
  if ((modern || !c.http.is_http) &&
      !meta_version_agrees(c, have_params ? &params : nullptr, modern, r)) {
    return;
  }
  od::object* p = have_params ? &params : nullptr;
  switch (m.mid) {
    case method_id::initialize:
      if (modern) {
        break;  // 2026-07-28 has no handshake: method not found
      }
      decide_initialize(c, p, r);
      return;
    case method_id::ping:
      r.k = reply::kind::result;
      r.result = c.env.empty_result(r.rev);
      return;
    case method_id::tools_list:
      r.k = reply::kind::result;
      r.result = c.tools.list_result(r.rev);
      return;
    case method_id::discover:
      r.k = reply::kind::result;
      r.result = c.env.discover_result();
      return;
    case method_id::tools_call:
      decide_tools_call(c, p, modern, r);
      return;
    default:
      break;
  }
  r = error_reply(id, rpc_error{rpc_error_kind::method_not_found, {}, {}, 0}, modern ? 404 : 200);
}

void note_notification(const dispatch_ctx& c, const message& m, od::object& o) {
  if (m.mid != method_id::cancelled || m.has_id || m.invalid) {
    return;
  }
  od::value pv;
  od::object po;
  od::value idv;
  od::json_type t;
  if (member(o, "params", c.im.body_has_escape, pv) || pv.get_object().get(po) ||
      member(po, "requestId", c.im.body_has_escape, idv) || idv.type().get(t)) {
    return;
  }
  if (t == od::json_type::string || t == od::json_type::number) {
    c.im.cancellations.push_back(trim(idv.raw_json_token()));
  }
}

// Admits a billable tool call, or rates a free one (stdio only: over HTTP the handler rated the
// request before dispatch); turns the reply into a tool error when refused.
void prepare(reply& r, host& h, rate_charge* rate) {
  if (r.k != reply::kind::tool_call) {
    return;
  }
  admission a = r.tool->billable  ? h.admit(r.tool->name, r.id)
                : rate != nullptr ? rate->rate_check()
                                  : admission{};
  if (!a.refusal) {
    r.admitted = r.tool->billable;
    return;
  }
  // The host named the outcome table's code; the row decides which figures it carries.
  r.k = reply::kind::tool_error;
  r.terr = envelope::make_tool_error(*a.refusal, a.retry_after_secs, a.quota_limit, a.quota_used,
                                     a.quota_remaining);
}

outcome outcome_of(const envelope::rpc_error& e) noexcept {
  switch (e.kind) {
    case rpc_error_kind::parse_error:
      return outcome::parse_error;
    case rpc_error_kind::method_not_found:
      return outcome::method_not_found;
    case rpc_error_kind::invalid_params:
      return outcome::invalid_argument;
    case rpc_error_kind::unknown_tool:
      return outcome::unknown_tool;
    case rpc_error_kind::internal_error:
      return outcome::internal_error;
    case rpc_error_kind::rate_limited:
      return outcome::rate_limited;
    default:
      return outcome::invalid_request;
  }
}

outcome outcome_of(envelope::tool_error_code c) noexcept { return envelope::row_of(c).result; }

// Writes the JSON-RPC body of a decided (and prepared) reply; runs the tool for a tool call.
// Returns true when an admitted (billable) call failed and so was not billed: the quota figures
// written before it ran counted it.
bool write_body_of(const dispatch_ctx& c, reply& r, host& h, out_buffer& out, outcome& o);

// write_body_of, then adds what `method` was answered with to the request's report.
bool write_body(const dispatch_ctx& c, reply& r, host& h, out_buffer& out,
                std::string_view method) {
  outcome o = outcome::ok;
  const bool unbilled = write_body_of(c, r, h, out, o);
  if (r.k != reply::kind::none) {
    c.im.report.add(method, r.tool, o);
  }
  return unbilled;
}

bool write_body_of(const dispatch_ctx& c, reply& r, host& h, out_buffer& out, outcome& o) {
  switch (r.k) {
    case reply::kind::none:
      return false;
    case reply::kind::result:
      c.env.result_response(out, r.id, r.result);
      return false;
    case reply::kind::error:
      o = outcome_of(r.err);
      c.env.error_response(out, r.id, r.err);
      return false;
    case reply::kind::tool_error:
      o = outcome_of(r.terr.code);
      c.env.tool_error_response(out, r.id, r.rev, r.terr);
      return false;
    case reply::kind::tool_call: {
      const size_t mark = out.size();
      c.env.success_prefix(out, r.id, r.rev);
      json_out j(out, true);
      call_context ctx{c.im.tools, r.rev};
      tool_result res = r.tool->impl->call(c.im.args, j, ctx);
      if (res.ok) {
        c.env.success_suffix(out);
      } else if (res.invalid) {
        o = outcome::invalid_argument;
        out.resize(mark);  // roll back whatever the tool wrote
        c.env.error_response(out, r.id,
                             rpc_error{rpc_error_kind::invalid_params, res.argument, res.rule, 0});
      } else {
        o = outcome_of(res.error.code);
        out.resize(mark);  // roll back whatever the tool wrote
        c.env.tool_error_response(out, r.id, r.rev, res.error);
      }
      if (r.admitted) {
        h.settle(res.ok);
      }
      return r.admitted && !res.ok;
    }
  }
  return false;
}

// Replaces the host's header block [begin, end) of a finished response in `out` with one
// written now (error path only: an admitted call failed, and its figures must not count it).
void rewrite_headers(endpoint::impl& im, out_buffer& out, size_t begin, size_t end) {
  out_buffer& scratch = im.scratch;
  scratch.clear();
  write_figures(im, scratch);
  scratch.append(std::string_view(out.data() + end, out.size() - end));
  out.resize(begin);
  out.append(scratch.view());
  scratch.clear();
}

// The reply for a message pass 1 already classified (invalid / notification / response), or
// kind::none with `needs_decide` when it is a request.
// `scratch` holds the message naming a duplicated member until the reply is written.
bool classify(const message& m, reply& r, std::string& scratch) {
  if (m.invalid) {
    std::string_view reason = m.invalid_reason;
    if (!m.duplicate.empty()) {
      scratch.assign("Invalid Request: the member \"");
      scratch.append(m.duplicate);
      scratch.append("\" appears more than once in the message.");
      reason = scratch;
    }
    r = error_reply(m.has_id ? m.id : envelope::null_id,
                    rpc_error{rpc_error_kind::invalid_request, reason, {}, 0}, 400);
    return true;
  }
  if (!m.has_method || !m.has_id) {
    r = reply{};  // a response or a notification: no reply
    return true;
  }
  return false;
}

}  // namespace tollgate::mcp
