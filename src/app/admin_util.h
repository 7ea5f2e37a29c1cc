// The admin API's small helpers, shared by its routes, the webhook and the store: JSON
// strings and errors, times, digests, the idempotency seal, query strings and bodies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "tollgate/common/result.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::app::admin {

/// `s` as a JSON string, quotes included.
std::string js(std::string_view s);
/// `unix` as RFC 3339 UTC (2026-12-05T19:00:00Z).
std::string utc(int64_t unix);
std::string hex(const uint8_t* p, size_t n);
std::string sha256_hex(std::string_view s);
quota::digest hmac_sha256(std::string_view key, std::string_view data);
/// XORs `data` with a keystream of HMAC-SHA256(idempotency key, "tollgate-idem-N") blocks: the
/// stored answer is readable only by whoever presents the same Idempotency-Key again.
std::string seal(std::string_view idem, std::string_view data);
/// {"code","message"}.
std::string error_body(std::string_view code, std::string_view message);
/// The value of `name` in a query string (percent-decoded, '+' as space); nullopt when absent.
std::optional<std::string> query_param(std::string_view q, std::string_view name);

/// A JSON object body's string and integer members, checked against the names allowed.
struct body_fields {
  std::map<std::string, std::string, std::less<>> strings;
  std::map<std::string, int64_t, std::less<>> integers;
};
/// Anything else (not JSON, not an object, a member of another type or name, a member twice) is
/// an error message.
result<body_fields, std::string> parse_body(std::string_view body,
                                            std::initializer_list<std::string_view> strings,
                                            std::initializer_list<std::string_view> integers,
                                            bool empty_ok);

std::string key_json(const quota::key_entry& k, bool suspended, int64_t now);
std::string account_json(const quota::account_entry& a, const quota::store_contents& c,
                         int64_t now);
bool valid_idempotency_key(std::string_view k);
/// A store error as the admin API's answer: status and body.
std::pair<int, std::string> store_answer(const quota::store_error& e);

}  // namespace tollgate::app::admin
