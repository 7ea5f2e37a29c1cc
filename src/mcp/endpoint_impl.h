// Private parts of mcp::endpoint: the per-core parser, scratch space, the message model, and the
// steps its pieces share (jsonrpc_scan.cc, dispatch.cc, arguments.cc, http_transport.cc).
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/ascii.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {

static_assert(body_padding == simdjson::SIMDJSON_PADDING);

enum class method_id : uint8_t {
  unknown,
  initialize,
  initialized,
  ping,
  tools_list,
  tools_call,
  discover,
  cancelled,
};

/// One member name of an object pass 1 walked: as compared (unescaped; valid until the
/// document is rewound) and where it is written in the body (after its opening quote; to name it
/// in an error).
struct member_name {
  std::string_view key;
  const char* raw = nullptr;
};

/// What pass 1 learned about one message object (views point into the request body).
struct message {
  bool has_id = false;
  bool has_method = false;
  bool has_params = false;
  bool has_result_or_error = false;
  bool invalid = false;             ///< not a JSON-RPC request/notification/response
  std::string_view invalid_reason;  ///< message for -32600
  /// A member name given twice in the message object (as written; empty: none). -32600.
  std::string_view duplicate;
  /// A member name given twice in the params object (as written; empty: none). -32602.
  std::string_view params_duplicate;
  /// A member name given twice in params._meta (as written; empty: none). -32602.
  std::string_view meta_duplicate;
  std::string_view id = envelope::null_id;  ///< raw JSON token
  std::string_view method;                  ///< raw contents between the quotes
  method_id mid = method_id::unknown;
};

/// The reply decided for one message before anything is written.
struct reply {
  enum class kind : uint8_t { none, result, error, tool_call, tool_error };
  kind k = kind::none;
  int status = 200;
  std::string_view id = envelope::null_id;
  envelope::revision rev = envelope::revision::v2025_03_26;
  std::string_view result;         ///< kind::result: pre-rendered result JSON
  envelope::rpc_error err;         ///< kind::error
  envelope::tool_error terr;       ///< kind::tool_error
  const tool_def* tool = nullptr;  ///< kind::tool_call
  bool admitted = false;           ///< a billable call admitted through the host (settle owed)
  bool mint_session = false;       ///< initialize with sessions on
};

/// Per-request HTTP facts the dispatcher checks (2026-07-28 header/body agreement).
struct http_facts {
  bool is_http = false;
  std::string_view mcp_method;  ///< Mcp-Method header (empty if absent)
  std::string_view mcp_name;    ///< Mcp-Name header
  bool has_mcp_method = false;
  bool has_mcp_name = false;
};

struct endpoint::impl {
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  /// The body holds a backslash, so some member name may be written with an escape and member
  /// look-ups must compare unescaped names (see member() below).
  bool body_has_escape = false;
  std::vector<message> batch;
  std::vector<member_name> names;         ///< pass 1's member names of a message object
  std::vector<member_name> params_names;  ///< and of its params object
  std::vector<member_name> meta_names;    ///< and of params._meta
  std::string duplicate_message;          ///< -32600's message naming a duplicated member
  std::vector<reply> replies;
  arguments args;
  out_buffer scratch;
  out_buffer cors_tail;             ///< add_cors_headers' copy of a response's rest
  std::string session_header;       ///< "Mcp-Session-Id: ...\r\n" for a minted session
  std::string batch_limit_message;  ///< -32600's message for a batch over max_batch
  std::string too_large_message;    ///< -32600's message for a body over max_body_bytes
  /// The app charged this POST to the rate limit before dispatch (false while a refused one
  /// that holds only notifications and responses is answered): a 202 gives the charge back.
  bool rate_charged = true;
  /// Lent by the app once per core (endpoint::lend); null: none.
  tool_env* tools = nullptr;
  rate_charge* rate = nullptr;
  /// What the current request's messages were answered with (endpoint::report()).
  request_report report;
  /// The request ids its notifications/cancelled named (endpoint::cancellations()).
  std::vector<std::string_view> cancellations;

  explicit impl(size_t max_capacity) : parser(max_capacity) {}
};

// Names the endpoint's pieces share (a private header: these do not leak past src/mcp).
namespace od = simdjson::ondemand;
using ascii::trim;
using envelope::revision;
using envelope::rpc_error;
using envelope::rpc_error_kind;

// ---- pass 1 (jsonrpc_scan.cc) ----

enum class body_shape : uint8_t { single, batch, not_json, too_large, not_request };

struct parsed {
  body_shape shape = body_shape::not_json;
  message single;
  bool batch_too_long = false;  ///< not_request: a batch of more than max_batch messages
};

/// Pass 1 over `body` (followed by body_padding readable bytes): its shape, the single message
/// or (into im.batch) the batch's messages.
parsed parse_body(endpoint::impl& im, std::string_view body, size_t max_batch);

/// The value of the first member of `o` whose unescaped name is `name`, searching from the
/// start of `o`.
simdjson::error_code member_unescaped(od::object& o, std::string_view name, od::value& out);

// The value of the first member of `o` named `name` (which holds no quote or backslash), by the
// member's unescaped name: JSON's "n\u0061me" is the member "name". simdjson's
// find_field_unordered compares raw bytes, which is exact when the body holds no backslash at
// all (parse_body notes whether it does: nearly every body has none); otherwise each key is
// compared unescaped. Call only on objects scan_message has walked, so the text is valid JSON.
// Inlined so that the raw compare sees the literal name's length (else a call to memcmp for
// every key it passes).
[[gnu::always_inline]] inline simdjson::error_code member(od::object& o, std::string_view name,
                                                          bool body_has_escape, od::value& out) {
  if (!body_has_escape) {
    return o.find_field_unordered(name).get(out);
  }
  return member_unescaped(o, name, out);
}

// ---- pass 2 (dispatch.cc, arguments.cc) ----

struct dispatch_ctx {
  const registry& tools;
  const envelope::cache& env;
  endpoint::impl& im;
  envelope::revision rev;  // the transport's revision (header, or stdio's negotiated one)
  const http_facts& http;
  bool sessions_on;
};

reply error_reply(std::string_view id, envelope::rpc_error e, int status);

/// The reply for a message pass 1 already classified (invalid / notification / response): true
/// with `r` set; false when it is a request (then decide() it). `scratch` holds the message
/// naming a duplicated member until the reply is written.
bool classify(const message& m, reply& r, std::string& scratch);

/// Pass 2 for one request (m.has_id, m.has_method, valid): decides its reply. `o` is the message
/// object, positioned at its start.
void decide(const dispatch_ctx& c, const message& m, od::object* o, reply& r);

/// A notification `m` (classify() gave it no reply) that is notifications/cancelled: notes its
/// params.requestId (raw JSON) in im.cancellations. `o`: the message object.
void note_notification(const dispatch_ctx& c, const message& m, od::object& o);

/// Validates tools/call arguments into im.args. Returns false with `r` set to the -32602 reply.
bool validate_arguments(const dispatch_ctx& c, const tool_def& t, od::value* args_value,
                        std::string_view id, reply& r);

/// Admits a billable tool call, or rates a free one (stdio only: over HTTP the handler rated the
/// request before dispatch); turns the reply into a tool error when refused.
void prepare(reply& r, host& h, rate_charge* rate);

outcome outcome_of(const envelope::rpc_error& e) noexcept;

/// Writes the body of a decided (and prepared) reply, running the tool of a tool call, then
/// adds what `method` was answered with to the request's report. True when an admitted
/// (billable) call failed and so was not billed: the quota figures written before it ran
/// counted it.
bool write_body(const dispatch_ctx& c, reply& r, host& h, out_buffer& out, std::string_view method);

/// The request's figure header lines (the lent rate_charge's; none when nothing is lent).
inline void write_figures(const endpoint::impl& im, out_buffer& out) {
  if (im.rate != nullptr) {
    im.rate->write_headers(out);
  }
}

/// Replaces the figure header block [begin, end) of a finished response in `out` with one
/// written now (error path only: an admitted call failed, and its figures must not count it).
void rewrite_headers(endpoint::impl& im, out_buffer& out, size_t begin, size_t end);

}  // namespace tollgate::mcp
