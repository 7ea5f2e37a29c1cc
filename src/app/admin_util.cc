#include "admin_util.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <simdjson.h>

#include <algorithm>
#include <ctime>

#include "tollgate/quota/fs.h"

namespace tollgate::app::admin {

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

}  // namespace tollgate::app::admin
