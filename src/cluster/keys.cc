// Keys and accounts in Redis (see cluster.h for the layout). Every change is one script that
// also bumps the version, so a node that sees the version move reloads a consistent set.
#include "tollgate/cluster/keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>

#include "tollgate/cluster/redis.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"

namespace tollgate::cluster {

std::string keys_key(const settings& s) { return s.prefix + "{keys}:keys"; }
std::string accounts_key(const settings& s) { return s.prefix + "{keys}:accounts"; }
std::string version_key(const settings& s) { return s.prefix + "{keys}:version"; }
std::string nodes_key(const settings& s) { return s.prefix + "{nodes}"; }
std::string epoch_key(const settings& s) { return s.prefix + "{keys}:epoch"; }
std::string resync_key(const settings& s) { return s.prefix + "{keys}:resync"; }

std::string new_epoch() {
  uint8_t b[8] = {};
  if (!quota::fs::random_bytes(b, sizeof b)) {
    // getrandom cannot fail once booted; a clock-based id still differs from the last epoch.
    const auto t = std::chrono::system_clock::now().time_since_epoch().count();
    std::memcpy(b, &t, sizeof b);
  }
  return quota::fs::to_hex(b, sizeof b);
}
std::string usage_key(const settings& s, uint64_t key_id, uint32_t month) {
  return fmt::format("{}{{{}}}:{:04}-{:02}", s.prefix, quota::key_id_string(key_id),
                     quota::month_year(month), quota::month_of_year(month));
}

namespace {

using quota::store_error;

// Every write that can start a key set also starts the epoch when Redis has none (see
// cluster.h: an empty Redis lacks it, so a node tells a Redis that lost its data).
const redis_script kCreate(R"(
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSETNX', KEYS[2], ARGV[3], 'active')
redis.call('SETNX', KEYS[4], ARGV[4])
redis.call('INCR', KEYS[3])
return 1)");

const redis_script kRevoke(R"(
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local base = string.match(v, '^(.* )%a+$')
redis.call('HSET', KEYS[1], ARGV[1], base .. 'revoked')
redis.call('INCR', KEYS[3])
return 1)");

// An account's value is its status, then its customer id when it has one ("active cus_123");
// a status change keeps the customer id.
const redis_script kAccount(R"(
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return 0 end
local tail = string.match(cur, '^%a+( .+)$') or ''
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. tail)
redis.call('INCR', KEYS[3])
return 1)");

// A new account (admin API). ARGV: name, value, customer id ('' for none), the epoch to start.
// 0: the name exists; a string: the account that holds the customer id already; 1: made.
const redis_script kNewAccount(R"(
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
if ARGV[3] ~= '' then
  local all = redis.call('HGETALL', KEYS[2])
  for i = 2, #all, 2 do
    if string.match(all[i], '^%a+ (.+)$') == ARGV[3] then return all[i - 1] end
  end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('SETNX', KEYS[4], ARGV[4])
redis.call('INCR', KEYS[3])
return 1)");

// A key's value is "hash account plan created [expires] status": the words of one record.
// kPlan moves a key to plan ARGV[2]. 0: no such key; -1: revoked; 1: moved.
const redis_script kPlan(R"(
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local w = {}
for x in string.gmatch(v, '%S+') do w[#w + 1] = x end
if w[#w] == 'revoked' then return -1 end
w[3] = ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], table.concat(w, ' '))
redis.call('INCR', KEYS[3])
return 1)");

// A rotation: key ARGV[2] (hash ARGV[3]) for the account and plan of key ARGV[1], made at
// ARGV[4]; the old key expires at ARGV[5], or keeps an earlier expiry (a key rotated twice keeps
// the shorter grace). 0: no such key; -1: revoked or expired; -2: the new id is taken; 1: made.
const redis_script kRotate(R"(
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local w = {}
for x in string.gmatch(v, '%S+') do w[#w + 1] = x end
if w[#w] == 'revoked' then return -1 end
if #w == 6 then
  if tonumber(w[5]) <= tonumber(ARGV[4]) then return -1 end
  if tonumber(w[5]) > tonumber(ARGV[5]) then w[5] = ARGV[5] end
else
  table.insert(w, 5, ARGV[5])
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then return -2 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3] .. ' ' .. w[2] .. ' ' .. w[3] .. ' ' .. ARGV[4] .. ' active')
redis.call('HSET', KEYS[1], ARGV[1], table.concat(w, ' '))
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
for i = 2 + 2 * n, #ARGV - 2, 2 do
  redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('SETNX', KEYS[4], ARGV[#ARGV])
if added > 0 then redis.call('INCR', KEYS[3]) end
return added)");

// A node's copy put back into a Redis that lost (some of) its data. ARGV: n_keys, id,value
// pairs, account,status pairs, then the epoch to start if none. A key missing is added; a key
// revoked in the copy is revoked in Redis too (a revocation is never undone by a restore); an
// account missing is added, one present keeps Redis's status (changed since, by an operator).
// Bumps the version (nodes reload) and the resync counter (every node pushes its usage again).
const redis_script kRestore(R"(
local n = tonumber(ARGV[1])
local added = 0
for i = 0, n - 1 do
  local id, v = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local cur = redis.call('HGET', KEYS[1], id)
  if not cur then
    redis.call('HSET', KEYS[1], id, v)
    added = added + 1
  elseif string.sub(v, -8) == ' revoked' and string.sub(cur, -7) == ' active' then
    redis.call('HSET', KEYS[1], id, string.sub(cur, 1, -7) .. 'revoked')
  end
end
for i = 2 + 2 * n, #ARGV - 2, 2 do
  redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('SETNX', KEYS[4], ARGV[#ARGV])
redis.call('INCR', KEYS[3])
redis.call('INCR', KEYS[5])
return {added, redis.call('GET', KEYS[4])})");

store_error io(const redis_error& e) { return store_error{false, e.message}; }

std::string key_value(const quota::key_entry& e) {
  std::string v = fmt::format("{} {} {} {} ", quota::fs::to_hex(e.hash.data(), e.hash.size()),
                              e.account, e.plan, e.created_unix);
  if (e.expires_unix > 0) {  // a rotated key: valid until then
    v += fmt::format("{} ", e.expires_unix);
  }
  v += e.revoked ? "revoked" : "active";
  return v;
}

std::string account_value(const quota::account_entry& a) {
  std::string v = a.suspended ? "suspended" : "active";
  if (!a.customer.empty()) {
    v += ' ';
    v += a.customer;
  }
  return v;
}

// An account's value (account_value's format): its status, then its customer id if any.
result<quota::account_entry, store_error> parse_account(std::string_view name, std::string_view v) {
  const size_t sp = v.find(' ');
  const std::string_view status = v.substr(0, sp);
  const std::string_view customer = sp == std::string_view::npos ? "" : v.substr(sp + 1);
  if ((status != "active" && status != "suspended") ||
      (sp != std::string_view::npos && !quota::valid_name(customer))) {
    return unexpected(
        store_error{false, fmt::format("redis: malformed account record {}: '{}'", name, v)});
  }
  return quota::account_entry{std::string(name), status == "suspended", std::string(customer)};
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
  if ((w.size() != 5 && w.size() != 6) || !parse_hex(w[0], e.hash) ||
      (w.back() != "active" && w.back() != "revoked")) {
    return bad();
  }
  e.account = std::string(w[1]);
  e.plan = std::string(w[2]);
  auto c = std::from_chars(w[3].data(), w[3].data() + w[3].size(), e.created_unix);
  if (c.ec != std::errc() || c.ptr != w[3].data() + w[3].size()) {
    return bad();
  }
  if (w.size() == 6) {
    auto x = std::from_chars(w[4].data(), w[4].data() + w[4].size(), e.expires_unix);
    if (x.ec != std::errc() || x.ptr != w[4].data() + w[4].size() || e.expires_unix <= 0) {
      return bad();
    }
  }
  e.revoked = w.back() == "revoked";
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
  if (auto c = quota::check_new_key(account, plan, plans); !c) {
    return unexpected(c.error());
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
    auto r = conn_->eval(kCreate, {keys_key(s_), accounts_key(s_), version_key(s_), epoch_key(s_)},
                         {out.key_id, key_value(e), e.account, new_epoch()});
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
    auto a = parse_account(as[i].str, as[i + 1].str);
    if (!a) {
      return unexpected(a.error());
    }
    c.accounts.push_back(std::move(*a));
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

result<std::map<uint64_t, quota::usage_totals>, store_error> redis_keys::month_usage(
    std::span<const uint64_t> ids, uint32_t month) {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  std::map<uint64_t, quota::usage_totals> out;
  for (const uint64_t id : ids) {
    auto r = conn_->command({"HGETALL", usage_key(s_, id, month)});
    if (!r) {
      return unexpected(io(r.error()));
    }
    if (r->elements.empty()) {
      continue;
    }
    quota::usage_totals t;
    for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
      const std::string& field = r->elements[i].str;
      const int64_t v = std::strtoll(r->elements[i + 1].str.c_str(), nullptr, 10);
      if (field.rfind("u:", 0) == 0) {
        t.add(v, 0, 0, 0);
      } else if (field.rfind("o:", 0) == 0) {
        t.add(0, v, 0, 0);
      } else if (field.rfind("f:", 0) == 0) {
        t.add(0, 0, v, 0);  // each node's first call: the earliest is the cluster's
      } else if (field.rfind("l:", 0) == 0) {
        t.add(0, 0, 0, v);
      }
    }
    out.emplace(id, t);
  }
  return out;
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

result<void, store_error> redis_keys::create_account(std::string_view account,
                                                     std::string_view customer) {
  if (auto c = quota::check_new_account(account, customer); !c) {
    return unexpected(c.error());
  }
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  const quota::account_entry a{std::string(account), false, std::string(customer)};
  auto r =
      conn_->eval(kNewAccount, {keys_key(s_), accounts_key(s_), version_key(s_), epoch_key(s_)},
                  {a.name, account_value(a), a.customer, new_epoch()});
  if (!r) {
    return unexpected(io(r.error()));
  }
  if (r->t == redis_reply::type::string) {
    store_error e{
        true, fmt::format("customer \"{}\" belongs to account \"{}\" already", customer, r->str)};
    e.exists = true;
    return unexpected(std::move(e));
  }
  if (r->integer != 1) {
    store_error e{true, fmt::format("account \"{}\" exists already", account)};
    e.exists = true;
    return unexpected(std::move(e));
  }
  return {};
}

namespace {
store_error no_key(std::string_view key_id, const settings& s) {
  store_error e{true, fmt::format("no key {} in redis {}", key_id, s.redis)};
  e.not_found = true;
  return e;
}
}  // namespace

result<void, store_error> redis_keys::set_plan(std::string_view key_id, std::string_view plan,
                                               const quota::plan_map& plans) {
  auto id = quota::parse_key_id(key_id);
  if (!id) {
    return unexpected(store_error{true, id.error()});
  }
  if (!quota::valid_name(plan) || plans.find(plan) == plans.end()) {
    return unexpected(store_error{true, fmt::format("unknown plan \"{}\"", plan)});
  }
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  auto r = conn_->eval(kPlan, {keys_key(s_), accounts_key(s_), version_key(s_)},
                       {std::string(key_id), std::string(plan)});
  if (!r) {
    return unexpected(io(r.error()));
  }
  if (r->integer == 0) {
    return unexpected(no_key(key_id, s_));
  }
  if (r->integer != 1) {
    return unexpected(store_error{true, fmt::format("key {} is revoked", key_id)});
  }
  return {};
}

result<quota::created_key, store_error> redis_keys::rotate(std::string_view key_id,
                                                           int64_t now_unix, int64_t expires_unix) {
  auto id = quota::parse_key_id(key_id);
  if (!id) {
    return unexpected(store_error{true, id.error()});
  }
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t new_id = 0;
    uint8_t secret[20];
    if (!quota::fs::random_bytes(&new_id, sizeof new_id) ||
        !quota::fs::random_bytes(secret, sizeof secret)) {
      return unexpected(store_error{false, "getrandom failed"});
    }
    if (new_id == 0) {
      continue;
    }
    quota::created_key out;
    out.secret = "tg_live_" + quota::fs::to_hex(secret, sizeof secret);
    out.key_id = quota::key_id_string(new_id);
    const quota::digest h = quota::sha256(out.secret);
    auto r = conn_->eval(kRotate, {keys_key(s_), accounts_key(s_), version_key(s_)},
                         {std::string(key_id), out.key_id, quota::fs::to_hex(h.data(), h.size()),
                          std::to_string(now_unix), std::to_string(expires_unix)});
    if (!r) {
      return unexpected(io(r.error()));
    }
    if (r->integer == 1) {
      return out;
    }
    if (r->integer == 0) {
      return unexpected(no_key(key_id, s_));
    }
    if (r->integer == -1) {
      return unexpected(
          store_error{true, fmt::format("key {} is revoked or expired: create a new key", key_id)});
    }
  }
  return unexpected(store_error{false, "could not pick an unused key id"});
}

namespace {
// kImport's and kRestore's ARGV: the key count, id/value pairs, account/status pairs, then the
// epoch to start when Redis has none.
std::vector<std::string> set_args(const quota::store_contents& c) {
  std::vector<std::string> args{std::to_string(c.keys.size())};
  for (const auto& k : c.keys) {
    args.push_back(quota::key_id_string(k.id));
    args.push_back(key_value(k));
  }
  for (const auto& a : c.accounts) {
    args.push_back(a.name);
    args.push_back(account_value(a));
  }
  args.push_back(new_epoch());
  return args;
}
}  // namespace

result<int, store_error> redis_keys::import(const quota::store_contents& c) {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  const std::vector<std::string> args = set_args(c);
  auto r =
      conn_->eval(kImport, {keys_key(s_), accounts_key(s_), version_key(s_), epoch_key(s_)}, args);
  if (!r) {
    return unexpected(io(r.error()));
  }
  return static_cast<int>(r->integer);
}

result<restored, store_error> redis_keys::restore(const quota::store_contents& c) {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  const std::vector<std::string> args = set_args(c);
  auto r = conn_->eval(
      kRestore, {keys_key(s_), accounts_key(s_), version_key(s_), epoch_key(s_), resync_key(s_)},
      args);
  if (!r) {
    return unexpected(io(r.error()));
  }
  if (r->elements.size() != 2) {
    return unexpected(store_error{false, "redis: unexpected reply to the key restore"});
  }
  return restored{static_cast<int>(r->elements[0].integer), r->elements[1].str};
}

result<marks, store_error> redis_keys::read_marks() {
  if (auto r = ready(); !r) {
    return unexpected(r.error());
  }
  auto r = conn_->command({"MGET", version_key(s_), epoch_key(s_), resync_key(s_)});
  if (!r) {
    return unexpected(io(r.error()));
  }
  if (r->elements.size() != 3) {
    return unexpected(store_error{false, "redis: unexpected reply to MGET"});
  }
  marks m;
  const auto& e = r->elements;
  m.version = e[0].t == redis_reply::type::nil ? -1 : std::strtoll(e[0].str.c_str(), nullptr, 10);
  m.epoch = e[1].t == redis_reply::type::nil ? std::string() : e[1].str;
  m.resync = e[2].t == redis_reply::type::nil ? 0 : std::strtoll(e[2].str.c_str(), nullptr, 10);
  return m;
}

std::string copy_text(const settings& s, std::string_view epoch, const quota::store_contents& c) {
  std::string out = fmt::format(
      "# tollgate: this node's copy of the keys and accounts in redis (hashed keys only).\n"
      "# A node puts it back into a redis that lost its data (cluster.h); never edit it.\n"
      "prefix {}\nepoch {}\n",
      s.prefix, epoch);
  for (const auto& k : c.keys) {
    out += fmt::format("key {} {}\n", quota::key_id_string(k.id), key_value(k));
  }
  for (const auto& a : c.accounts) {
    out += fmt::format("account {} {}\n", a.name, account_value(a));
  }
  return out;
}

result<node_copy, std::string> parse_copy(const settings& s, std::string_view text) {
  node_copy out;
  bool prefix_ok = false;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') {
      continue;
    }
    const size_t sp = line.find(' ');
    const std::string_view word = line.substr(0, sp);
    const std::string_view rest = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    if (word == "prefix") {
      prefix_ok = rest == s.prefix;
    } else if (word == "epoch") {
      out.epoch = std::string(rest);
    } else if (word == "key") {
      const size_t sp2 = rest.find(' ');
      auto e = parse_key(std::string(rest.substr(0, sp2)),
                         sp2 == std::string_view::npos ? "" : std::string(rest.substr(sp2 + 1)));
      if (!e) {
        return unexpected(fmt::format("line {}: {}", line_no, e.error().message));
      }
      out.contents.keys.push_back(std::move(*e));
    } else if (word == "account") {
      const size_t sp2 = rest.find(' ');
      auto a = sp2 == std::string_view::npos
                   ? parse_account(rest, "")
                   : parse_account(rest.substr(0, sp2), rest.substr(sp2 + 1));
      if (!a) {
        return unexpected(fmt::format("line {}: malformed account line", line_no));
      }
      out.contents.accounts.push_back(std::move(*a));
    } else {
      return unexpected(fmt::format("line {}: unknown line '{}'", line_no, word));
    }
  }
  if (!prefix_ok) {
    return node_copy{};  // another cluster's (or prefix's) copy: nothing of ours
  }
  return out;
}

}  // namespace tollgate::cluster
