// gate: the one stage a request passes before any surface reads it (design §1, "One gate").
// It decides, once, what the request is and whether it goes on:
//   1. match: its route, or 404 / 405 for a path or method no route takes;
//   2. for a keyed surface (REST, POST /mcp): its key, then its rate limit, charged once per
//      request (a re-delivery carries the figures its first delivery was charged);
//   3. its refusal, as the outcome table's row: a bad key's 401, a rate limit's 429, or (cluster
//      mode, before the node's first key load) 503, since no key can be called invalid yet;
//   4. for a REST search or story it lets through: its arguments, decoded once (rest::decoder)
//      for every reader of the verdict.
// A surface's one entry point (mcp::endpoint::answer, rest::api::respond) writes the verdict;
// app::parking parks a request from it; the access log and /metrics read the outcome it came
// to, never re-derive it.
//
// Core-local: one gate per core, over its quota ledger.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "metrics.h"
#include "tollgate/common/outcome.h"
#include "tollgate/envelope/outcome_table.h"
#include "tollgate/http/request.h"
#include "tollgate/http/router.h"
#include "tollgate/quota/service.h"
#include "tollgate/rest/api.h"

namespace tollgate::cluster {
class agent;
}

namespace tollgate::app {

/// The rate charge of a re-delivered request (parked for a search slice or for quota units, or
/// deferred for its remote shards): its first delivery was charged, and these are its figures.
struct carried_charge {
  const quota::figures* fig = nullptr;  ///< null: a first delivery, to be charged now
  int64_t received_ns = 0;              ///< when its first delivery was read
};

/// What a request answered by a surface must wait for before its answer is real.
enum class wait_for : uint8_t {
  nothing,
  slice,  ///< its search outlasted its slice: delivered again next pass
  units,  ///< cluster mode: its node asked Redis for quota units
  read    ///< a story's text is not in the page cache: the core's ring reads it (read)
};

/// What the gate decided about one request, and (after a surface answered it) what it came to.
struct gate_verdict {
  route r = route::not_found;
  /// 404 or 405 when no route takes the request (405 on /mcp or the webhook: r is the route,
  /// whose surface answers every method itself); else 200.
  int status = 200;
  std::string_view rest;   ///< a prefix route's remainder (a story's id, percent-encoded)
  std::string_view allow;  ///< 405: the methods the path takes
  bool keyed = false;      ///< behind the key: REST and POST /mcp (other /mcp methods are not)
  const quota::key_record* key = nullptr;  ///< the authenticated key (keyed, not refused 401)
  quota::figures fig;                      ///< the rate part: charged now or carried
  envelope::gate_refusal refusal;          ///< refusal.row null: the request goes on
  int64_t received_ns = 0;                 ///< its first delivery's time
  int64_t deadline_ms = 0;  ///< Tollgate-Deadline: unix ms its client gives up at (0: none)
  bool carried = false;     ///< a re-delivery: charged on its first delivery
  /// A REST search or story the gate let through: its arguments, decoded once for the surface
  /// and a gateway's look-ahead (null otherwise). Valid until the gate's next admission.
  const rest::arguments* args = nullptr;
  outcome result = outcome::ok;       ///< what the answer came to (set by the handler)
  wait_for wait = wait_for::nothing;  ///< set by the surface: the request parks
  size_t jobs_used = 0;               ///< wait: the search jobs it started
  search::pending_read read{};        ///< wait_for::read: the bytes it waits for
};

/// [oauth] as the gate reads it: off, or on with the issuer (empty: the request's Host on a
/// loopback listener, oauth_base()).
struct gate_oauth {
  bool on = false;
  std::string_view issuer;
};

class gate {
 public:
  /// `cluster` null: a single node (keys are always loaded). `webhook_path`: the Stripe
  /// webhook's path when the public listener serves it (empty: it does not).
  gate(const http::router& router, quota::core_ledger& quota, const cluster::agent* cluster,
       gate_oauth oauth = {}, std::string_view webhook_path = {});

  /// Step 1: the route (every request).
  gate_verdict match(const http::request& req) const;
  /// Steps 2 to 4, for a keyed verdict: the key, the rate charge (or `carried`'s figures), the
  /// refusal, if any, else a REST request's arguments.
  void admit(const http::request& req, gate_verdict& v, int64_t now_ns,
             const carried_charge& carried);
  /// The key admit() would find for `req` (null: it would refuse it 401), charging nothing.
  const quota::key_record* credential(const http::request& req);

 private:
  const http::router& router_;
  quota::core_ledger& quota_;
  const cluster::agent* cluster_;
  gate_oauth oauth_;
  std::string_view webhook_path_;
  std::string metadata_url_;  // the 401's resource_metadata (capacity reserved: no allocation)
  rest::decoder rest_args_;   // step 4's buffers
};

/// The key presented by a request: `Authorization: Bearer KEY` (scheme in any case, blanks
/// after it skipped) or, only when there is no Authorization field, `X-API-Key: KEY`. Empty
/// when neither is there, or the Authorization scheme is not Bearer: a request that authorizes
/// itself some other way (Basic) presents no key, even with an X-API-Key beside it.
std::string_view presented_key(const http::request& req) noexcept;

/// Whether the query string carries an OAuth token (`access_token=`), which the MCP
/// authorization spec forbids (RFC 6750 §2.3's URI form): such a request is refused 401.
bool token_in_query(std::string_view query) noexcept;

/// The OAuth base URL for `req`: `issuer` when configured, else "http://" + its Host (a
/// loopback listener; a Host that is not a plain host[:port] gives "http://localhost"), written
/// into `buf`. No allocation while `buf` has 300 bytes of capacity.
std::string_view oauth_base(const http::request& req, std::string_view issuer, std::string& buf);

}  // namespace tollgate::app
