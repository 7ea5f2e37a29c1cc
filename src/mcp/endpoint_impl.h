// Private parts of mcp::endpoint: the per-core parser, scratch space and the message model.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>
#include <vector>

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
  bool invalid = false;              ///< not a JSON-RPC request/notification/response
  std::string_view invalid_reason;   ///< message for -32600
  /// A member name given twice in the message object (as written; empty: none). -32600.
  std::string_view duplicate;
  /// A member name given twice in the params object (as written; empty: none). -32602.
  std::string_view params_duplicate;
  std::string_view id = envelope::null_id;  ///< raw JSON token
  std::string_view method;           ///< raw contents between the quotes
  method_id mid = method_id::unknown;
};

/// The reply decided for one message before anything is written.
struct reply {
  enum class kind : uint8_t { none, result, error, tool_call, tool_error };
  kind k = kind::none;
  int status = 200;
  std::string_view id = envelope::null_id;
  envelope::revision rev = envelope::revision::v2025_03_26;
  std::string_view result;        ///< kind::result: pre-rendered result JSON
  envelope::rpc_error err;        ///< kind::error
  envelope::tool_error terr;      ///< kind::tool_error
  const tool_def* tool = nullptr; ///< kind::tool_call
  bool admitted = false;          ///< a billable call admitted through the host (settle owed)
  bool mint_session = false;      ///< initialize with sessions on
};

/// Per-request HTTP facts the dispatcher checks (2026-07-28 header/body agreement).
struct http_facts {
  bool is_http = false;
  std::string_view mcp_method;    ///< Mcp-Method header (empty if absent)
  std::string_view mcp_name;      ///< Mcp-Name header
  bool has_mcp_method = false;
  bool has_mcp_name = false;
};

struct endpoint::impl {
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  /// The body holds a backslash, so some member name may be written with an escape and member
  /// look-ups must compare unescaped names (see member() in endpoint.cc).
  bool body_has_escape = false;
  std::vector<message> batch;
  std::vector<member_name> names;         ///< pass 1's member names of a message object
  std::vector<member_name> params_names;  ///< and of its params object
  std::string duplicate_message;   ///< -32600's message naming a duplicated member
  std::vector<reply> replies;
  arguments args;
  out_buffer scratch;
  std::string session_header;  ///< "Mcp-Session-Id: ...\r\n" for a minted session
  std::string batch_limit_message;  ///< -32600's message for a batch over max_batch
  /// The app charged this POST to the rate limit before dispatch (false while a refused one
  /// that holds only notifications and responses is answered): a 202 gives the charge back.
  bool rate_charged = true;

  explicit impl(size_t max_capacity) : parser(max_capacity) {}
};

}  // namespace tollgate::mcp
