// The business side's admin API (README "Accounts, keys and billing"): accounts, keys, usage and
// its export on the admin listener, behind the admin bearer token, and the Stripe webhook that
// suspends and resumes accounts as their bills go.
//
// Every change goes through the same key store the `keys` and `accounts` commands write (the data
// dir's files, rewritten whole with fsync + rename; in cluster mode Redis, for what redis_keys
// offers), is durable before the answer, and is then put in force on every core: on the admin
// listener by reloading the table and waiting until every core has switched (as POST
// /admin/reload does), so the next request on any core sees it; in cluster mode by the agent's
// 200 ms poll of Redis on every node.
//
// Durable files of its own, in the data dir, each appended with fdatasync before the answer:
//   admin-audit.log        one JSON line per change: time, who (the token's name), action,
//                          target (account name or key id, never a key), status
//   admin-idempotency.txt  `idem <unix> <lookup> <fingerprint> <status> <sealed-answer>`: a POST
//                          with an Idempotency-Key answered 2xx, kept 24 h. lookup and
//                          fingerprint are SHA-256 digests (of the Idempotency-Key, and of the
//                          method, path and body); the answer (which may hold a new key, shown
//                          once) is sealed with a keystream derived from the Idempotency-Key, so
//                          the data dir alone never reveals a key
//   stripe-events.txt      `event <unix> <evt_id>`: webhook events acted on or acknowledged,
//                          kept 24 h, so a redelivered event changes nothing
// Each file is compacted (rewritten without expired entries) when the server starts. In cluster
// mode the idempotency answers and event ids live in Redis instead (a retry or a redelivery may
// reach another node); the audit log stays each node's. They are
// admin_store's (admin_store.h); the routes are in admin_routes.cc, the webhook in
// stripe_webhook.cc, the OpenAPI document in docs/admin-openapi.json (embedded at build time).
//
// Threads: handle() runs on the admin listener's worker thread (ops.h: the request is parked
// meanwhile, so the listener's core keeps answering /healthz and /metrics); handle_webhook() on
// a public core when [stripe] public_webhook is on. One mutex serialises every change (and the
// idempotency look-up with it, so two retries racing make one key). Those durable writes, and
// the wait until every core has the new table, are synchronous: they are done only by those
// workers. A public core never does them: it checks the signature and the event (no I/O), and
// its worker (offcore.h) acts on it while the request is parked.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "admin_store.h"
#include "tollgate/common/buffer.h"
#include "tollgate/config/config.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/request.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::app {

struct shared_state;
class meter_pusher;
struct offcore_ticket;
template <class Answer>
class offcore;

class admin_api {
 public:
  static constexpr std::string_view kWebhookPath = "/admin/webhooks/stripe";

  /// Resolves the admin token and the webhook secret from the environment or files named by
  /// `s`, opens (and compacts) the idempotency and event files. `st.quota` may be null (a shard
  /// node: every route answers 403). `keys`: the store changes go to (the data dir's, or Redis).
  admin_api(shared_state& st, const config::settings& s, std::unique_ptr<quota::key_backend> keys);
  ~admin_api();

  /// Answers any /admin/... request but /admin/reload on the admin listener (on its worker
  /// thread: it may wait). Never throws on client input; every refusal is JSON
  /// {"code","message"} with a 4xx status.
  http::response_info handle(const http::request& req, out_buffer& out);
  /// POST /admin/webhooks/stripe on a public core ([stripe] public_webhook). The signature and
  /// the event are checked here; acting on it (the store's durable writes, Redis in cluster
  /// mode, the change put in force) is done off the core: the answer is {.deferred = true} and
  /// the caller parks the request until `wake`, then delivers it again with the same ticket
  /// (offcore.h). Without an engine (`t` not parkable) it is done here.
  http::response_info handle_webhook(const http::request& req, out_buffer& out,
                                     const offcore_ticket& t, const std::function<void()>& wake);
  /// [stripe] public_webhook: the public listener serves the webhook route too.
  bool public_webhook() const noexcept { return public_webhook_; }
  /// Prometheus lines: webhook events by outcome, admin requests by status class.
  void render_metrics(out_buffer& out) const;
  /// Why the admin routes answer 403, or empty when a token is configured (logged at start).
  const std::string& disabled_reason() const noexcept { return disabled_why_; }

 private:
  struct admin_reply {
    int status = 200;
    std::string body = {};
    std::string extra_headers = {};
    std::string content_type = "application/json";
  };

  admin_reply route(const http::request& req, int64_t now);
  admin_reply with_idempotency(const http::request& req, int64_t now, std::string_view idem);
  admin_reply dispatch_change(const http::request& req, int64_t now);
  // The Stripe webhook (stripe_webhook.cc): the signature and the event checked, then acted on
  // (event_act), here or, from a public core, by `act` (an empty answer status: deferred).
  enum class event_action : uint8_t { none, suspend, resume };
  /// What an event asks for, copied out of its body (it may be acted on after the request's
  /// buffer is gone).
  struct event {
    std::string id;
    std::string type;
    std::string customer;
    bool has_obj = false;
    event_action what = event_action::none;
  };
  admin_reply webhook(const http::request& req, int64_t now, bool may_wait,
                      const std::function<admin_reply(event)>& act = {});
  admin_reply event_act(const event& e, int64_t now, bool may_wait);
  admin_reply apply_account_status(std::string_view account, bool suspend, int64_t now,
                                   std::string_view who, std::string_view action, bool may_wait);
  // Routes (admin_routes.cc).
  admin_reply create_account(std::string_view body, int64_t now);
  admin_reply get_account(std::string_view id, int64_t now);
  admin_reply set_account(std::string_view id, bool suspend, int64_t now);
  admin_reply create_key(std::string_view body, int64_t now);
  admin_reply list_keys(std::string_view query, int64_t now);
  admin_reply revoke_key(std::string_view id, int64_t now);
  admin_reply rotate_key(std::string_view id, std::string_view body, int64_t now);
  admin_reply patch_key(std::string_view id, std::string_view body, int64_t now);
  admin_reply usage(std::string_view query, int64_t now);
  admin_reply usage_export(std::string_view query);

  /// Puts a change to keys or accounts in force (see the file comment).
  void put_in_force(bool may_wait);
  bool token_ok(const http::request& req) const;
  result<quota::store_contents, quota::store_error> contents();

  shared_state& st_;
  std::unique_ptr<quota::key_backend> keys_;
  const bool cluster_;
  config::settings usage_source_;  // where the export reads keys and usage (read_month_billing)
  std::string token_name_;
  bool token_set_ = false;
  quota::digest token_hash_{};
  std::string disabled_why_;
  std::string stripe_secret_;  // empty: the webhook answers 403
  std::string stripe_why_;
  bool public_webhook_ = false;
  int64_t tolerance_secs_ = 300;
  int64_t rotate_grace_secs_ = 86400;
  std::vector<std::string> suspend_on_;

  std::mutex mu_;  // every change, and store_'s idempotency and event look-ups with it
  std::unique_ptr<offcore<admin_reply>> work_;  // a public core's webhook, acted on off the core
  admin_store store_;  // the audit log, idempotency answers and event ids (admin_store.h)
  std::unique_ptr<meter_pusher> meter_;  // [stripe] meter_event_name: the overage push

  std::atomic<uint64_t> events_applied_{0}, events_ignored_{0}, events_refused_{0},
      events_duplicate_{0};
  std::atomic<uint64_t> answers_2xx_{0}, answers_4xx_{0}, answers_5xx_{0};
};

/// The start's checks of [admin] and [stripe] (serve and `config check` alike): a token or
/// secret source that is configured must be usable (the variable set, the file readable), and
/// the routes need somewhere to be served (server.admin_listen, or public_webhook for the
/// webhook alone; checked only when `serving`, since `config check` does not see the flags).
/// The reason, naming the key, when not.
result<void, std::string> check_admin_config(const config::settings& s, bool serving);
/// Builds `st.admin` for a server with keys (no-op on a shard node): its key store is the data
/// dir's, or Redis in cluster mode. 0, or the exit code after logging why.
int make_admin_api(shared_state& st, const config::settings& s);

/// The OpenAPI 3.1 document of the admin routes (GET /admin/openapi.json): the bytes of
/// docs/admin-openapi.json.
std::string_view admin_openapi();

}  // namespace tollgate::app
