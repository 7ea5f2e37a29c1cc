#include <fmt/format.h>
#include <simdjson.h>

#include <chrono>
#include <ctime>

#include "admin_util.h"
#include "cluster_cli.h"
#include "gate.h"
#include "handler.h"
#include "oauth.h"
#include "oauth_cimd.h"
#include "oauth_page.h"
#include "oauth_reply.h"
#include "oauth_store.h"
#include "oauth_util.h"
#include "offcore.h"
#include "tollgate/common/log.h"
#include "tollgate/http/response.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/service.h"

namespace tollgate::app::oauth {
namespace {

constexpr int64_t kCodeSecs = 60;      // an authorization code lives at most this long
constexpr int64_t kConsentSecs = 600;  // a consent form is good for this long
constexpr int kRegistrationsPerWindow = 60;
constexpr int64_t kRegistrationWindow = 600;
constexpr int kFailuresPerWindow = 8;  // wrong keys on the consent page, per address
constexpr int64_t kFailureWindow = 300;

// The address without its port ("1.2.3.4:5" → "1.2.3.4", "[::1]:5" → "[::1]").
std::string_view addr_of(std::string_view peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string_view::npos || peer.find(']') > colon ? peer : peer.substr(0, colon);
}

// The name the consent page shows. A metadata document's client_name is the client's own
// claim, but the host its document was fetched from is not (the draft's security
// considerations ask for it to be shown), so it follows the name.
std::string display_name(const client& c) {
  if (!is_url_client_id(c.id)) {
    return c.name;
  }
  const std::string_view host = uri_host(c.id);
  return c.name.empty() ? fmt::format("An app from {}", host)
                        : fmt::format("{} (from {})", c.name, host);
}

// The authorization request's fields the consent form carries (and its CSRF token binds).
constexpr std::string_view kCarried[] = {"client_id",      "redirect_uri", "state",
                                         "code_challenge", "resource",     "scope"};

}  // namespace

oauth_reply json_error(int status, std::string_view error, std::string_view description) {
  oauth_reply a;
  a.status = status;
  a.body = fmt::format(R"({{"error":{},"error_description":{}}})", admin::js(error),
                       admin::js(description));
  a.headers = std::string(kCors) + std::string(kNoStore);
  return a;
}

oauth_reply page(int status, std::string body) {
  oauth_reply a;
  a.status = status;
  a.body = std::move(body);
  a.content_type = "text/html; charset=utf-8";
  a.headers = std::string(kPageHeaders);
  return a;
}

oauth_reply error_page_answer(int status, std::string_view title, std::string_view message) {
  return page(status, error_page(title, message));
}

// A request waiting for a client's metadata document: handle() writes nothing for it.
oauth_reply pending_answer() {
  oauth_reply a;
  a.pending = true;
  return a;
}

oauth_reply redirect(std::string_view location) {
  oauth_reply a;
  a.status = 302;
  a.content_type = {};
  a.headers = fmt::format("Location: {}\r\n", location) + std::string(kPageHeaders);
  return a;
}

bool form_body(const http::request& req) {
  const std::string_view ct = req.field_value(http::field::content_type);
  return ct.substr(0, 33) == "application/x-www-form-urlencoded";
}

std::string get(const params& p, std::string_view name) {
  auto it = p.find(name);
  return it == p.end() ? std::string() : it->second;
}

server::server(const config::settings& s, quota::service& q) : s_(s), q_(q) {
  store_ = std::make_unique<store>(s.data_dir, &q, s.oauth_access_token_secs,
                                   s.oauth_refresh_token_secs);
  if (s.cluster) {
    // (A password variable that is not set was refused at start by the cluster's own check.)
    if (auto cs = cluster_settings(s, "oauth"); cs) {
      store_->use_redis(*cs, 1000);
    }
  }
  if (offers("metadata_document")) {
    cimd_options o;
    o.allow = s.oauth_cimd_allow;
    o.ca_file = s.oauth_cimd_ca_file;
    o.timeout_ms = s.oauth_cimd_timeout_ms;
    cimd_ = std::make_unique<cimd_fetcher>(std::move(o));
  }
  uint8_t k[32];
  if (quota::fs::random_bytes(k, sizeof k)) {
    csrf_key_.assign(reinterpret_cast<const char*>(k), sizeof k);
  }
}

server::~server() {
  if (work_) {
    work_->stop();
  }
}

result<void, std::string> server::start(int64_t now_unix) {
  if (csrf_key_.empty()) {
    return unexpected(std::string("oauth: no random bytes for the consent forms' key"));
  }
  if (auto o = store_->open(now_unix, true); !o) {
    return o;
  }
  work_ = std::make_unique<offcore<oauth_reply>>([this](int64_t now) { tick(now); });
  work_->start();
  return {};
}

void server::tick(int64_t now) {
  store_->poll(now);
  if (++ticks_ % 240 == 0) {  // once a minute: forget old per-address windows
    std::lock_guard g(limits_mu_);
    std::erase_if(registrations_,
                  [&](const auto& e) { return now - e.second.first >= kRegistrationWindow; });
    std::erase_if(failures_, [&](const auto& e) { return now - e.second.first >= kFailureWindow; });
  }
}

server::oauth_reply server::off_core(call& c, std::function<oauth_reply()> work) {
  if (!c.ticket.parkable() || !c.wake || !work_) {
    return work();
  }
  work_->submit(c.ticket, std::move(work), c.wake);
  return pending_answer();
}

bool server::offers(std::string_view registration) const {
  for (const std::string& r : s_.oauth_registrations) {
    if (r == registration) {
      return true;
    }
  }
  return false;
}

int64_t server::wait_bound_ms() const noexcept { return cimd_ ? cimd_->wait_bound_ms() : 0; }

server::found server::find_client(const std::string& id, int64_t now, call& cl, client& c,
                                  std::string& why) {
  const std::function<void()>& wake = cl.wake;
  if (!is_url_client_id(id)) {
    auto r = store_->find_client(id);
    if (!r && offers("dynamic") && store_->clustered() && !cl.synced) {
      // Perhaps registered on another node a moment ago: looked up again once the worker has
      // read the cluster's newest lines.
      (void)off_core(cl, [this] {
        store_->poll(static_cast<int64_t>(std::time(nullptr)));
        oauth_reply a;
        a.synced = true;
        return a;
      });
      if (cl.ticket.parkable() && cl.wake && work_) {
        return found::pending;
      }
      cl.synced = true;
      r = store_->find_client(id);
    }
    if (!r || !offers("dynamic")) {
      why = "This app (client_id) is not registered with this server.";
      return found::no;
    }
    c = std::move(*r);
    return found::yes;
  }
  if (!cimd_) {
    why =
        "This app identifies itself by a metadata document URL, which this server does not "
        "accept ([oauth] registrations).";
    return found::no;
  }
  // The URL's own rules first: a malformed one is refused without a fetch (or a wait).
  if (auto t = parse_client_id_url(id, s_.oauth_cimd_allow); !t) {
    why = t.error();
    return found::no;
  }
  if (!wake) {
    why = "This app's metadata document cannot be fetched here; retry shortly.";
    return found::no;
  }
  cimd_fetcher::outcome o = cimd_->lookup(id, now, wake);
  if (o.st == cimd_fetcher::state::pending) {
    return found::pending;
  }
  if (o.st == cimd_fetcher::state::failed) {
    why = std::move(o.error);
    return found::no;
  }
  c = std::move(o.c);
  return found::yes;
}

bool server::owns(std::string_view path) noexcept {
  if (path == "/register" || path == "/authorize" || path == "/token" || path == "/revoke") {
    return true;
  }
  // The documents at the root, and with the resource's path appended (RFC 9728 §3.1, RFC 8414
  // §3.1: clients try both).
  for (std::string_view doc :
       {"/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration"}) {
    if (path == doc || (path.size() == doc.size() + 4 && path.substr(0, doc.size()) == doc &&
                        path.substr(doc.size()) == "/mcp")) {
      return true;
    }
  }
  return false;
}

std::string server::base(const http::request& req) const {
  std::string b;
  b.reserve(300);
  (void)oauth_base(req, s_.oauth_issuer, b);
  return b;
}

std::string server::csrf(std::string_view request_fields, int64_t expires) const {
  // In cluster mode the key every node shares (the form may be posted to another node).
  const std::string shared = store_->form_key();
  const quota::digest d = admin::hmac_sha256(shared.empty() ? csrf_key_ : shared,
                                             fmt::format("consent|{}|{}", expires, request_fields));
  return fmt::format("{}.{}", expires, quota::fs::to_hex(d.data(), d.size()));
}

bool server::allow(std::unordered_map<std::string, std::pair<int64_t, int>>& m,
                   std::string_view addr, int64_t now, int limit, int64_t window,
                   int64_t& retry_after, bool count) {
  std::lock_guard g(limits_mu_);
  auto& w = m[std::string(addr)];
  if (now - w.first >= window) {
    w = {now, 0};
  }
  if (w.second >= limit) {
    retry_after = std::max<int64_t>(1, w.first + window - now);
    return false;
  }
  if (count) {
    ++w.second;
  }
  return true;
}

bool server::key_live(uint64_t key_id) const {
  if (s_.cluster) {
    return q_.key_in_force(key_id);  // the key set the cluster agent last read from Redis
  }
  auto keys = quota::key_store(s_.data_dir).list_keys();
  if (!keys) {
    return false;
  }
  const auto now = static_cast<int64_t>(std::time(nullptr));
  for (const quota::key_entry& k : *keys) {
    if (k.id == key_id) {
      return !k.revoked && (k.expires_unix == 0 || k.expires_unix > now);
    }
  }
  return false;
}

oauth_reply server::metadata(const http::request& req, bool resource) const {
  const std::string b = base(req);
  oauth_reply a;
  a.headers = std::string(kCors);
  if (resource) {
    a.body = fmt::format(
        R"({{"resource":{},"authorization_servers":[{}],"bearer_methods_supported":["header"],)"
        R"("scopes_supported":["mcp"],"resource_name":"tollgate"}})",
        admin::js(b + "/mcp"), admin::js(b));
    return a;
  }
  a.body = fmt::format(
      R"({{"issuer":{0},"authorization_endpoint":{1},"token_endpoint":{2},{3})"
      R"("revocation_endpoint":{4},"response_types_supported":["code"],)"
      R"("response_modes_supported":["query"],)"
      R"("grant_types_supported":["authorization_code","refresh_token"],)"
      R"("code_challenge_methods_supported":["S256"],)"
      R"("token_endpoint_auth_methods_supported":["none"],)"
      R"("revocation_endpoint_auth_methods_supported":["none"],"scopes_supported":["mcp"],)"
      R"("client_id_metadata_document_supported":{5},)"
      R"("authorization_response_iss_parameter_supported":true}})",
      admin::js(b), admin::js(b + "/authorize"), admin::js(b + "/token"),
      offers("dynamic") ? fmt::format(R"("registration_endpoint":{},)", admin::js(b + "/register"))
                        : std::string(),
      admin::js(b + "/revoke"), cimd_ ? "true" : "false");
  return a;
}

oauth_reply server::do_register(const http::request& req, std::string_view addr, int64_t now,
                                call& cl) {
  if (!offers("dynamic")) {
    return json_error(404, "invalid_request",
                      "Dynamic client registration is not offered here; use a client ID "
                      "metadata document URL as client_id.");
  }
  int64_t retry = 0;
  if (!allow(registrations_, addr, now, kRegistrationsPerWindow, kRegistrationWindow, retry,
             true)) {
    oauth_reply a = json_error(429, "too_many_requests",
                               "Too many client registrations from this address; retry later.");
    a.headers += fmt::format("Retry-After: {}\r\n", retry);
    return a;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::object obj;
  if (req.body.size() > 16384 ||
      parser.parse(req.body.data(), req.body.size(), true).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(obj) != simdjson::SUCCESS) {
    return json_error(400, "invalid_client_metadata", "The body must be a JSON object.");
  }
  std::vector<std::string> uris;
  std::string name;
  for (auto field : obj) {
    const std::string_view k = field.key;
    if (k == "redirect_uris") {
      simdjson::dom::array arr;
      if (field.value.get_array().get(arr) != simdjson::SUCCESS) {
        return json_error(400, "invalid_redirect_uri", "redirect_uris must be an array.");
      }
      for (auto u : arr) {
        std::string_view sv;
        if (u.get_string().get(sv) != simdjson::SUCCESS || !valid_redirect_uri(sv)) {
          return json_error(400, "invalid_redirect_uri",
                            "Each redirect URI must be an absolute https:// URI, or http:// on "
                            "a loopback host (127.0.0.1, [::1], localhost), without a fragment, "
                            "at most 512 bytes.");
        }
        uris.emplace_back(sv);
      }
    } else if (k == "client_name") {
      std::string_view sv;
      if (field.value.get_string().get(sv) != simdjson::SUCCESS || sv.size() > kMaxClientName) {
        return json_error(400, "invalid_client_metadata",
                          "client_name must be a string of at most 128 bytes.");
      }
      for (char c : sv) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          return json_error(400, "invalid_client_metadata",
                            "client_name must hold no control characters.");
        }
      }
      name = sv;
    } else if (k == "token_endpoint_auth_method") {
      std::string_view sv;
      if (field.value.get_string().get(sv) != simdjson::SUCCESS || sv != "none") {
        return json_error(400, "invalid_client_metadata",
                          "Only public clients are registered: token_endpoint_auth_method "
                          "must be \"none\" (PKCE protects the code).");
      }
    } else if (k == "grant_types" || k == "response_types") {
      simdjson::dom::array arr;
      if (field.value.get_array().get(arr) != simdjson::SUCCESS) {
        return json_error(400, "invalid_client_metadata", fmt::format("{} must be an array.", k));
      }
      for (auto g : arr) {
        std::string_view sv;
        const bool ok = g.get_string().get(sv) == simdjson::SUCCESS &&
                        (k == "grant_types" ? sv == "authorization_code" || sv == "refresh_token"
                                            : sv == "code");
        if (!ok) {
          return json_error(400, "invalid_client_metadata",
                            k == "grant_types"
                                ? "grant_types may hold authorization_code and refresh_token."
                                : "response_types may hold only code.");
        }
      }
    }  // other metadata (logo_uri, scope, ...) is accepted and not kept
  }
  if (uris.empty() || uris.size() > kMaxRedirectUris) {
    return json_error(400, "invalid_redirect_uri", "Give 1 to 10 redirect_uris.");
  }
  return off_core(cl, [this, name = std::move(name), uris = std::move(uris), now]() mutable {
    auto c = store_->register_client(std::move(name), std::move(uris), now);
    if (!c) {
      return json_error(503, "temporarily_unavailable",
                        "The registration could not be stored; retry shortly.");
    }
    oauth_reply a;
    a.status = 201;
    a.headers = std::string(kCors) + std::string(kNoStore);
    std::string list;
    for (const std::string& u : c->redirect_uris) {
      list += (list.empty() ? "" : ",") + admin::js(u);
    }
    a.body = fmt::format(
        R"({{"client_id":{},"client_id_issued_at":{},"client_name":{},"redirect_uris":[{}],)"
        R"("grant_types":["authorization_code","refresh_token"],"response_types":["code"],)"
        R"("token_endpoint_auth_method":"none"}})",
        admin::js(c->id), now, admin::js(c->name), list);
    return a;
  });
}

oauth_reply server::authorize_get(const http::request& req, int64_t now, call& cl) {
  auto p = parse_form(req.query);
  if (!p) {
    return error_page_answer(400, "This sign-in request is malformed", p.error());
  }
  // 1. Until the client and its redirect URI are known, errors are shown here (never
  //    redirected: that would make this an open redirector).
  const std::string client_id = get(*p, "client_id");
  client c;
  std::string why;
  const found f = find_client(client_id, now, cl, c, why);
  if (f == found::pending) {
    return pending_answer();  // delivered again once its metadata document is in
  }
  if (f == found::no) {
    return error_page_answer(400, "Unknown app", why);
  }
  std::string redirect_uri = get(*p, "redirect_uri");
  if (redirect_uri.empty() && c.redirect_uris.size() == 1) {
    redirect_uri = c.redirect_uris[0];
  }
  bool registered = false;
  for (const std::string& u : c.redirect_uris) {
    registered = registered || u == redirect_uri;
  }
  if (!registered) {
    return error_page_answer(400, "Redirect address not registered",
                             is_url_client_id(client_id)
                                 ? "The redirect_uri of this request is not one of the "
                                   "redirect_uris of this app's metadata document, so you are "
                                   "not sent there."
                                 : "The redirect_uri of this request is not one this app "
                                   "registered, so you are not sent there.");
  }
  // 2. From here errors go back to the client (RFC 6749 §4.1.2.1), with `iss` (RFC 9207).
  const std::string b = base(req);
  const std::string state = get(*p, "state");
  auto fail = [&](std::string_view error, std::string_view description) {
    std::string q = "error=" + pct(error) + "&error_description=" + pct(description);
    if (!state.empty()) {
      q += "&state=" + pct(state);
    }
    q += "&iss=" + pct(b);
    return redirect(with_query(redirect_uri, q));
  };
  if (get(*p, "response_type") != "code") {
    return fail("unsupported_response_type", "response_type must be code");
  }
  const std::string challenge = get(*p, "code_challenge");
  if (challenge.empty()) {
    return fail("invalid_request", "PKCE is required: send code_challenge (S256)");
  }
  if (get(*p, "code_challenge_method") != "S256") {
    return fail("invalid_request", "code_challenge_method must be S256 (plain is refused)");
  }
  if (challenge.size() != 43) {
    return fail("invalid_request", "code_challenge must be a base64url SHA-256 (43 characters)");
  }
  const std::string resource = get(*p, "resource");
  if (!resource.empty() && resource != b + "/mcp") {
    return fail("invalid_target", "resource must be this server's " + b + "/mcp");
  }
  if (state.size() > kMaxState || get(*p, "scope").size() > 256) {
    return fail("invalid_request", "state or scope is too long");
  }
  // 3. The consent page, carrying the request and its CSRF token.
  std::string fields;
  const std::string name = display_name(c);
  consent_view v;
  v.client_name = name;
  v.redirect_host = uri_host(redirect_uri);
  std::vector<std::string> values;
  values.reserve(std::size(kCarried));
  for (std::string_view f : kCarried) {
    values.push_back(f == "redirect_uri" ? redirect_uri : get(*p, f));
    fields += pct(values.back()) + "|";
  }
  const std::string token = csrf(fields, now + kConsentSecs);
  for (size_t i = 0; i < std::size(kCarried); ++i) {
    v.hidden.emplace_back(kCarried[i], values[i]);
  }
  v.hidden.emplace_back("csrf", token);
  return page(200, consent_page(v));
}

oauth_reply server::authorize_post(const http::request& req, quota::core_ledger& ledger,
                                   std::string_view addr, int64_t now, call& cl) {
  if (!form_body(req)) {
    return error_page_answer(415, "Unexpected form", "The consent form is sent form-encoded.");
  }
  auto p = parse_form(req.body);
  if (!p) {
    return error_page_answer(400, "This form is malformed", p.error());
  }
  // The CSRF token: made by this process for exactly these fields, and not stale.
  std::string fields;
  for (std::string_view f : kCarried) {
    fields += pct(get(*p, f)) + "|";
  }
  const std::string token = get(*p, "csrf");
  const size_t dot = token.find('.');
  int64_t expires = 0;
  if (dot != std::string::npos) {
    expires = std::strtoll(token.substr(0, dot).c_str(), nullptr, 10);
  }
  if (token.empty() || dot == std::string::npos || expires < now ||
      !equal_ct(token, csrf(fields, expires))) {
    return error_page_answer(400, "This form has expired",
                             "The consent form was not issued by this server for this request, "
                             "or it is too old, or the server restarted since.");
  }
  // The client and redirect URI were checked when the form was made (and are bound by it); the
  // client may have been removed since.
  const std::string client_id = get(*p, "client_id");
  const std::string redirect_uri = get(*p, "redirect_uri");
  client c;
  std::string why;
  const found f = find_client(client_id, now, cl, c, why);
  if (f == found::pending) {
    return pending_answer();
  }
  if (f == found::no) {
    return error_page_answer(400, "Unknown app", why);
  }
  const std::string b = base(req);
  const std::string state = get(*p, "state");
  auto back = [state, b, redirect_uri](std::string q) {
    if (!state.empty()) {
      q += "&state=" + pct(state);
    }
    q += "&iss=" + pct(b);
    return redirect(with_query(redirect_uri, q));
  };
  if (get(*p, "action") == "deny") {
    return back("error=access_denied&error_description=" + pct("the user denied access"));
  }
  int64_t retry = 0;
  if (!allow(failures_, addr, now, kFailuresPerWindow, kFailureWindow, retry, false)) {
    oauth_reply a = error_page_answer(
        429, "Too many attempts",
        fmt::format("Too many wrong keys were entered from your address. Try again in {} "
                    "seconds.",
                    retry));
    a.headers += fmt::format("Retry-After: {}\r\n", retry);
    return a;
  }
  // The key, checked exactly as the hot path checks it (an access token is not a key here).
  const std::string key = get(*p, "api_key");
  const quota::key_record* rec =
      key.empty() || key.rfind(kAccessPrefix, 0) == 0 ? nullptr : ledger.authenticate_newest(key);
  if (rec == nullptr) {
    (void)allow(failures_, addr, now, kFailuresPerWindow, kFailureWindow, retry, true);
    const std::string name = display_name(c);
    consent_view v;
    v.client_name = name;
    v.redirect_host = uri_host(redirect_uri);
    v.message = key.empty() ? "Enter your API key."
                            : "That API key is not valid: it is unknown or revoked. Check it "
                              "and try again.";
    for (std::string_view f : kCarried) {
      v.hidden.emplace_back(f, p->find(f) == p->end() ? std::string_view() : p->find(f)->second);
    }
    v.hidden.emplace_back("csrf", token);
    return page(401, consent_page(v));
  }
  code_data d;
  d.client_id = client_id;
  d.redirect_uri = redirect_uri;
  d.challenge = get(*p, "code_challenge");
  d.resource = get(*p, "resource");
  d.scope = get(*p, "scope");
  d.key_id = rec->key_id;
  d.expires = now + kCodeSecs;
  // The code is kept by the store (in cluster mode in Redis, so any node redeems it once).
  return off_core(cl, [this, d = std::move(d), back = std::move(back)]() mutable {
    const std::string code = store_->issue_code(std::move(d));
    if (code.empty()) {
      return back("error=temporarily_unavailable&error_description=" +
                  pct("the authorization could not be stored; try again"));
    }
    return back("code=" + pct(code));
  });
}

http::response_info server::handle(const http::request& req, quota::core_ledger& ledger,
                                   std::string_view peer, out_buffer& out, int64_t now_unix,
                                   const std::function<void()>& wake, const offcore_ticket& t) {
  const std::string_view path = req.path;
  const std::string_view m = req.method;
  const std::string_view addr = addr_of(peer);
  call cl{t, wake};
  oauth_reply a;
  bool ready = false;
  if (t.parkable() && work_) {
    // A delivery again: its part done off the core is answered now (or it still runs).
    switch (work_->take(t, a)) {
      case offcore<oauth_reply>::state::done:
        ready = !a.synced;
        cl.synced = a.synced;
        break;
      case offcore<oauth_reply>::state::running:
        return {0, false, true};
      case offcore<oauth_reply>::state::none:
        break;
    }
  }
  const bool post_route = path == "/register" || path == "/token" || path == "/revoke";
  if (ready) {
    // (answered by the worker)
  } else if (m == "OPTIONS") {
    a.status = 204;
    a.content_type = {};
    a.headers = std::string(kCors) + "Access-Control-Max-Age: 86400\r\n";
  } else if (path.rfind("/.well-known/", 0) == 0) {
    const bool resource = path.rfind("/.well-known/oauth-protected-resource", 0) == 0;
    if (m != "GET" && m != "HEAD") {
      a = json_error(405, "invalid_request", "Use GET.");
      a.headers += "Allow: GET, HEAD, OPTIONS\r\n";
    } else {
      a = metadata(req, resource);
    }
  } else if (path == "/authorize") {
    a = m == "GET" || m == "HEAD" ? authorize_get(req, now_unix, cl)
        : m == "POST"             ? authorize_post(req, ledger, addr, now_unix, cl)
                                  : error_page_answer(405, "Method not allowed", "Use GET.");
  } else if (post_route && m != "POST") {
    a = json_error(405, "invalid_request", "Use POST.");
    a.headers += "Allow: POST, OPTIONS\r\n";
  } else if (path == "/register") {
    a = do_register(req, addr, now_unix, cl);
  } else if (path == "/token") {
    a = token(req, now_unix, cl);
  } else {
    a = revoke(req, now_unix, cl);
  }
  if (a.pending) {
    return {0, false, true};  // the caller parks it until the fetch or the worker ends
  }
  http::response_head h = http::head_for(req, a.status);
  h.content_type = a.content_type;
  h.extra_headers = a.headers;
  http::write_response(out, h, a.body);
  return {a.status, h.close};
}

result<void, std::string> check_oauth_config(const config::settings& s) {
  if (!s.oauth_enabled) {
    return {};
  }
  if (s.oauth_issuer.empty() && !config::is_loopback_host(s.listen.host)) {
    return unexpected(fmt::format(
        "oauth.issuer: required when the listener ({}) is not loopback: the public base URL "
        "clients reach this server at (https://...)",
        s.listen.host));
  }
  return {};
}

}  // namespace tollgate::app::oauth

namespace tollgate::app {

int make_oauth(shared_state& st, const config::settings& s) {
  if (!s.oauth_enabled || !st.quota) {
    return 0;
  }
  if (auto c = oauth::check_oauth_config(s); !c) {
    log_error("{}", c.error());
    return 2;
  }
  auto o = std::make_shared<oauth::server>(s, *st.quota);
  if (auto r = o->start(static_cast<int64_t>(std::time(nullptr))); !r) {
    log_error("oauth: {}", r.error());
    return 1;
  }
  st.oauth = std::move(o);
  log_info("oauth: authorization server on {} (access tokens {} s, refresh tokens {} s)",
           s.oauth_issuer.empty() ? std::string("the listener's own address (loopback)")
                                  : s.oauth_issuer,
           s.oauth_access_token_secs, s.oauth_refresh_token_secs);
  return 0;
}

}  // namespace tollgate::app
