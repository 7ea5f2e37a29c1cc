// JSON-RPC 2.0 + MCP dispatch (see endpoint.h).
//
// Each body is parsed in place with simdjson On Demand in two passes over one iteration:
//   1. walk the whole document once: this validates every byte (malformed JSON anywhere is
//      -32700, even in parts the method never looks at) and records each message's id and method
//      as raw views into the body;
//   2. rewind and look only at what the method needs (params._meta, name, arguments).
// Replies are decided before anything is written, so the HTTP status and the figures' header
// lines (which follow admit()) precede the body, and the payload is written straight into the
// response buffer.
//
// The pieces: jsonrpc_scan.cc (pass 1), dispatch.cc (deciding and writing replies),
// arguments.cc (tools/call argument checks), http_transport.cc (POST /mcp and the other HTTP
// methods); this file holds construction and the two entries: answer() for an HTTP request
// (its gate verdict's refusal, or the transport) and handle_message() for a stdio message.
#include <fmt/format.h>

#include "mcp/endpoint_impl.h"
#include "tollgate/common/assert.h"

namespace tollgate::mcp {

endpoint::endpoint(const registry& tools, const envelope::cache& env, endpoint_options opts)
    : tools_(tools),
      env_(env),
      opts_(std::move(opts)),
      impl_(std::make_unique<impl>(opts_.max_body_bytes)) {
  // Size everything for the largest body and batch now: the steady state allocates nothing.
  TOLLGATE_CHECK(impl_->parser.allocate(opts_.max_body_bytes) == simdjson::SUCCESS);
  impl_->batch.reserve(opts_.max_batch);
  impl_->names.reserve(64);
  impl_->params_names.reserve(64);
  impl_->meta_names.reserve(16);
  impl_->batch_limit_message =
      fmt::format("Invalid Request: a batch may hold at most {} messages.", opts_.max_batch);
  impl_->too_large_message = fmt::format(
      "Content Too Large: the request body is larger than the {} bytes this server accepts "
      "(server.max_body_bytes); sending it again will not help.",
      opts_.max_body_bytes);
  impl_->scratch.reserve(16 * 1024);
  impl_->cancellations.reserve(opts_.max_batch);
}

endpoint::~endpoint() = default;

void endpoint::lend(tool_env* tools, rate_charge* rate) noexcept {
  impl_->tools = tools;
  impl_->rate = rate;
}

const request_report& endpoint::report() const noexcept { return impl_->report; }

std::span<const std::string_view> endpoint::cancellations() const noexcept {
  return impl_->cancellations;
}

// ---------------------------------------------------------------------------------------------
// HTTP requests: the one entry (the transport itself is http_transport.cc).

http::response_info endpoint::answer(const http::request& req, const envelope::gate_refusal& g,
                                     host& h, out_buffer& out, int64_t now_ns) {
  // (Cleared here, the app's entry, not in handle_http: that is the hot path, and only the app
  // reads the list.)
  impl_->cancellations.clear();
  if (g.row == nullptr) {
    return handle_http(req, h, out, now_ns);
  }
  impl_->report = {};
  if (g.row->result == outcome::rate_limited) {
    return render_rate_limited(req, h, out, g.retry_after_secs, now_ns);
  }
  impl_->report.add({}, nullptr, g.row->result);
  if (g.row->result == outcome::invalid_key) {
    return render_unauthorized(req, out, g.key_presented, g.resource_metadata);
  }
  const bool close = !req.keep_alive;  // keys not loaded yet: the one other whole refusal
  env_.keys_not_loaded(out, close, req.method == "HEAD");
  return {g.row->mcp_code, close};
}

// ---------------------------------------------------------------------------------------------
// stdio messages.

void endpoint::handle_message(std::string_view msg, host& h, out_buffer& out) {
  impl& im = *impl_;
  im.report = {};
  http_facts facts;  // not HTTP: no header checks
  dispatch_ctx c{tools_, env_, im, stdio_rev_, facts, false};
  if (msg.size() > opts_.max_body_bytes) {
    env_.error_response(
        out, envelope::null_id,
        rpc_error{
            rpc_error_kind::invalid_request, "Invalid Request: the message is too large.", {}, 0});
    return;
  }
  parsed p = parse_body(im, msg, opts_.max_batch);
  switch (p.shape) {
    case body_shape::too_large:
      env_.error_response(out, envelope::null_id,
                          rpc_error{rpc_error_kind::invalid_request,
                                    "Invalid Request: the message is too large.",
                                    {},
                                    0});
      return;
    case body_shape::not_json:
      env_.error_response(out, envelope::null_id,
                          rpc_error{rpc_error_kind::parse_error, {}, {}, 0});
      return;
    case body_shape::not_request:
    case body_shape::batch:  // stdio is newline-delimited single messages
      env_.error_response(out, envelope::null_id,
                          rpc_error{rpc_error_kind::invalid_request, {}, {}, 0});
      return;
    case body_shape::single:
      break;
  }
  const message& m = p.single;
  reply r;
  if (!classify(m, r, im.duplicate_message)) {
    im.doc.rewind();
    od::object o;
    if (im.doc.get_object().get(o)) {
      env_.error_response(out, m.id, rpc_error{rpc_error_kind::internal_error, {}, {}, 0});
      return;
    }
    if (m.mid != method_id::tools_call) {
      admission a = im.rate != nullptr ? im.rate->rate_check() : admission{};
      if (a.refusal == envelope::tool_error_code::rate_limited) {
        env_.error_response(out, m.id,
                            rpc_error{rpc_error_kind::rate_limited,
                                      {},
                                      {},
                                      a.retry_after_secs < 1 ? 1 : a.retry_after_secs});
        return;
      }
    }
    decide(c, m, &o, r);
    if (m.mid == method_id::initialize && r.k == reply::kind::result) {
      stdio_rev_ = r.rev;
    }
  }
  prepare(r, h, im.rate);
  write_body(c, r, h, out, m.method);
}

}  // namespace tollgate::mcp
