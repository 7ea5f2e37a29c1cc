#include "admin_api.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <simdjson.h>
#include <strings.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <ctime>
#include <iterator>

#include "billing.h"
#include "cli.h"
#include "cluster_cli.h"
#include "handler.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/usage_read.h"

namespace tollgate::app {

namespace {

constexpr int64_t kRememberSecs = 86400;  // idempotency answers and webhook event ids

std::string js(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (u < 0x20 || u == 0x7f) {
      o += fmt::format("\\u{:04x}", u);
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string utc(int64_t unix) {
  std::time_t t = static_cast<std::time_t>(unix);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hex(const uint8_t* p, size_t n) { return quota::fs::to_hex(p, n); }

std::string sha256_hex(std::string_view s) {
  const quota::digest d = quota::sha256(s);
  return hex(d.data(), d.size());
}

quota::digest hmac_sha256(std::string_view key, std::string_view data) {
  quota::digest d{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data(), &len);
  return d;
}

// XORs `data` with a keystream of HMAC-SHA256(idempotency key, "tollgate-idem-N") blocks: the
// stored answer is readable only by whoever presents the same Idempotency-Key again.
std::string seal(std::string_view idem, std::string_view data) {
  std::string o(data);
  for (size_t block = 0; block * 32 < o.size(); ++block) {
    const quota::digest ks = hmac_sha256(idem, fmt::format("tollgate-idem-{}", block));
    for (size_t i = 0; i < 32 && block * 32 + i < o.size(); ++i) {
      o[block * 32 + i] = static_cast<char>(o[block * 32 + i] ^ static_cast<char>(ks[i]));
    }
  }
  return o;
}

std::string error_body(std::string_view code, std::string_view message) {
  return fmt::format(R"({{"code":{},"message":{}}})", js(code), js(message));
}

// The value of `name` in a query string (percent-decoded, '+' as space); nullopt when absent.
std::optional<std::string> query_param(std::string_view q, std::string_view name) {
  size_t pos = 0;
  while (pos <= q.size()) {
    size_t amp = q.find('&', pos);
    if (amp == std::string_view::npos) {
      amp = q.size();
    }
    std::string_view kv = q.substr(pos, amp - pos);
    pos = amp + 1;
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) != name) {
      continue;
    }
    std::string_view v = eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1);
    std::string o;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '+') {
        o += ' ';
      } else if (v[i] == '%' && i + 2 < v.size()) {
        auto h = [](char c) {
          return c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : -1;
        };
        const int a = h(v[i + 1]), b = h(v[i + 2]);
        if (a < 0 || b < 0) {
          o += v[i];
          continue;
        }
        o += static_cast<char>(a * 16 + b);
        i += 2;
      } else {
        o += v[i];
      }
    }
    return o;
  }
  return std::nullopt;
}

// A JSON object body's string members, checked against the names allowed. Anything else (not
// JSON, not an object, a member of another type or name, a member twice) is an error message.
struct body_fields {
  std::map<std::string, std::string, std::less<>> strings;
  std::map<std::string, int64_t, std::less<>> integers;
};

result<body_fields, std::string> parse_body(std::string_view body,
                                            std::initializer_list<std::string_view> strings,
                                            std::initializer_list<std::string_view> integers,
                                            bool empty_ok) {
  body_fields f;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    if (empty_ok) {
      return f;
    }
    return unexpected(std::string("The request needs a JSON object body."));
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body.data(), body.size(), true).get(doc) != simdjson::SUCCESS) {
    return unexpected(std::string("The body is not valid JSON."));
  }
  simdjson::dom::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) {
    return unexpected(std::string("The body must be a JSON object."));
  }
  for (auto [k, v] : obj) {
    const bool is_s = std::find(strings.begin(), strings.end(), k) != strings.end();
    const bool is_i = std::find(integers.begin(), integers.end(), k) != integers.end();
    if (!is_s && !is_i) {
      return unexpected(fmt::format("Unknown member \"{}\" in the body.", k));
    }
    if (f.strings.count(k) || f.integers.count(k)) {
      return unexpected(fmt::format("Member \"{}\" is given twice.", k));
    }
    if (is_s) {
      std::string_view sv;
      if (v.get_string().get(sv) != simdjson::SUCCESS) {
        return unexpected(fmt::format("Member \"{}\" must be a string.", k));
      }
      f.strings.emplace(std::string(k), std::string(sv));
    } else {
      int64_t iv = 0;
      if (v.get_int64().get(iv) != simdjson::SUCCESS) {
        return unexpected(fmt::format("Member \"{}\" must be an integer.", k));
      }
      f.integers.emplace(std::string(k), iv);
    }
  }
  return f;
}

std::string key_json(const quota::key_entry& k, bool suspended, int64_t now) {
  const bool expired = k.expires_unix > 0 && k.expires_unix <= now;
  return fmt::format(
      R"({{"id":"{}","account":{},"plan":{},"created":"{}","status":"{}","expires":{}}})",
      quota::key_id_string(k.id), js(k.account), js(k.plan), utc(k.created_unix),
      k.revoked   ? "revoked"
      : expired   ? "expired"
      : suspended ? "suspended"
                  : "active",
      k.expires_unix > 0 ? js(utc(k.expires_unix)) : std::string("null"));
}

bool valid_idempotency_key(std::string_view k) {
  if (k.empty() || k.size() > 255) {
    return false;
  }
  for (char c : k) {
    if (c < 0x21 || c > 0x7e) {
      return false;
    }
  }
  return true;
}

}  // namespace

admin_api::admin_api(shared_state& st, const config::settings& s,
                     std::unique_ptr<quota::key_backend> keys)
    : st_(st), keys_(std::move(keys)), cluster_(s.cluster), data_dir_(s.data_dir) {
  token_name_ = s.admin_token_name;
  public_webhook_ = s.stripe_public_webhook;
  tolerance_secs_ = s.stripe_tolerance_secs;
  rotate_grace_secs_ = s.admin_rotate_grace_secs;
  suspend_on_ = s.stripe_suspend_on;
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
  // Load and compact the durable memories (entries older than a day go).
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  bool missing = false;
  if (auto f = quota::fs::read_file(data_dir_ + "/admin-idempotency.txt", &missing); f) {
    std::string kept;
    size_t pos = 0;
    while (pos < f->size()) {
      size_t nl = f->find('\n', pos);
      if (nl == std::string::npos) {
        break;  // a torn last line: its request was not answered
      }
      const std::string line = f->substr(pos, nl - pos);
      pos = nl + 1;
      char lookup[65], fp[65];
      long long at = 0;
      int status = 0;
      int off = 0;
      if (std::sscanf(line.c_str(), "idem %lld %64s %64s %d %n", &at, lookup, fp, &status, &off) ==
              4 &&
          off > 0 && now - at < kRememberSecs) {
        idem_[lookup] = {at, fp, status, line.substr(static_cast<size_t>(off))};
        kept += line + "\n";
      }
    }
    if (!missing) {
      (void)quota::fs::write_file_atomic(data_dir_ + "/admin-idempotency.txt", kept);
    }
  }
  if (auto f = quota::fs::read_file(data_dir_ + "/stripe-events.txt", &missing); f) {
    std::string kept;
    size_t pos = 0;
    while (pos < f->size()) {
      size_t nl = f->find('\n', pos);
      if (nl == std::string::npos) {
        break;
      }
      const std::string line = f->substr(pos, nl - pos);
      pos = nl + 1;
      char id[256];
      long long at = 0;
      if (std::sscanf(line.c_str(), "event %lld %255s", &at, id) == 2 && now - at < kRememberSecs) {
        events_[id] = at;
        kept += line + "\n";
      }
    }
    if (!missing) {
      (void)quota::fs::write_file_atomic(data_dir_ + "/stripe-events.txt", kept);
    }
  }
  if (!token_set_ && s.admin_listen) {
    log_info("{}", disabled_why_);
  }
}

admin_api::~admin_api() = default;

result<quota::store_contents, quota::store_error> admin_api::contents() { return keys_->load(); }

bool admin_api::token_ok(const http::request& req) const {
  std::string_view tok = presented_key(req);
  if (!token_set_ || tok.empty()) {
    return false;
  }
  const quota::digest d = quota::sha256(tok);
  return CRYPTO_memcmp(d.data(), token_hash_.data(), d.size()) == 0;
}

void admin_api::put_in_force(bool admin_core) {
  if (cluster_) {
    return;  // every node's agent polls Redis (200 ms) and installs the new set
  }
  if (admin_core) {
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

void admin_api::audit(int64_t now, std::string_view who, std::string_view action,
                      std::string_view target, int status) {
  const std::string line =
      fmt::format(R"({{"time":"{}","who":{},"action":{},"target":{},"status":{}}})", utc(now),
                  js(who), js(action), js(target), status) +
      "\n";
  if (auto d = quota::fs::ensure_dir(data_dir_); !d) {
    log_error("admin audit: {}", d.error());
    return;
  }
  if (auto r = quota::fs::append_durable(data_dir_ + "/admin-audit.log", line); !r) {
    log_error("admin audit: {}", r.error());
  }
}

http::response_info admin_api::handle(const http::request& req, out_buffer& out) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  answer a;
  if (req.path == k_webhook_path) {
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
                                              bool admin_core) {
  answer a = webhook(req, static_cast<int64_t>(std::time(nullptr)), admin_core);
  auto head = http::head_for(req, a.status);
  head.content_type = a.content_type;
  head.extra_headers = a.extra_headers;
  http::write_response(out, head, a.body);
  return {a.status, head.close};
}

admin_api::answer admin_api::route(const http::request& req, int64_t now) {
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
    return answer{405, error_body("method_not_allowed", "This route does not support that method."),
                  "Allow: GET\r\n"};
  };
  if (p.substr(0, 16) == "/admin/accounts/" && p.find('/', 16) == std::string_view::npos) {
    return get ? get_account(p.substr(16), now)
               : answer{
                     405,
                     error_body("method_not_allowed", "This route does not support that method."),
                     "Allow: GET\r\n"};
  }
  if (p == "/admin/keys") {
    return get ? list_keys(req.query, now)
               : answer{
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
  return {404, std::string(k_no_such_route)};
}

admin_api::answer admin_api::with_idempotency(const http::request& req, int64_t now,
                                              std::string_view idem) {
  const std::string lookup = sha256_hex(fmt::format("{}\n{}", token_name_, idem));
  const std::string fp = sha256_hex(fmt::format("{} {}\n{}", req.method, req.path, req.body));
  std::lock_guard g(mu_);
  if (auto it = idem_.find(lookup); it != idem_.end() && now - it->second.at < kRememberSecs) {
    if (it->second.fingerprint != fp) {
      return {422, error_body("idempotency_key_reused",
                              "This Idempotency-Key was used within the last 24 hours for a "
                              "different request; use a new key for a new request.")};
    }
    std::string sealed(it->second.sealed.size() / 2, '\0');
    quota::fs::from_hex(it->second.sealed, reinterpret_cast<uint8_t*>(sealed.data()),
                        sealed.size());
    return {it->second.status, seal(idem, sealed), "Idempotent-Replayed: true\r\n"};
  }
  answer a = dispatch_change(req, now);
  if (a.status >= 200 && a.status < 300) {
    const std::string s = seal(idem, a.body);
    idem_entry e{now, fp, a.status, hex(reinterpret_cast<const uint8_t*>(s.data()), s.size())};
    const std::string line =
        fmt::format("idem {} {} {} {} {}\n", now, lookup, fp, a.status, e.sealed);
    if (auto r = quota::fs::append_durable(data_dir_ + "/admin-idempotency.txt", line); !r) {
      // The change itself is durable; only a retry's replay is at risk. Said in the log.
      log_error("admin API: idempotency record not written ({}); a retry may repeat the change",
                r.error());
    }
    if (idem_.size() > 100000) {  // answers older than a day are forgotten
      std::erase_if(idem_, [&](const auto& x) { return now - x.second.at >= kRememberSecs; });
    }
    idem_[lookup] = std::move(e);
  }
  return a;
}

admin_api::answer admin_api::dispatch_change(const http::request& req, int64_t now) {
  const std::string_view p = req.path;
  const bool post = req.method == "POST";
  if (p == "/admin/accounts") {
    return post ? create_account(req.body, now)
                : answer{405, error_body("method_not_allowed", "This route takes POST."),
                         "Allow: POST\r\n"};
  }
  if (p == "/admin/keys") {
    return post ? create_key(req.body, now)
                : answer{405, error_body("method_not_allowed", "This route takes GET or POST."),
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
  return {404, std::string(k_no_such_route)};
}

namespace {

// A store error as the admin API's answer.
std::pair<int, std::string> store_answer(const quota::store_error& e) {
  if (e.unsupported) {
    return {501, error_body("not_supported", e.message)};
  }
  if (e.not_found) {
    return {404, error_body("not_found", e.message)};
  }
  if (e.exists) {
    return {409, error_body("conflict", e.message)};
  }
  if (e.usage) {
    return {400, error_body("invalid_argument", e.message)};
  }
  return {500, error_body("store_failed", "The change could not be stored: " + e.message)};
}

std::string account_json(const quota::account_entry& a, const quota::store_contents& c,
                         int64_t now) {
  std::string keys;
  for (const auto& k : c.keys) {
    if (k.account == a.name) {
      keys += (keys.empty() ? "" : ",") + key_json(k, a.suspended, now);
    }
  }
  return fmt::format(R"({{"id":{},"status":"{}","stripe_customer":{},"keys":[{}]}})", js(a.name),
                     a.suspended ? "suspended" : "active",
                     a.customer.empty() ? std::string("null") : js(a.customer), keys);
}

}  // namespace

admin_api::answer admin_api::create_account(std::string_view body, int64_t now) {
  auto f = parse_body(body, {"id", "stripe_customer"}, {}, false);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  auto id = f->strings.find("id");
  if (id == f->strings.end()) {
    return {400, error_body("invalid_argument", "The body needs \"id\": the account's name.")};
  }
  auto cu = f->strings.find("stripe_customer");
  const std::string customer = cu == f->strings.end() ? std::string() : cu->second;
  auto r = keys_->create_account(id->second, customer);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    audit(now, token_name_, "accounts.create", id->second, status);
    return {status, b};
  }
  put_in_force(true);
  audit(now, token_name_, "accounts.create", id->second, 201);
  auto c = contents();
  if (c) {
    for (const auto& a : c->accounts) {
      if (a.name == id->second) {
        return {201, account_json(a, *c, now)};
      }
    }
  }
  return {201, fmt::format(R"({{"id":{},"status":"active","stripe_customer":{},"keys":[]}})",
                           js(id->second), customer.empty() ? "null" : js(customer))};
}

admin_api::answer admin_api::get_account(std::string_view id, int64_t now) {
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  for (const auto& a : c->accounts) {
    if (a.name == id) {
      return {200, account_json(a, *c, now)};
    }
  }
  return {404, error_body("not_found", fmt::format("There is no account \"{}\".", id))};
}

admin_api::answer admin_api::set_account(std::string_view id, bool suspend, int64_t now) {
  return apply_account_status(id, suspend, now, token_name_,
                              suspend ? "accounts.suspend" : "accounts.resume", true);
}

admin_api::answer admin_api::apply_account_status(std::string_view account, bool suspend,
                                                  int64_t now, std::string_view who,
                                                  std::string_view action, bool admin_core) {
  auto r = suspend ? keys_->suspend(account) : keys_->resume(account);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    if (status == 404) {
      b = error_body("not_found", fmt::format("There is no account \"{}\".", account));
    }
    audit(now, who, action, account, status);
    return {status, b};
  }
  put_in_force(admin_core);
  audit(now, who, action, account, 200);
  auto c = contents();
  if (c) {
    for (const auto& a : c->accounts) {
      if (a.name == account) {
        return {200, account_json(a, *c, now)};
      }
    }
  }
  return {200, fmt::format(R"({{"id":{},"status":"{}"}})", js(account),
                           suspend ? "suspended" : "active")};
}

admin_api::answer admin_api::create_key(std::string_view body, int64_t now) {
  auto f = parse_body(body, {"account", "plan"}, {}, false);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  auto acc = f->strings.find("account");
  auto plan = f->strings.find("plan");
  if (acc == f->strings.end() || plan == f->strings.end()) {
    return {400, error_body("invalid_argument",
                            "The body needs \"account\" and \"plan\" (both strings).")};
  }
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  bool known = false;
  for (const auto& a : c->accounts) {
    known = known || a.name == acc->second;
  }
  if (!known) {
    audit(now, token_name_, "keys.create", acc->second, 404);
    return {404,
            error_body("not_found", fmt::format("There is no account \"{}\": create it with POST "
                                                "/admin/accounts first.",
                                                acc->second))};
  }
  const quota::plan_map& plans = st_.quota->options().plans;
  auto r = keys_->create_key(acc->second, plan->second, plans, now);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    audit(now, token_name_, "keys.create", acc->second, status);
    return {status, b};
  }
  put_in_force(true);
  audit(now, token_name_, "keys.create", r->key_id, 201);
  return {201,
          fmt::format(
              R"({{"id":"{}","key":{},"account":{},"plan":{},"created":"{}","status":"active"}})",
              r->key_id, js(r->secret), js(acc->second), js(plan->second), utc(now))};
}

admin_api::answer admin_api::list_keys(std::string_view query, int64_t now) {
  auto account = query_param(query, "account");
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  std::map<std::string, bool, std::less<>> suspended;
  for (const auto& a : c->accounts) {
    suspended[a.name] = a.suspended;
  }
  if (account && !suspended.count(*account)) {
    return {404, error_body("not_found", fmt::format("There is no account \"{}\".", *account))};
  }
  std::string keys;
  for (const auto& k : c->keys) {
    if (!account || k.account == *account) {
      keys += (keys.empty() ? "" : ",") + key_json(k, suspended[k.account], now);
    }
  }
  return {200, fmt::format(R"({{"keys":[{}]}})", keys)};
}

admin_api::answer admin_api::revoke_key(std::string_view id, int64_t now) {
  auto r = keys_->revoke(id);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    audit(now, token_name_, "keys.revoke", id, status);
    return {status, b};
  }
  put_in_force(true);
  audit(now, token_name_, "keys.revoke", id, 200);
  auto c = contents();
  if (c) {
    for (const auto& k : c->keys) {
      if (quota::key_id_string(k.id) == id) {
        return {200, key_json(k, false, now)};
      }
    }
  }
  return {200, fmt::format(R"({{"id":{},"status":"revoked"}})", js(id))};
}

admin_api::answer admin_api::rotate_key(std::string_view id, std::string_view body, int64_t now) {
  auto f = parse_body(body, {}, {"grace_secs"}, true);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  int64_t grace = rotate_grace_secs_;
  if (auto g = f->integers.find("grace_secs"); g != f->integers.end()) {
    if (g->second < 0 || g->second > 30 * 86400) {
      return {400, error_body("invalid_argument",
                              "grace_secs must be between 0 and 2592000 (30 days).")};
    }
    grace = g->second;
  }
  // grace 0: the old key stops at once (the table is rebuilt before the answer).
  auto r = keys_->rotate(id, now, grace == 0 ? now : now + grace);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    audit(now, token_name_, "keys.rotate", id, status);
    return {status, b};
  }
  put_in_force(true);
  audit(now, token_name_, "keys.rotate", fmt::format("{} -> {}", id, r->key_id), 201);
  std::string account, plan;
  if (auto c = contents()) {
    for (const auto& k : c->keys) {
      if (quota::key_id_string(k.id) == r->key_id) {
        account = k.account;
        plan = k.plan;
      }
    }
  }
  return {
      201,
      fmt::format(
          R"({{"id":"{}","key":{},"account":{},"plan":{},"created":"{}","status":"active","replaces":{},"old_key_expires":"{}"}})",
          r->key_id, js(r->secret), js(account), js(plan), utc(now), js(id),
          utc(grace == 0 ? now : now + grace))};
}

admin_api::answer admin_api::patch_key(std::string_view id, std::string_view body, int64_t now) {
  auto f = parse_body(body, {"plan"}, {}, false);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  auto plan = f->strings.find("plan");
  if (plan == f->strings.end()) {
    return {400, error_body("invalid_argument", "The body needs \"plan\": the new plan's name.")};
  }
  auto r = keys_->set_plan(id, plan->second, st_.quota->options().plans);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    audit(now, token_name_, "keys.plan", id, status);
    return {status, b};
  }
  put_in_force(true);
  audit(now, token_name_, "keys.plan", fmt::format("{} -> {}", id, plan->second), 200);
  auto c = contents();
  if (c) {
    for (const auto& k : c->keys) {
      if (quota::key_id_string(k.id) == id) {
        return {200, key_json(k, false, now)};
      }
    }
  }
  return {200, fmt::format(R"({{"id":{},"plan":{}}})", js(id), js(plan->second))};
}

admin_api::answer admin_api::usage(std::string_view query, int64_t now) {
  auto account = query_param(query, "account");
  if (!account || account->empty()) {
    return {400, error_body("invalid_argument", "usage needs ?account=NAME (and &month=YYYY-MM).")};
  }
  uint32_t month = quota::month_index_of_secs(now);
  if (auto m = query_param(query, "month")) {
    auto pm = quota::parse_month(*m);
    if (!pm) {
      return {400, error_body("invalid_argument", pm.error())};
    }
    month = *pm;
  }
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  const quota::account_entry* acc = nullptr;
  for (const auto& a : c->accounts) {
    if (a.name == *account) {
      acc = &a;
    }
  }
  if (acc == nullptr) {
    return {404, error_body("not_found", fmt::format("There is no account \"{}\".", *account))};
  }
  const quota::plan_map& plans = st_.quota->options().plans;
  std::string keys;
  int64_t used = 0, over = 0;
  for (const auto& k : c->keys) {
    if (k.account != *account) {
      continue;
    }
    const quota::usage_totals u = st_.quota->usage(k.id, month);
    int64_t limit = 0;
    std::string_view policy = "stop";
    if (auto p = plans.find(k.plan); p != plans.end()) {
      limit = p->second.monthly_quota;
      policy = p->second.overage == quota::overage_policy::bill ? "bill" : "stop";
    }
    keys += fmt::format(
        R"({}{{"id":"{}","plan":{},"overage_policy":"{}","limit":{},"used":{},"remaining":{},"overage":{},"status":"{}"}})",
        keys.empty() ? "" : ",", quota::key_id_string(k.id), js(k.plan), policy, limit, u.used,
        std::max<int64_t>(0, limit - u.used), u.overage,
        k.revoked                                       ? "revoked"
        : (k.expires_unix > 0 && k.expires_unix <= now) ? "expired"
        : acc->suspended                                ? "suspended"
                                                        : "active");
    used += u.used;
    over += u.overage;
  }
  return {
      200,
      fmt::format(
          R"({{"account":{},"month":"{:04}-{:02}","keys":[{}],"totals":{{"used":{},"overage":{}}}}})",
          js(*account), quota::month_year(month), quota::month_of_year(month), keys, used, over)};
}

admin_api::answer admin_api::usage_export(std::string_view query) {
  auto m = query_param(query, "month");
  if (!m) {
    return {400, error_body("invalid_argument", "usage/export needs ?month=YYYY-MM.")};
  }
  auto month = quota::parse_month(*m);
  if (!month) {
    return {400, error_body("invalid_argument", month.error())};
  }
  const std::string format = query_param(query, "format").value_or("json");
  if (format != "json" && format != "csv") {
    return {400, error_body("invalid_argument", "format must be json or csv.")};
  }
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  auto u = quota::read_month_usage(data_dir_, *month);
  if (!u) {
    return {500, error_body("usage_unreadable", u.error())};
  }
  answer a{200, render_usage_export(*c, st_.quota->options().plans, *month, *u, format == "csv")};
  if (format == "csv") {
    a.content_type = "text/csv; charset=utf-8";
  }
  return a;
}

// ---- the Stripe webhook ----

admin_api::answer admin_api::webhook(const http::request& req, int64_t now, bool admin_core) {
  auto refuse = [&](int status, std::string_view code, std::string_view msg) {
    events_refused_.fetch_add(1, std::memory_order_relaxed);
    return answer{status, error_body(code, msg)};
  };
  if (req.method != "POST") {
    return {405, error_body("method_not_allowed", "Stripe delivers events with POST."),
            "Allow: POST\r\n"};
  }
  if (stripe_secret_.empty()) {
    return refuse(403, "webhook_disabled", stripe_why_);
  }
  // 1. The signature: "t=TIMESTAMP,v1=HEX[,v1=HEX…][,v0=…]"; HMAC-SHA256 of "t.body".
  const std::string_view sig = req.header_value("Stripe-Signature");
  if (sig.empty()) {
    return refuse(400, "missing_signature", "The Stripe-Signature header is missing.");
  }
  std::string_view t;
  std::vector<quota::digest> v1;
  size_t pos = 0;
  while (pos <= sig.size()) {
    size_t comma = sig.find(',', pos);
    if (comma == std::string_view::npos) {
      comma = sig.size();
    }
    std::string_view item = sig.substr(pos, comma - pos);
    pos = comma + 1;
    while (!item.empty() && item.front() == ' ') {
      item.remove_prefix(1);
    }
    if (item.substr(0, 2) == "t=") {
      t = item.substr(2);
    } else if (item.substr(0, 3) == "v1=" && v1.size() < 8) {
      quota::digest d{};
      if (item.size() == 3 + 64 && quota::fs::from_hex(item.substr(3), d.data(), d.size())) {
        v1.push_back(d);
      }
    }
  }
  int64_t ts = 0;
  {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), ts);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v1.empty()) {
      return refuse(400, "bad_signature_header",
                    "Stripe-Signature must carry t=TIMESTAMP and at least one v1 signature.");
    }
  }
  const quota::digest want = hmac_sha256(stripe_secret_, fmt::format("{}.{}", t, req.body));
  bool match = false;
  for (const auto& d : v1) {
    match |= CRYPTO_memcmp(d.data(), want.data(), d.size()) == 0;  // every one compared
  }
  if (!match) {
    return refuse(400, "bad_signature",
                  "No v1 signature matches this endpoint's signing secret (check [stripe] "
                  "webhook_secret_env holds this endpoint's whsec_ secret).");
  }
  if (ts < now - tolerance_secs_ || ts > now + tolerance_secs_) {
    return refuse(400, "timestamp_outside_tolerance",
                  fmt::format("The signature's timestamp is more than {} s from the server's "
                              "clock: a replay, or a clock to fix.",
                              tolerance_secs_));
  }
  // 2. The event.
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view id, type, customer, status;
  if (parser.parse(req.body.data(), req.body.size(), true).get(doc) != simdjson::SUCCESS ||
      doc["id"].get_string().get(id) != simdjson::SUCCESS ||
      doc["type"].get_string().get(type) != simdjson::SUCCESS || id.empty() || id.size() > 255 ||
      id.find_first_of(" \t\r\n") != std::string_view::npos) {
    return refuse(400, "malformed_event",
                  "The body is not a Stripe event (a JSON object with string \"id\" and "
                  "\"type\").");
  }
  simdjson::dom::element obj;
  const bool has_obj = doc["data"]["object"].get(obj) == simdjson::SUCCESS && obj.is_object();
  if (has_obj) {
    simdjson::dom::element c;
    if (obj["customer"].get(c) == simdjson::SUCCESS) {
      if (!c.is_string() || c.get_string().get(customer) != simdjson::SUCCESS) {
        if (c["id"].get_string().get(customer) != simdjson::SUCCESS) {  // an expanded customer
          customer = {};
        }
      }
    }
    if (obj["status"].get_string().get(status) != simdjson::SUCCESS) {
      status = {};
    }
  }
  // 3. What it means: suspend, resume, or nothing.
  enum class act { none, suspend, resume } what = act::none;
  if (type == "customer.subscription.deleted" || type == "invoice.payment_failed") {
    what = act::suspend;
  } else if (type == "invoice.paid" || type == "invoice.payment_succeeded") {
    what = act::resume;
  } else if (type == "customer.subscription.updated" || type == "customer.subscription.created" ||
             type == "customer.subscription.resumed" || type == "customer.subscription.paused") {
    if (std::find(suspend_on_.begin(), suspend_on_.end(), status) != suspend_on_.end()) {
      what = act::suspend;
    } else if (status == "active" || status == "trialing") {
      what = act::resume;
    }
  }
  // A public core never waits for the admin core's change (which waits for every core to
  // switch tables, this one included): it answers 503 and Stripe delivers again.
  std::unique_lock g(mu_, std::defer_lock);
  if (admin_core) {
    g.lock();
  } else if (!g.try_lock()) {
    return {503, error_body("busy", "Another change is being made; deliver the event again."),
            "Retry-After: 1\r\n"};
  }
  if (events_.size() > 100000) {  // ids older than a day are forgotten
    std::erase_if(events_, [&](const auto& e) { return now - e.second >= kRememberSecs; });
  }
  if (auto it = events_.find(std::string(id));
      it != events_.end() && now - it->second < kRememberSecs) {
    events_duplicate_.fetch_add(1, std::memory_order_relaxed);
    return {409, error_body("duplicate_event",
                            fmt::format("Event {} was received already; nothing changed.", id))};
  }
  std::string account;
  if (what != act::none) {
    if (!has_obj || customer.empty()) {
      return refuse(
          400, "malformed_event",
          fmt::format("A {} event must name its customer in data.object.customer.", type));
    }
    auto c = contents();
    if (!c) {
      return {500, error_body("store_failed", c.error().message)};
    }
    for (const auto& a : c->accounts) {
      if (a.customer == customer) {
        account = a.name;
      }
    }
    if (account.empty()) {
      return refuse(422, "unknown_customer",
                    fmt::format("No account has stripe_customer \"{}\"; link it with POST "
                                "/admin/accounts {{\"id\":…,\"stripe_customer\":…}}.",
                                customer));
    }
    answer a = apply_account_status(account, what == act::suspend, now, "stripe",
                                    fmt::format("webhook {} {}", type, id), admin_core);
    if (a.status != 200) {
      return a;
    }
  }
  if (auto r = quota::fs::append_durable(data_dir_ + "/stripe-events.txt",
                                         fmt::format("event {} {}\n", now, id));
      !r) {
    log_error("stripe webhook: event id not recorded ({}); a redelivery is applied again",
              r.error());
  }
  events_[std::string(id)] = now;
  if (what == act::none) {
    events_ignored_.fetch_add(1, std::memory_order_relaxed);
    return {200, fmt::format(R"({{"received":true,"event":{},"action":"none"}})", js(id))};
  }
  events_applied_.fetch_add(1, std::memory_order_relaxed);
  return {200, fmt::format(R"({{"received":true,"event":{},"action":"{}","account":{}}})", js(id),
                           what == act::suspend ? "suspended" : "resumed", js(account))};
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
