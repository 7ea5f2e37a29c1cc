// The REST surface (design §1, §2): GET /v1/stories?q=…, GET /v1/stories/{id}, GET /v1/usage.
// Bodies are exactly the MCP tool payloads (same renderers, raw instead of escaped); errors are
// the same JSON objects as the MCP tool errors, with the statuses of design §2's REST column.
//
// Core-local: one api per core. The caller has authenticated the key, charged the rate limit
// (quota::core_ledger::check_rate) and decoded the arguments (rest::decoder) first.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/envelope/outcome_table.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/response.h"
#include "tollgate/quota/service.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/fleet.h"
#include "tollgate/search/query.h"

namespace tollgate::rest {

/// The caller's own quota and rate state: GET /v1/usage and the get_usage tool payload.
void render_usage(json_out& out, const quota::key_record& k, const quota::figures& f);

/// The tool error a search error is answered with, on MCP and REST (the outcome table's row).
envelope::tool_error tool_error_of(search::errc e) noexcept;

/// The REST resources (design §1).
enum class resource : uint8_t { search, story, usage };

/// A REST request's arguments, decoded from its query string or path once (by the app's gate,
/// design §9) for every reader: the surface (api::respond) and a gateway's look-ahead. Views
/// point into the request or into the decoder that filled them, valid until its next decode.
struct arguments {
  search::query_args search;               ///< resource::search, when `error` is empty
  std::string_view story_id;               ///< resource::story: percent-decoded
  bool no_such_story = false;              ///< resource::story: no id, or a path below one (404)
  std::optional<search::arg_error> error;  ///< a bad argument (400 invalid_argument)
  bool ok() const noexcept { return !no_such_story && !error; }
};

/// Decodes REST arguments. Core-local: one per core (it owns the decode buffers).
class decoder {
 public:
  decoder();
  /// The arguments of `what` from `query` (search) or `id` (story: the path's percent-encoded
  /// remainder); usage has none. Valid until the next decode().
  const arguments& decode(resource what, std::string_view query, std::string_view id);

 private:
  search::query_string_parser qs_;
  out_buffer id_buf_;
  arguments args_;
};

/// One request's caller: the authenticated key, its core's quota ledger and the figures already
/// holding the rate part (check_rate ran).
struct caller {
  quota::core_ledger& shard;
  const quota::key_record& key;
  quota::figures& fig;
  int64_t now_ns;
  /// A gateway's answers from its remote shards for this request (null: none; remote slots
  /// then count as not answered).
  const search::remote_query* remote = nullptr;
  /// Cluster mode: a billed request whose node holds no units of the key may wait for them:
  /// the api then writes nothing, sets lease_pending and returns a deferred info; the caller
  /// parks the request and delivers it again when its core is woken.
  bool may_wait_lease = false;
  bool lease_pending = false;
  /// A story's text is read without waiting for the disk (on a core): bytes not in the page
  /// cache make the api write nothing, set `read` (the bytes) and return a deferred info; the
  /// caller parks the request until they are read and delivers it again (not billed meanwhile).
  bool may_wait_read = false;
  search::pending_read read{};
  /// What the answer came to (set by api::respond; the access log and /metrics print it).
  outcome result = outcome::ok;
};

class api {
 public:
  api(const search::backend& backend, const envelope::cache& env);
  ~api();

  /// The one entry of the REST surface: writes the gate's refusal (`g.row`: 401 and 503 with
  /// `c` null, 429 with the caller's figures) from its outcome table row, or answers `what`
  /// from its arguments `a` as the gate decoded them. Sets c->result.
  http::response_info respond(const http::request& req, const envelope::gate_refusal& g,
                              resource what, const arguments& a, caller* c, out_buffer& out);

 private:
  // What write() writes after the head: body_ as decided (an error), a billed payload streamed
  // by the backend, the usage; none: nothing (the request waits for quota units).
  enum class body_kind : uint8_t { none, ready, search, story, usage };
  // Each decides and writes nothing to the response: a refusal's body goes to body_, with
  // status_ and result_.
  body_kind checked(const arguments& a, caller& c, quota::ticket& t, body_kind billed);
  body_kind admit(caller& c, quota::ticket& t, body_kind billed);
  body_kind error(const envelope::tool_error& e);
  body_kind invalid_argument(const search::arg_error& e);
  // Writes the rate headers from `fig` into headers_; the head of a JSON answer naming them.
  http::response_head json_head(const http::request& req, int status, const quota::figures& fig);
  // The one place an answer is written (see api.cc).
  http::response_info write(const http::request& req, body_kind k, caller& c, const arguments& a,
                            quota::ticket& t, out_buffer& out);

  const search::backend& backend_;
  const envelope::cache& env_;
  std::unique_ptr<search::scratch> scratch_;
  out_buffer headers_;
  out_buffer body_;
  outcome result_ = outcome::ok;  ///< the answer being written's outcome
  int status_ = 200;              ///< its status
};

}  // namespace tollgate::rest
