// Keys and accounts in Redis (see cluster.h for the layout). Every change is one script that
// also bumps the version, so a node that sees the version move reloads a consistent set.
#include "tollgate/cluster/keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "tollgate/cluster/redis.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"

namespace tollgate::cluster {

std::string keys_key(const settings& s) { return s.prefix + "{keys}:keys"; }
std::string accounts_key(const settings& s) { return s.prefix + "{keys}:accounts"; }
std::string version_key(const settings& s) { return s.prefix + "{keys}:version"; }
std::string nodes_key(const settings& s) { return s.prefix + "{nodes}"; }
std::string usage_key(const settings& s, uint64_t key_id, uint32_t month) {
  return fmt::format("{}{{{}}}:{:04}-{:02}", s.prefix, quota::key_id_string(key_id),
                     quota::month_year(month), quota::month_of_year(month));
}

namespace {

using quota::store_error;

const redis_script kCreate(R"(
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSETNX', KEYS[2], ARGV[3], 'active')
redis.call('INCR', KEYS[3])
return 1)");

const redis_script kRevoke(R"(
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local base = string.match(v, '^(.* )%a+$')
redis.call('HSET', KEYS[1], ARGV[1], base .. 'revoked')
redis.call('INCR', KEYS[3])
return 1)");

const redis_script kAccount(R"(
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[3])
return 1)");

const redis_script kLoad(R"(
return {redis.call('GET', KEYS[3]) or '-1', redis.call('HGETALL', KEYS[1]),
        redis.call('HGETALL', KEYS[2])})");

// Adds what is missing; ARGV: n_keys, then id,value pairs, then account,status pairs.
const redis_script kImport(R"(
local n = tonumber(ARGV[1])
local added = 0
for i = 0, n - 1 do
  added = added + redis.call('HSETNX', KEYS[1], ARGV[2 + 2 * i], ARGV[3 + 2 * i])
end
for i = 2 + 2 * n, #ARGV, 2 do
  redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1])
end
if added > 0 then redis.call('INCR', KEYS[3]) end
return added)");

store_error io(const redis_error& e) { return store_error{false, e.message}; }

std::string key_value(const quota::key_entry& e) {
  return fmt::format("{} {} {} {} {}", quota::fs::to_hex(e.hash.data(), e.hash.size()), e.account,
                     e.plan, e.created_unix, e.revoked ? "revoked" : "active");
}

bool parse_hex(std::string_view hex, quota::digest& d) {
  if (hex.size() != 64) {
    return false;
  }
  for (size_t i = 0; i < 32; ++i) {
    auto r = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, d[i], 16);
    if (r.ec != std::errc() || r.ptr != hex.data() + 2 * i + 2) {
      return false;
    }
  }
  return true;
}

result<quota::key_entry, store_error> parse_key(const std::string& id, const std::string& v) {
  auto bad = [&] {
    return unexpected(
        store_error{false, fmt::format("redis: malformed key record {}: '{}'", id, v)});
  };
  quota::key_entry e;
  auto pid = quota::parse_key_id(id);
  if (!pid) {
    return bad();
  }
  e.id = *pid;
  std::vector<std::string_view> w;
  std::string_view rest = v;
  while (!rest.empty()) {
    size_t sp = rest.find(' ');
    w.push_back(rest.substr(0, sp));
    rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
  }
  if (w.size() != 5 || !parse_hex(w[0], e.hash) || (w[4] != "active" && w[4] != "revoked")) {
    return bad();
  }
  e.account = std::string(w[1]);
  e.plan = std::string(w[2]);
  auto c = std::from_chars(w[3].data(), w[3].data() + w[3].size(), e.created_unix);
  if (c.ec != std::errc()) {
    return bad();
  }
  e.revoked = w[4] == "revoked";
  return e;
}

}  // namespace

redis_keys::redis_keys(settings s) : s_(std::move(s)) {
  auto a = parse_redis_address(s_.redis);
  conn_ = std::make_unique<redis_conn>(a ? *a : redis_address{}, s_.password, s_.timeout_ms);
}

redis_keys::~redis_keys() = default;

result<void, store_error> redis_keys::ready() {
  if (conn_->connected()) {
    return {};
  }
  if (auto c = conn_->connect(); !c) {
    return unexpected(io(c.error()));
  }
  return {};
}

result<quota::created_key, store_error> redis_keys::create_key(std::string_view account,
                                                               std::string_view plan,
                                                               const quota::plan_map& plans,
                                                               int64_t now_unix) {
  if (!quota::valid_name(account)) {
    return unexpected(store_error{
        true, fmt::format("invalid account name \"{}\": use 1-64 letters, digits, '.', '_' or '-'",
                          account)});
  }
  if (!quota::valid_name(plan)) {
    return unexpected(store_error{
        true,
        fmt::format("invalid plan name \"{}\": use 1-64 letters, digits, '.', '_' or '-'", plan)});
  }
  if (plans.find(plan) == plans.end()) {
    std::string known;
    for (const auto& [n, p] : plans) {
      known += known.empty() ? n : ", " + n;
    }
    return unexpected(store_error{true, fmt::format("unknown plan \"{}\" (configured plans: {})",
                                                    plan, known.empty() ? "none" : known)});
  }
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    quota::key_entry e;
    uint8_t secret[20];
    if (!quota::fs::random_bytes(&e.id, sizeof e.id) ||
        !quota::fs::random_bytes(secret, sizeof secret)) {
      return unexpected(store_error{false, "getrandom failed"});
    }
    if (e.id == 0) {
      continue;
    }
    quota::created_key out;
    out.secret = "tg_live_" + quota::fs::to_hex(secret, sizeof secret);
    out.key_id = quota::key_id_string(e.id);
    e.hash = quota::sha256(out.secret);
    e.account = std::string(account);
    e.plan = std::string(plan);
    e.created_unix = now_unix;
    auto r = conn_->eval(kCreate, {keys_key(s_), accounts_key(s_), version_key(s_)},
                         {out.key_id, key_value(e), e.account});
    if (!r) {
      return unexpected(io(r.error()));
    }
    if (r->integer == 1) {
      return out;
    }
  }
  return unexpected(store_error{false, "could not pick an unused key id"});
}

result<quota::store_contents, store_error> redis_keys::load_versioned(int64_t& version) {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  auto r = conn_->eval(kLoad, {keys_key(s_), accounts_key(s_), version_key(s_)}, {});
  if (!r) {
    return unexpected(io(r.error()));
  }
  if (r->elements.size() != 3) {
    return unexpected(store_error{false, "redis: unexpected reply to the key load"});
  }
  version = std::strtoll(r->elements[0].str.c_str(), nullptr, 10);
  quota::store_contents c;
  const auto& ks = r->elements[1].elements;
  for (size_t i = 0; i + 1 < ks.size(); i += 2) {
    auto e = parse_key(ks[i].str, ks[i + 1].str);
    if (!e) {
      return unexpected(e.error());
    }
    c.keys.push_back(std::move(*e));
  }
  std::sort(c.keys.begin(), c.keys.end(), [](const quota::key_entry& a, const quota::key_entry& b) {
    return a.created_unix != b.created_unix ? a.created_unix < b.created_unix : a.id < b.id;
  });
  const auto& as = r->elements[2].elements;
  for (size_t i = 0; i + 1 < as.size(); i += 2) {
    c.accounts.push_back({as[i].str, as[i + 1].str == "suspended"});
  }
  std::sort(
      c.accounts.begin(), c.accounts.end(),
      [](const quota::account_entry& a, const quota::account_entry& b) { return a.name < b.name; });
  return c;
}

result<quota::store_contents, store_error> redis_keys::load() {
  int64_t v = 0;
  return load_versioned(v);
}

result<int64_t, store_error> redis_keys::version() {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  auto r = conn_->command({"GET", version_key(s_)});
  if (!r) {
    return unexpected(io(r.error()));
  }
  return r->t == redis_reply::type::nil ? int64_t{-1} : std::strtoll(r->str.c_str(), nullptr, 10);
}

result<std::vector<quota::key_entry>, store_error> redis_keys::list_keys() {
  auto c = load();
  if (!c) {
    return unexpected(c.error());
  }
  return std::move(c->keys);
}

result<void, store_error> redis_keys::revoke(std::string_view key_id) {
  auto id = quota::parse_key_id(key_id);
  if (!id) {
    return unexpected(store_error{true, id.error()});
  }
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  auto r = conn_->eval(kRevoke, {keys_key(s_), accounts_key(s_), version_key(s_)},
                       {std::string(key_id)});
  if (!r) {
    return unexpected(io(r.error()));
  }
  if (r->integer != 1) {
    return unexpected(store_error{true, fmt::format("no key {} in redis {}", key_id, s_.redis)});
  }
  return {};
}

result<void, store_error> redis_keys::set_account(std::string_view account, bool suspended) {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  auto r = conn_->eval(kAccount, {keys_key(s_), accounts_key(s_), version_key(s_)},
                       {std::string(account), suspended ? "suspended" : "active"});
  if (!r) {
    return unexpected(io(r.error()));
  }
  if (r->integer != 1) {
    return unexpected(
        store_error{true, fmt::format("no account \"{}\" in redis {}", account, s_.redis)});
  }
  return {};
}

result<void, store_error> redis_keys::suspend(std::string_view account) {
  return set_account(account, true);
}
result<void, store_error> redis_keys::resume(std::string_view account) {
  return set_account(account, false);
}

result<int, store_error> redis_keys::import(const quota::store_contents& c) {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  std::vector<std::string> args{std::to_string(c.keys.size())};
  for (const auto& k : c.keys) {
    args.push_back(quota::key_id_string(k.id));
    args.push_back(key_value(k));
  }
  for (const auto& a : c.accounts) {
    args.push_back(a.name);
    args.push_back(a.suspended ? "suspended" : "active");
  }
  auto r = conn_->eval(kImport, {keys_key(s_), accounts_key(s_), version_key(s_)}, args);
  if (!r) {
    return unexpected(io(r.error()));
  }
  return static_cast<int>(r->integer);
}

}  // namespace tollgate::cluster
