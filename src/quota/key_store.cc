// Key store: keys.txt and accounts.txt in the data dir, rewritten whole and renamed atomically.
#include "tollgate/quota/key_store.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <charconv>

#include "tollgate/quota/fs.h"

namespace tollgate::quota {

namespace {

constexpr std::string_view kSecretPrefix = "tg_live_";
constexpr size_t kSecretBytes = 20;  // 160 bits

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> w;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) {
      ++i;
    }
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') {
      ++j;
    }
    if (j > i) {
      w.push_back(line.substr(i, j - i));
    }
    i = j;
  }
  return w;
}

template <class F>
result<void, store_error> for_each_line(const std::string& path, const std::string& data, F f) {
  size_t pos = 0;
  int lineno = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) {
      nl = data.size();
    }
    std::string_view line(data.data() + pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    auto words = split_words(line);
    if (words.empty() || words[0].front() == '#') {
      continue;
    }
    if (!f(words)) {
      return unexpected(store_error{false, fmt::format("{}:{}: malformed line", path, lineno)});
    }
  }
  return {};
}

bool parse_i64(std::string_view s, int64_t& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string_view key_id_text(uint64_t id, std::span<char, key_id_length> buf) {
  static constexpr char hex[] = "0123456789abcdef";
  buf[0] = 'k';
  buf[1] = 'e';
  buf[2] = 'y';
  buf[3] = '_';
  for (size_t i = 0; i < 16; ++i) {
    buf[4 + i] = hex[(id >> (60 - 4 * i)) & 15];
  }
  return {buf.data(), buf.size()};
}

std::string key_id_string(uint64_t id) {
  std::array<char, key_id_length> buf;
  return std::string(key_id_text(id, buf));
}

result<uint64_t, std::string> parse_key_id(std::string_view s) {
  uint64_t v = 0;
  if (s.size() == 20 && s.substr(0, 4) == "key_") {
    auto [p, ec] = std::from_chars(s.data() + 4, s.data() + s.size(), v, 16);
    if (ec == std::errc() && p == s.data() + s.size()) {
      return v;
    }
  }
  return unexpected(fmt::format("\"{}\" is not a key id (expected key_ and 16 hex digits)", s));
}

digest sha256(std::string_view data) {
  digest d{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

key_store::key_store(std::string data_dir) : dir_(std::move(data_dir)) {}

result<store_contents, store_error> key_store::load() {
  store_contents c;
  bool missing = false;
  const std::string kp = keys_path();
  auto kd = fs::read_file(kp, &missing);
  if (!kd) {
    return unexpected(store_error{false, kd.error()});
  }
  auto r = for_each_line(kp, *kd, [&](const std::vector<std::string_view>& w) {
    if ((w.size() != 7 && w.size() != 8) || w[0] != "key") {
      return false;
    }
    key_entry e;
    if (w.size() == 8 && (w[7].substr(0, 8) != "expires=" ||
                          !parse_i64(w[7].substr(8), e.expires_unix) || e.expires_unix <= 0)) {
      return false;
    }
    auto id = parse_key_id(w[1]);
    if (!id || !fs::from_hex(w[2], e.hash.data(), e.hash.size()) || !valid_name(w[3]) ||
        !valid_name(w[4]) || !parse_i64(w[5], e.created_unix) ||
        (w[6] != "active" && w[6] != "revoked")) {
      return false;
    }
    e.id = *id;
    e.account = std::string(w[3]);
    e.plan = std::string(w[4]);
    e.revoked = w[6] == "revoked";
    c.keys.push_back(std::move(e));
    return true;
  });
  if (!r) {
    return unexpected(r.error());
  }
  const std::string ap = accounts_path();
  auto ad = fs::read_file(ap, &missing);
  if (!ad) {
    return unexpected(store_error{false, ad.error()});
  }
  r = for_each_line(ap, *ad, [&](const std::vector<std::string_view>& w) {
    if ((w.size() != 3 && w.size() != 4) || w[0] != "account" || !valid_name(w[1]) ||
        (w[2] != "active" && w[2] != "suspended")) {
      return false;
    }
    std::string customer;
    if (w.size() == 4) {
      if (w[3].substr(0, 9) != "customer=" || !valid_name(w[3].substr(9))) {
        return false;
      }
      customer = std::string(w[3].substr(9));
    }
    c.accounts.push_back({std::string(w[1]), w[2] == "suspended", std::move(customer)});
    return true;
  });
  if (!r) {
    return unexpected(r.error());
  }
  return c;
}

result<void, store_error> key_store::save(const store_contents& c) {
  // Never write what load() could not read back: a name that is not one word of [A-Za-z0-9._-]
  // would break the line (or add one), and every later load would fail.
  for (const auto& k : c.keys) {
    if (!valid_name(k.account) || !valid_name(k.plan)) {
      return unexpected(store_error{
          true, fmt::format("refusing to write key {} with account \"{}\" and plan \"{}\": names "
                            "must be 1-64 letters, digits, '.', '_' or '-'",
                            key_id_string(k.id), k.account, k.plan)});
    }
  }
  for (const auto& a : c.accounts) {
    if (!valid_name(a.name) || (!a.customer.empty() && !valid_name(a.customer))) {
      return unexpected(store_error{
          true, fmt::format("refusing to write account \"{}\": names must be 1-64 letters, "
                            "digits, '.', '_' or '-'",
                            a.name)});
    }
  }
  std::string keys = "# tollgate keys v1: key <id> <sha256> <account> <plan> <created> <status>\n";
  for (const auto& k : c.keys) {
    keys += fmt::format("key {} {} {} {} {} {}", key_id_string(k.id),
                        fs::to_hex(k.hash.data(), k.hash.size()), k.account, k.plan, k.created_unix,
                        k.revoked ? "revoked" : "active");
    keys += k.expires_unix > 0 ? fmt::format(" expires={}\n", k.expires_unix) : "\n";
  }
  std::string accounts = "# tollgate accounts v1: account <name> <status>\n";
  for (const auto& a : c.accounts) {
    accounts += fmt::format("account {} {}", a.name, a.suspended ? "suspended" : "active");
    accounts += a.customer.empty() ? "\n" : fmt::format(" customer={}\n", a.customer);
  }
  // Accounts first: a key never refers to an account the accounts file lacks.
  auto r = fs::write_file_atomic(accounts_path(), accounts);
  if (!r) {
    return unexpected(store_error{false, r.error()});
  }
  r = fs::write_file_atomic(keys_path(), keys);
  if (!r) {
    return unexpected(store_error{false, r.error()});
  }
  return {};
}

result<void, store_error> check_new_account(std::string_view account, std::string_view customer) {
  if (!valid_name(account)) {
    return unexpected(store_error{
        true, fmt::format("invalid account name \"{}\": use 1-64 letters, digits, '.', '_' or '-'",
                          account)});
  }
  if (!customer.empty() && !valid_name(customer)) {
    return unexpected(store_error{
        true, fmt::format("invalid customer id \"{}\": use 1-64 letters, digits, '.', '_' or '-'",
                          customer)});
  }
  return {};
}

result<void, store_error> check_new_key(std::string_view account, std::string_view plan,
                                        const plan_map& plans) {
  if (!valid_name(account)) {
    return unexpected(store_error{
        true, fmt::format("invalid account name \"{}\": use 1-64 letters, digits, '.', '_' or '-'",
                          account)});
  }
  // A plan name comes from the config: one that is not a word would make a line a store refuses
  // (or, with a newline, a line of its own), so it is never written.
  if (!valid_name(plan)) {
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
  return {};
}

result<created_key, store_error> key_store::create_key(std::string_view account,
                                                       std::string_view plan_name,
                                                       const plan_map& plans, int64_t now_unix) {
  if (auto c = check_new_key(account, plan_name, plans); !c) {
    return unexpected(c.error());
  }
  std::lock_guard lk(mu_);
  auto d = fs::ensure_dir(dir_);
  if (!d) {
    return unexpected(store_error{false, d.error()});
  }
  fs::file_lock fl(dir_ + "/.keys.lock");
  auto c = load();
  if (!c) {
    return unexpected(c.error());
  }
  key_entry e;
  auto out = mint(*c, e);
  if (!out) {
    return unexpected(out.error());
  }
  e.account = std::string(account);
  e.plan = std::string(plan_name);
  e.created_unix = now_unix;
  c->keys.push_back(e);
  if (std::none_of(c->accounts.begin(), c->accounts.end(),
                   [&](const account_entry& a) { return a.name == account; })) {
    c->accounts.push_back({std::string(account), false});
  }
  auto s = save(*c);
  if (!s) {
    return unexpected(s.error());
  }
  return std::move(*out);
}

result<created_key, store_error> key_store::mint(store_contents& c, key_entry& e) {
  uint8_t secret[kSecretBytes];
  do {
    if (!fs::random_bytes(&e.id, sizeof e.id)) {
      return unexpected(store_error{false, "getrandom failed"});
    }
  } while (e.id == 0 || std::any_of(c.keys.begin(), c.keys.end(),
                                    [&](const key_entry& k) { return k.id == e.id; }));
  if (!fs::random_bytes(secret, sizeof secret)) {
    return unexpected(store_error{false, "getrandom failed"});
  }
  created_key out;
  out.secret = std::string(kSecretPrefix) + fs::to_hex(secret, sizeof secret);
  out.key_id = key_id_string(e.id);
  e.hash = sha256(out.secret);
  return out;
}

result<std::vector<key_entry>, store_error> key_store::list_keys() {
  std::lock_guard lk(mu_);
  auto c = load();
  if (!c) {
    return unexpected(c.error());
  }
  return std::move(c->keys);
}

template <class F>
result<void, store_error> key_store::edit_locked(F&& edit) {
  std::lock_guard lk(mu_);
  fs::file_lock fl(dir_ + "/.keys.lock");
  auto c = load();
  if (!c) {
    return unexpected(c.error());
  }
  if (auto r = edit(*c); !r) {
    return r;
  }
  return save(*c);
}

result<void, store_error> key_store::revoke(std::string_view key_id) {
  auto id = parse_key_id(key_id);
  if (!id) {
    return unexpected(store_error{true, id.error()});
  }
  return edit_locked([&](store_contents& c) -> result<void, store_error> {
    auto it =
        std::find_if(c.keys.begin(), c.keys.end(), [&](const key_entry& k) { return k.id == *id; });
    if (it == c.keys.end()) {
      store_error e{true, fmt::format("no key {} in {}", key_id, keys_path())};
      e.not_found = true;
      return unexpected(std::move(e));
    }
    it->revoked = true;
    return {};
  });
}

result<void, store_error> key_store::suspend(std::string_view account) {
  return set_suspended(account, true);
}
result<void, store_error> key_store::resume(std::string_view account) {
  return set_suspended(account, false);
}

result<void, store_error> key_store::set_suspended(std::string_view account, bool suspended) {
  return edit_locked([&](store_contents& c) -> result<void, store_error> {
    auto it = std::find_if(c.accounts.begin(), c.accounts.end(),
                           [&](const account_entry& a) { return a.name == account; });
    if (it == c.accounts.end()) {
      store_error e{true, fmt::format("no account \"{}\" in {}", account, accounts_path())};
      e.not_found = true;
      return unexpected(std::move(e));
    }
    it->suspended = suspended;
    return {};
  });
}

namespace {
store_error unsupported_here(std::string_view what) {
  store_error e{false, fmt::format("{} is not supported by this key store (cluster mode: use the "
                                   "data-dir store, or `tollgate keys` for what it offers)",
                                   what)};
  e.unsupported = true;
  return e;
}
}  // namespace

result<void, store_error> key_backend::create_account(std::string_view, std::string_view) {
  return unexpected(unsupported_here("creating an account with a customer id"));
}
result<void, store_error> key_backend::set_plan(std::string_view, std::string_view,
                                                const plan_map&) {
  return unexpected(unsupported_here("changing a key's plan"));
}
result<created_key, store_error> key_backend::rotate(std::string_view, int64_t, int64_t) {
  return unexpected(unsupported_here("rotating a key"));
}

result<void, store_error> key_store::create_account(std::string_view account,
                                                    std::string_view customer) {
  if (auto c = check_new_account(account, customer); !c) {
    return unexpected(c.error());
  }
  if (auto d = fs::ensure_dir(dir_); !d) {
    return unexpected(store_error{false, d.error()});
  }
  return edit_locked([&](store_contents& c) -> result<void, store_error> {
    for (const auto& a : c.accounts) {
      if (a.name == account) {
        store_error e{true, fmt::format("account \"{}\" exists already", account)};
        e.exists = true;
        return unexpected(std::move(e));
      }
      if (!customer.empty() && a.customer == customer) {
        store_error e{true, fmt::format("customer \"{}\" belongs to account \"{}\" already",
                                        customer, a.name)};
        e.exists = true;
        return unexpected(std::move(e));
      }
    }
    c.accounts.push_back({std::string(account), false, std::string(customer)});
    return {};
  });
}

result<void, store_error> key_store::set_plan(std::string_view key_id, std::string_view plan_name,
                                              const plan_map& plans) {
  auto id = parse_key_id(key_id);
  if (!id) {
    return unexpected(store_error{true, id.error()});
  }
  if (!valid_name(plan_name) || plans.find(plan_name) == plans.end()) {
    return unexpected(store_error{true, fmt::format("unknown plan \"{}\"", plan_name)});
  }
  return edit_locked([&](store_contents& c) -> result<void, store_error> {
    for (auto& k : c.keys) {
      if (k.id == *id) {
        if (k.revoked) {
          return unexpected(store_error{true, fmt::format("key {} is revoked", key_id)});
        }
        k.plan = std::string(plan_name);
        return {};
      }
    }
    store_error e{true, fmt::format("no key {}", key_id)};
    e.not_found = true;
    return unexpected(std::move(e));
  });
}

result<created_key, store_error> key_store::rotate(std::string_view key_id, int64_t now_unix,
                                                   int64_t expires_unix) {
  auto id = parse_key_id(key_id);
  if (!id) {
    return unexpected(store_error{true, id.error()});
  }
  created_key made;
  auto r = edit_locked([&](store_contents& c) -> result<void, store_error> {
    auto it =
        std::find_if(c.keys.begin(), c.keys.end(), [&](const key_entry& k) { return k.id == *id; });
    if (it == c.keys.end()) {
      store_error e{true, fmt::format("no key {}", key_id)};
      e.not_found = true;
      return unexpected(std::move(e));
    }
    if (it->revoked || (it->expires_unix > 0 && it->expires_unix <= now_unix)) {
      return unexpected(
          store_error{true, fmt::format("key {} is revoked or expired: create a new key", key_id)});
    }
    key_entry e;
    e.account = it->account;
    e.plan = it->plan;
    e.created_unix = now_unix;
    // A key rotated twice keeps the earlier (shorter) grace.
    if (it->expires_unix == 0 || it->expires_unix > expires_unix) {
      it->expires_unix = expires_unix;
    }
    auto m = mint(c, e);
    if (!m) {
      return unexpected(m.error());
    }
    made = std::move(*m);
    c.keys.push_back(std::move(e));
    return {};
  });
  if (!r) {
    return unexpected(r.error());
  }
  return made;
}

}  // namespace tollgate::quota
