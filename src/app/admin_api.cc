#include "admin_api.h"

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <cstdlib>
#include <ctime>

#include "admin_util.h"
#include "billing.h"
#include "cli.h"
#include "cluster_cli.h"
#include "handler.h"
#include "offcore.h"
#include "stripe_meter.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/fs.h"

namespace tollgate::app {

using namespace admin;  // NOLINT: the admin API's own helpers (admin_util.h)

admin_api::admin_api(shared_state& st, const config::settings& s,
                     std::unique_ptr<quota::key_backend> keys)
    : st_(st),
      keys_(std::move(keys)),
      cluster_(s.cluster),
      usage_source_(s),
      store_(s.data_dir, static_cast<int64_t>(std::time(nullptr))) {
  token_name_ = s.admin_token_name;
  public_webhook_ = s.stripe_public_webhook;
  if (public_webhook_) {
    work_ = std::make_unique<offcore<admin_reply>>();
    work_->start();
  }
  tolerance_secs_ = s.stripe_tolerance_secs;
  rotate_grace_secs_ = s.admin_rotate_grace_secs;
  suspend_on_ = s.stripe_suspend_on;
  if (!s.stripe_meter_event.empty()) {
    meter_ = std::make_unique<meter_pusher>(s);
  }
  if (s.cluster) {
    // Idempotency answers and event ids cluster-wide: a retry may reach another node.
    if (auto cs = cluster_settings(s, "admin"); cs) {
      store_.use_redis(std::move(*cs));
    }
  }
  if (!s.admin_token_env.empty()) {
    const char* v = std::getenv(s.admin_token_env.c_str());
    if (v == nullptr || *v == '\0') {
      disabled_why_ = fmt::format(
          "The admin API is off: [admin] token_env names {}, which is not set in the server's "
          "environment.",
          s.admin_token_env);
    } else {
      token_hash_ = quota::sha256(v);
      token_set_ = true;
    }
  } else if (!s.admin_token_file.empty()) {
    bool missing = false;
    auto f = quota::fs::read_file(s.admin_token_file, &missing);
    std::string tok = f ? f->substr(0, f->find('\n')) : std::string();
    while (!tok.empty() && (tok.back() == '\r' || tok.back() == ' ')) {
      tok.pop_back();
    }
    if (!f || missing || tok.empty()) {
      disabled_why_ =
          fmt::format("The admin API is off: [admin] token_file {} {}.", s.admin_token_file,
                      !f        ? "cannot be read"
                      : missing ? "does not exist"
                                : "holds no token on its first line");
    } else {
      token_hash_ = quota::sha256(tok);
      token_set_ = true;
    }
  } else if (!s.admin_token_sha256.empty()) {
    token_set_ = quota::fs::from_hex(s.admin_token_sha256, token_hash_.data(), token_hash_.size());
  }
  if (!token_set_ && disabled_why_.empty()) {
    disabled_why_ =
        "The admin API is off: no admin token is configured (set [admin] token_env, token_file "
        "or token_sha256 in the config and restart).";
  }
  if (!st.quota) {
    token_set_ = false;
    disabled_why_ = "This node keeps no keys or accounts (a shard node): there is no admin API.";
  }
  if (!s.stripe_secret_env.empty()) {
    const char* v = std::getenv(s.stripe_secret_env.c_str());
    if (v == nullptr || *v == '\0') {
      stripe_why_ = fmt::format(
          "The Stripe webhook is off: [stripe] webhook_secret_env names {}, which is not set in "
          "the server's environment.",
          s.stripe_secret_env);
    } else {
      stripe_secret_ = v;
    }
  } else {
    stripe_why_ =
        "The Stripe webhook is off: set [stripe] webhook_secret_env to the variable holding the "
        "endpoint's signing secret (whsec_...).";
  }
  if (!st.quota) {
    stripe_secret_.clear();
    stripe_why_ = disabled_why_;
  }
  if (!token_set_ && s.admin_listen) {
    log_info("{}", disabled_why_);
  }
}

admin_api::~admin_api() {
  if (work_) {
    work_->stop();  // before the store and the keys it acts on go
  }
}

result<quota::store_contents, quota::store_error> admin_api::contents() { return keys_->load(); }

bool admin_api::token_ok(const http::request& req) const {
  std::string_view tok = presented_key(req);
  if (!token_set_ || tok.empty()) {
    return false;
  }
  const quota::digest d = quota::sha256(tok);
  return CRYPTO_memcmp(d.data(), token_hash_.data(), d.size()) == 0;
}

void admin_api::put_in_force(bool may_wait) {
  if (cluster_) {
    return;  // every node's agent polls Redis (200 ms) and installs the new set
  }
  if (may_wait) {
    std::string why;
    st_.quota->reload_if_changed(true, &why);
    if (!why.empty()) {
      log_error("admin API: keys not reloaded: {}", why);
    }
    (void)st_.quota->wait_until_in_force(1000);
  } else {
    st_.quota->request_reload();  // this core cannot wait for itself: the next tick reloads
  }
}

http::response_info admin_api::handle(const http::request& req, out_buffer& out) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  admin_reply a;
  if (req.path == kWebhookPath) {
    a = webhook(req, now, true);
  } else {
    a = route(req, now);
  }
  (a.status < 300   ? answers_2xx_
   : a.status < 500 ? answers_4xx_
                    : answers_5xx_)
      .fetch_add(1, std::memory_order_relaxed);
  auto head = http::head_for(req, a.status);
  head.content_type = a.content_type;
  if (a.status == 401) {
    a.extra_headers += "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n";
  }
  head.extra_headers = a.extra_headers;
  http::write_response(out, head, a.body);
  return {a.status, head.close};
}

http::response_info admin_api::handle_webhook(const http::request& req, out_buffer& out,
                                              const offcore_ticket& t,
                                              const std::function<void()>& wake) {
  const auto now = static_cast<int64_t>(std::time(nullptr));
  admin_reply a;
  bool parked = false;
  if (t.parkable() && wake && work_) {
    switch (work_->take(t, a)) {
      case offcore<admin_reply>::state::done:
        parked = true;  // acted on by the worker: answered now
        break;
      case offcore<admin_reply>::state::running:
        return {0, false, true};
      case offcore<admin_reply>::state::none:
        break;
    }
  }
  if (!parked) {
    std::function<admin_reply(event)> act;
    if (t.parkable() && wake && work_) {
      act = [&](event e) {
        work_->submit(
            t, [this, e = std::move(e), now] { return event_act(e, now, true); }, wake);
        return admin_reply{0};
      };
    }
    a = webhook(req, now, false, act);
    if (a.status == 0) {
      return {0, false, true};
    }
  }
  auto head = http::head_for(req, a.status);
  head.content_type = a.content_type;
  head.extra_headers = a.extra_headers;
  http::write_response(out, head, a.body);
  return {a.status, head.close};
}

admin_api::admin_reply admin_api::route(const http::request& req, int64_t now) {
  const std::string_view p = req.path;
  if (p == "/admin/openapi.json") {
    if (req.method != "GET" && req.method != "HEAD") {
      return {405, error_body("method_not_allowed", "Read the document with GET."),
              "Allow: GET\r\n"};
    }
    return {200, std::string(admin_openapi())};
  }
  if (!token_set_) {
    return {403, error_body("admin_disabled", disabled_why_)};
  }
  if (!token_ok(req)) {
    return {401,
            error_body("unauthorized",
                       presented_key(req).empty()
                           ? "The admin API needs the admin token: Authorization: Bearer TOKEN."
                           : "The admin token presented is not the configured one.")};
  }
  if (req.method == "POST" || req.method == "PATCH") {
    std::string_view idem = req.header_value("Idempotency-Key");
    if (!idem.empty() || req.has_header("Idempotency-Key")) {
      if (!valid_idempotency_key(idem)) {
        return {400, error_body("invalid_idempotency_key",
                                "Idempotency-Key must be 1-255 printable ASCII characters "
                                "without spaces.")};
      }
      return with_idempotency(req, now, idem);
    }
    std::lock_guard g(mu_);
    return dispatch_change(req, now);
  }
  // Reads.
  const bool get = req.method == "GET" || req.method == "HEAD";
  auto not_get = [] {
    return admin_reply{405,
                       error_body("method_not_allowed", "This route does not support that method."),
                       "Allow: GET\r\n"};
  };
  if (p.substr(0, 16) == "/admin/accounts/" && p.find('/', 16) == std::string_view::npos) {
    return get ? get_account(p.substr(16), now)
               : admin_reply{
                     405,
                     error_body("method_not_allowed", "This route does not support that method."),
                     "Allow: GET\r\n"};
  }
  if (p == "/admin/keys") {
    return get ? list_keys(req.query, now)
               : admin_reply{
                     405,
                     error_body("method_not_allowed", "This route does not support that method."),
                     "Allow: GET, POST\r\n"};
  }
  if (p == "/admin/usage") {
    return get ? usage(req.query, now) : not_get();
  }
  if (p == "/admin/usage/export") {
    return get ? usage_export(req.query) : not_get();
  }
  if (p == "/admin/accounts" ||
      (p.substr(0, 16) == "/admin/accounts/" &&
       (p.ends_with("/suspend") || p.ends_with("/resume"))) ||
      (p.substr(0, 12) == "/admin/keys/" && (p.ends_with("/revoke") || p.ends_with("/rotate")))) {
    return {405, error_body("method_not_allowed", "This route takes POST."), "Allow: POST\r\n"};
  }
  if (p.substr(0, 12) == "/admin/keys/" && p.find('/', 12) == std::string_view::npos) {
    return {405, error_body("method_not_allowed", "This route takes PATCH."), "Allow: PATCH\r\n"};
  }
  return {404, std::string(kNoSuchRoute)};
}

admin_api::admin_reply admin_api::with_idempotency(const http::request& req, int64_t now,
                                                   std::string_view idem) {
  const std::string lookup = sha256_hex(fmt::format("{}\n{}", token_name_, idem));
  const std::string fp = sha256_hex(fmt::format("{} {}\n{}", req.method, req.path, req.body));
  std::lock_guard g(mu_);
  if (const admin_store::idem_entry* e = store_.find_answer(lookup, now)) {
    if (e->fingerprint != fp) {
      return {422, error_body("idempotency_key_reused",
                              "This Idempotency-Key was used within the last 24 hours for a "
                              "different request; use a new key for a new request.")};
    }
    std::string sealed(e->sealed.size() / 2, '\0');
    quota::fs::from_hex(e->sealed, reinterpret_cast<uint8_t*>(sealed.data()), sealed.size());
    return {e->status, seal(idem, sealed), "Idempotent-Replayed: true\r\n"};
  }
  admin_reply a = dispatch_change(req, now);
  if (a.status >= 200 && a.status < 300) {
    const std::string s = seal(idem, a.body);
    store_.remember_answer(
        lookup, {now, fp, a.status, hex(reinterpret_cast<const uint8_t*>(s.data()), s.size())},
        now);
  }
  return a;
}

admin_api::admin_reply admin_api::dispatch_change(const http::request& req, int64_t now) {
  const std::string_view p = req.path;
  const bool post = req.method == "POST";
  if (p == "/admin/accounts") {
    return post ? create_account(req.body, now)
                : admin_reply{405, error_body("method_not_allowed", "This route takes POST."),
                              "Allow: POST\r\n"};
  }
  if (p == "/admin/keys") {
    return post
               ? create_key(req.body, now)
               : admin_reply{405, error_body("method_not_allowed", "This route takes GET or POST."),
                             "Allow: GET, POST\r\n"};
  }
  if (p.substr(0, 16) == "/admin/accounts/") {
    std::string_view rest = p.substr(16);
    const size_t slash = rest.find('/');
    if (slash != std::string_view::npos && post) {
      const std::string_view verb = rest.substr(slash + 1);
      if (verb == "suspend" || verb == "resume") {
        return set_account(rest.substr(0, slash), verb == "suspend", now);
      }
    }
  }
  if (p.substr(0, 12) == "/admin/keys/") {
    std::string_view rest = p.substr(12);
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos && req.method == "PATCH") {
      return patch_key(rest, req.body, now);
    }
    if (slash != std::string_view::npos && post) {
      const std::string_view verb = rest.substr(slash + 1);
      if (verb == "revoke") {
        return revoke_key(rest.substr(0, slash), now);
      }
      if (verb == "rotate") {
        return rotate_key(rest.substr(0, slash), req.body, now);
      }
    }
  }
  const bool known =
      (p.substr(0, 16) == "/admin/accounts/" && p.find('/', 16) == std::string_view::npos) ||
      (p.substr(0, 12) == "/admin/keys/" && p.find('/', 12) == std::string_view::npos) ||
      p == "/admin/usage" || p == "/admin/usage/export" || p == "/admin/openapi.json";
  if (known) {
    return {405, error_body("method_not_allowed", "This route does not support that method."),
            p.substr(0, 12) == "/admin/keys/" ? "Allow: PATCH\r\n" : "Allow: GET\r\n"};
  }
  return {404, std::string(kNoSuchRoute)};
}

result<void, std::string> check_admin_config(const config::settings& s, bool serving) {
  const bool admin =
      !s.admin_token_env.empty() || !s.admin_token_file.empty() || !s.admin_token_sha256.empty();
  const bool stripe = !s.stripe_secret_env.empty();
  if (!s.admin_token_env.empty()) {
    const char* v = std::getenv(s.admin_token_env.c_str());
    if (v == nullptr || *v == '\0') {
      return unexpected(
          fmt::format("admin.token_env: the variable {} is not set (or empty)", s.admin_token_env));
    }
  }
  if (!s.admin_token_file.empty()) {
    bool missing = false;
    auto f = quota::fs::read_file(s.admin_token_file, &missing);
    if (!f || missing ||
        f->substr(0, f->find('\n')).find_first_not_of(" \r") == std::string::npos) {
      return unexpected(fmt::format("admin.token_file: {} {}", s.admin_token_file,
                                    !f        ? "cannot be read: " + f.error()
                                    : missing ? std::string("does not exist")
                                              : std::string("holds no token on its first line")));
    }
  }
  if (stripe) {
    const char* v = std::getenv(s.stripe_secret_env.c_str());
    if (v == nullptr || *v == '\0') {
      return unexpected(fmt::format(
          "stripe.webhook_secret_env: the variable {} is not set (or empty)", s.stripe_secret_env));
    }
  }
  if (!s.stripe_meter_event.empty()) {
    const char* v = std::getenv(s.stripe_api_key_env.c_str());
    if (v == nullptr || *v == '\0') {
      return unexpected(fmt::format("stripe.api_key_env: the variable {} is not set (or empty)",
                                    s.stripe_api_key_env));
    }
  }
  if (s.stripe_public_webhook && !stripe) {
    return unexpected(std::string(
        "stripe.public_webhook: needs stripe.webhook_secret_env (an unsigned webhook is never "
        "served)"));
  }
  if (serving && (admin || (stripe && !s.stripe_public_webhook)) && !s.admin_listen) {
    return unexpected(std::string(
        "server.admin_listen: [admin] and [stripe] are served on the admin listener only; set "
        "server.admin_listen (or --admin-listen), or stripe.public_webhook for the webhook "
        "alone"));
  }
  return {};
}

int make_admin_api(shared_state& st, const config::settings& s) {
  if (!st.quota) {
    return 0;
  }
  if (auto c = check_admin_config(s, true); !c) {
    log_error("{}{}", s.config_path.empty() ? "" : s.config_path + ": ", c.error());
    return 2;
  }
  std::unique_ptr<quota::key_backend> keys;
  if (s.cluster) {
    auto cs = cluster_settings(s, "admin");
    if (!cs) {
      log_error("{}", cs.error());
      return 2;
    }
    keys = std::make_unique<cluster::redis_keys>(std::move(*cs));
  } else {
    keys = std::make_unique<quota::key_store>(s.data_dir);
  }
  st.admin = std::make_shared<admin_api>(st, s, std::move(keys));
  if (st.admin->public_webhook()) {
    // A public route like the others, so the gate matches it and it is logged and counted.
    st.router.add("POST", admin_api::kWebhookPath, static_cast<http::route_id>(route::webhook));
  }
  return 0;
}

void admin_api::render_metrics(out_buffer& out) const {
  auto line = [&](std::string_view name, std::string_view label, uint64_t v) {
    const std::string s = fmt::format("{}{{{}}} {}\n", name, label, v);
    out.append(s.data(), s.size());
  };
  const std::string h =
      "# HELP tollgate_stripe_events_total Stripe webhook deliveries by outcome.\n"
      "# TYPE tollgate_stripe_events_total counter\n";
  out.append(h.data(), h.size());
  line("tollgate_stripe_events_total", "outcome=\"applied\"", events_applied_.load());
  line("tollgate_stripe_events_total", "outcome=\"ignored\"", events_ignored_.load());
  line("tollgate_stripe_events_total", "outcome=\"duplicate\"", events_duplicate_.load());
  line("tollgate_stripe_events_total", "outcome=\"refused\"", events_refused_.load());
  const std::string h2 =
      "# HELP tollgate_admin_answers_total Admin API answers by status class.\n"
      "# TYPE tollgate_admin_answers_total counter\n";
  out.append(h2.data(), h2.size());
  line("tollgate_admin_answers_total", "class=\"2xx\"", answers_2xx_.load());
  line("tollgate_admin_answers_total", "class=\"4xx\"", answers_4xx_.load());
  line("tollgate_admin_answers_total", "class=\"5xx\"", answers_5xx_.load());
}

}  // namespace tollgate::app
