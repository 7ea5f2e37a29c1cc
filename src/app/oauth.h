// tollgate as its own OAuth 2.1 authorization server and protected resource (README "Connect
// claude.ai, ChatGPT or any OAuth client", docs/design.md "OAuth: a token is its key"): the
// discovery documents (RFC 9728, RFC 8414), dynamic client registration (RFC 7591), the
// authorization endpoint with its consent page (PKCE S256 required), the token endpoint
// (authorization_code, refresh_token with rotation) and revocation (RFC 7009).
//
// A person proves who they are once, by pasting their API key on the consent page (checked by
// the same look-up the hot path uses); every token issued after that is an alias of that key in
// the quota service's table (oauth_store.h), so plan, rate limit, quota, suspension and
// revocation apply to it unchanged, and the hot path never calls into this class.
//
// Threads: handle() runs on any public core. The endpoints are not the hot path: they allocate,
// but a core never waits in them. What must wait is handed off and the request parked (handle()
// answers `deferred`; the core delivers it again when woken):
// - the store's work (registering, issuing and redeeming codes, minting, rotating and revoking
//   tokens: an fdatasync of oauth.log, or a Redis round trip in cluster mode) runs on the
//   server's worker thread, which then wakes the core; the answer waits for the request's next
//   delivery, found by its ticket;
// - a client ID metadata document is fetched on the fetcher's threads (oauth_cimd.h).
// The worker also polls the store 4 times a second: the CLI's appends to oauth.log, or in
// cluster mode the other nodes' lines in Redis, and expired tokens.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tollgate/common/buffer.h"
#include "tollgate/common/result.h"
#include "tollgate/config/config.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/request.h"

namespace tollgate::quota {
class service;
class core_ledger;
}  // namespace tollgate::quota

namespace tollgate::app {
struct offcore_ticket;
template <class Answer>
class offcore;
}  // namespace tollgate::app

namespace tollgate::app::oauth {

class store;
class cimd_fetcher;
struct client;

class server {
 public:
  server(const config::settings& s, quota::service& q);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Opens (and compacts) oauth.log (cluster mode: reads the Redis log), puts its live tokens in
  /// force, starts the worker.
  result<void, std::string> start(int64_t now_unix);

  /// Whether `path` is one of the routes this class answers.
  static bool owns(std::string_view path) noexcept;
  /// Answers an OAuth route. `ledger`: the calling core's (the consent page checks a key with
  /// it); `peer`: the client's address ("1.2.3.4:5"), for the per-address limits. Never throws
  /// on client input.
  ///
  /// A request whose client_id is a metadata document URL not in the fetcher's cache, or whose
  /// store work went to the worker, writes nothing and returns {.deferred = true}: the caller
  /// parks it (engine_io::defer) and delivers it again, with the same `t`, after `wake`
  /// (thread-safe, called from a fetcher or the worker when its part ends) or after
  /// wait_bound_ms(), whichever comes first; a delivery before its part ended parks again. An
  /// empty `wake` (no engine to park in) answers 503 for a document instead of waiting, and
  /// does the store's work inline.
  http::response_info handle(const http::request& req, quota::core_ledger& ledger,
                             std::string_view peer, out_buffer& out, int64_t now_unix,
                             const std::function<void()>& wake, const offcore_ticket& t);
  /// How long a parked request may wait for its document before it is delivered again anyway
  /// (it then reads as a failed fetch).
  int64_t wait_bound_ms() const noexcept;

  struct oauth_reply {
    int status = 200;
    std::string body = {};
    std::string headers = {};
    std::string_view content_type = "application/json";
    bool pending = false;  ///< waiting for a document or the worker: nothing to write yet
    bool synced = false;   ///< (the worker's) the store has read the cluster's newest lines
  };

 private:
  /// One delivery of a request: what parks it, and whether the store was synced for it.
  struct call {
    const offcore_ticket& ticket;
    const std::function<void()>& wake;
    bool synced = false;
  };
  oauth_reply metadata(const http::request& req, bool resource) const;
  oauth_reply do_register(const http::request& req, std::string_view addr, int64_t now, call& c);
  oauth_reply authorize_get(const http::request& req, int64_t now, call& c);
  oauth_reply authorize_post(const http::request& req, quota::core_ledger& ledger,
                             std::string_view addr, int64_t now, call& c);
  oauth_reply token(const http::request& req, int64_t now, call& c);
  /// The token request's store part, on the worker: redeems the code or rotates the refresh
  /// token of form `p` (client `client_id` checked, `b` the base URL).
  oauth_reply redeem(const std::map<std::string, std::string, std::less<>>& p,
                     const std::string& client_id, const std::string& grant_type,
                     const std::string& b, int64_t now);
  oauth_reply revoke(const http::request& req, int64_t now, call& c);
  /// The client `id` names: registered (DCR), or a metadata document's (fetched, cached).
  /// Returns the client, or sets `why` (a sentence; empty while `pending`). In cluster mode a
  /// registered client this node does not know yet (made on another node a moment ago) is
  /// looked up again after the worker read the cluster's newest lines.
  enum class found { yes, no, pending };
  found find_client(const std::string& id, int64_t now, call& c, client& cl, std::string& why);
  /// Runs `work` on the worker and answers pending (the request is parked until it is done);
  /// without an engine, runs it here.
  oauth_reply off_core(call& c, std::function<oauth_reply()> work);
  /// The worker's tick: the store polled, old per-address windows forgotten.
  void tick(int64_t now);
  bool offers(std::string_view registration) const;
  std::string base(const http::request& req) const;
  std::string csrf(std::string_view request_fields, int64_t expires) const;
  /// Counts one event of `addr` in its window; false when over `limit` (retry_after set).
  bool allow(std::unordered_map<std::string, std::pair<int64_t, int>>& m, std::string_view addr,
             int64_t now, int limit, int64_t window, int64_t& retry_after, bool count);
  bool key_live(uint64_t key_id) const;

  const config::settings& s_;
  quota::service& q_;
  std::unique_ptr<store> store_;
  std::unique_ptr<cimd_fetcher> cimd_;  // null: metadata documents not offered
  std::string csrf_key_;                // random per process: a consent form outlives no restart
  std::mutex limits_mu_;
  std::unordered_map<std::string, std::pair<int64_t, int>> registrations_;  // addr → window
  std::unordered_map<std::string, std::pair<int64_t, int>> failures_;       // addr → window
  std::unique_ptr<offcore<oauth_reply>> work_;  // the store's work, off the cores (offcore.h)
  int ticks_ = 0;
};

/// The start's check of [oauth] against the listener in force (--listen may differ from the
/// file): an issuer is required off loopback.
result<void, std::string> check_oauth_config(const config::settings& s);

}  // namespace tollgate::app::oauth

namespace tollgate::app {
struct shared_state;
/// Builds `st.oauth` when [oauth] is enabled on a server with keys; 0, or the exit code (2: a
/// config the start refuses) after logging why.
int make_oauth(shared_state& st, const config::settings& s);
}  // namespace tollgate::app
