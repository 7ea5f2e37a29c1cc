#include "oauth_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <ctime>

#include "oauth_util.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/common/buffer.h"
#include "tollgate/common/log.h"
#include "tollgate/common/percent.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/service.h"

namespace tollgate::app::oauth {
namespace {

// A line's words (split on single spaces).
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> w;
  size_t i = 0;
  while (i <= line.size()) {
    size_t sp = line.find(' ', i);
    if (sp == std::string_view::npos) {
      sp = line.size();
    }
    w.push_back(line.substr(i, sp - i));
    i = sp + 1;
  }
  return w;
}

bool to_int(std::string_view s, int64_t& v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// "=" + percent-encoded text, and back.
std::string field(std::string_view s) { return "=" + pct(s); }
bool unfield(std::string_view f, std::string& out) {
  if (f.empty() || f.front() != '=') {
    return false;
  }
  out_buffer b;
  if (!percent_decode(f.substr(1), b, false)) {
    return false;
  }
  out.assign(b.view());
  return true;
}

}  // namespace

store::store(std::string data_dir, quota::service* svc, int64_t access_secs, int64_t refresh_secs)
    : dir_(std::move(data_dir)),
      svc_(svc),
      access_secs_(access_secs),
      refresh_secs_(refresh_secs) {}

store::~store() = default;

result<void, std::string> store::apply(std::string_view line) {
  const std::vector<std::string_view> w = words(line);
  const std::string_view kind = w[0];
  int64_t n = 0;
  if (kind == "client" && w.size() >= 4) {
    client c;
    c.id = w[1];
    if (!to_int(w[2], c.created) || !unfield(w[3], c.name)) {
      return unexpected(std::string("bad client line"));
    }
    for (size_t i = 4; i < w.size(); ++i) {
      std::string u;
      if (!unfield(w[i], u)) {
        return unexpected(std::string("bad redirect URI"));
      }
      c.redirect_uris.push_back(std::move(u));
    }
    clients_[c.id] = std::move(c);
  } else if (kind == "grant" && w.size() == 6) {
    grant g;
    g.id = w[1];
    auto k = quota::parse_key_id(w[2]);
    if (!k || !to_int(w[4], g.created) || !unfield(w[5], g.scope)) {
      return unexpected(std::string("bad grant line"));
    }
    g.key_id = *k;
    g.client_id = w[3];
    auto it = grants_.find(g.id);
    if (it == grants_.end()) {
      grant_order_.push_back(g.id);
      grants_[g.id] = std::move(g);
    } else {  // read again (a cluster node's own line): a revocation since stays
      g.revoked = it->second.revoked;
      it->second = std::move(g);
    }
  } else if ((kind == "access" || kind == "refresh") && w.size() == 4 && w[1].size() == 64 &&
             to_int(w[3], n)) {
    auto& m = kind == "access" ? access_ : refresh_;
    auto [it, added] = m.try_emplace(std::string(w[1]), token{std::string(w[2]), n});
    if (!added) {  // read again: its spent mark stays
      it->second.grant_id = w[2];
      it->second.expires = n;
    }
  } else if (kind == "spent" && w.size() == 2) {
    if (auto it = refresh_.find(std::string(w[1])); it != refresh_.end()) {
      it->second.spent = true;
    }
  } else if (kind == "revoke" && w.size() == 2) {
    if (auto it = grants_.find(std::string(w[1])); it != grants_.end()) {
      it->second.revoked = true;
    }
  } else {
    return unexpected(fmt::format("unknown record '{}'", kind.substr(0, 16)));
  }
  return {};
}

void store::apply_all_locked(std::string_view lines) {
  for (size_t i = 0; i < lines.size();) {
    size_t nl = lines.find('\n', i);
    if (nl == std::string_view::npos) {
      nl = lines.size();
    }
    if (nl > i) {
      if (auto a = apply(lines.substr(i, nl - i)); !a) {
        log_error("oauth: a log line skipped: {}", a.error());
      }
    }
    i = nl + 1;
  }
}

void store::clear_locked() {
  clients_.clear();
  grants_.clear();
  grant_order_.clear();
  access_.clear();
  refresh_.clear();
}

std::string store::compacted_locked(int64_t now) const {
  // Clients, grants not revoked whose refresh or access token lives, their live tokens.
  std::string out;
  for (const auto& [id, c] : clients_) {
    out += fmt::format("client {} {} {}", id, c.created, field(c.name));
    for (const std::string& u : c.redirect_uris) {
      out += " " + field(u);
    }
    out += "\n";
  }
  std::unordered_map<std::string, bool> alive;
  for (const auto* m : {&refresh_, &access_}) {
    for (const auto& [h, t] : *m) {
      auto g = grants_.find(t.grant_id);
      if (g != grants_.end() && !g->second.revoked && t.expires > now) {
        alive[t.grant_id] = true;
      }
    }
  }
  for (const std::string& id : grant_order_) {
    const grant& g = grants_.at(id);
    if (alive.count(id) != 0) {
      out += fmt::format("grant {} {} {} {} {}\n", id, quota::key_id_string(g.key_id), g.client_id,
                         g.created, field(g.scope));
    }
  }
  for (const auto& [h, t] : access_) {
    if (alive.count(t.grant_id) != 0 && t.expires > now) {
      out += fmt::format("access {} {} {}\n", h, t.grant_id, t.expires);
    }
  }
  for (const auto& [h, t] : refresh_) {
    // Spent tokens are kept while they could still be presented: their reuse must revoke.
    if (alive.count(t.grant_id) != 0 && t.expires > now) {
      out += fmt::format("refresh {} {} {}\n", h, t.grant_id, t.expires);
      if (t.spent) {
        out += fmt::format("spent {}\n", h);
      }
    }
  }
  return out;
}

result<void, std::string> store::replace_locked(std::string_view text, size_t& end) {
  // The tables are swapped aside first, and back if a line does not read: a log that does not
  // read changes nothing in memory.
  decltype(clients_) clients;
  decltype(grants_) grants;
  decltype(grant_order_) order;
  decltype(access_) access;
  decltype(refresh_) refresh;
  clients.swap(clients_);
  grants.swap(grants_);
  order.swap(grant_order_);
  access.swap(access_);
  refresh.swap(refresh_);
  size_t pos = 0;
  size_t line_no = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {
      break;  // a torn last line: its answer was never sent
    }
    ++line_no;
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (auto a = apply(line); !a) {
      clients.swap(clients_);
      grants.swap(grants_);
      order.swap(grant_order_);
      access.swap(access_);
      refresh.swap(refresh_);
      return unexpected(fmt::format("{}:{}: {}", path(), line_no, a.error()));
    }
  }
  end = pos;
  return {};
}

result<void, std::string> store::load(int64_t now, bool compact) {
  // The file is read and written outside the mutex (the cores take it to copy a client); only
  // the tables' replacement holds it.
  bool missing = false;
  auto f = quota::fs::read_file(path(), &missing);
  if (!f) {
    return unexpected(f.error());
  }
  const uint64_t ino = quota::fs::stamp(path()).ino;
  std::string compacted;
  {
    std::lock_guard g(mu_);
    size_t end = 0;
    if (auto r = replace_locked(*f, end); !r) {
      return r;
    }
    expected_size_ = end;
    expected_ino_ = ino;
    // A torn last line (a kill -9 mid-append) is cut off now: the next append must start a line.
    if (!(compact || end < f->size()) || missing) {
      return {};
    }
    compacted = compacted_locked(now);
  }
  if (auto w = quota::fs::write_file_atomic(path(), compacted); !w) {
    return unexpected(w.error());
  }
  return load(now, false);
}

result<void, std::string> store::open(int64_t now, bool compact) {
  if (auto d = quota::fs::ensure_dir(dir_); !d) {
    return unexpected(d.error());
  }
  if (!redis_ || keep_copy_) {  // (the CLI of a cluster reads Redis alone)
    if (auto r = load(now, compact); !r) {
      return r;
    }
  }
  if (redis_ && !redis_sync(now)) {
    // Not a reason to stay down: this node's copy is in force, and the worker reads Redis as
    // soon as it answers.
    log_error(
        "oauth: Redis {} not read at start: the grants of this node's copy ({}) are in "
        "force until it is",
        redis_key("log"), path());
  }
  push(now);
  return {};
}

bool store::poll(int64_t now) {
  if (redis_) {
    bool changed = false;
    const bool ok = redis_sync(now, &changed);
    if (changed) {
      push(now);  // (expiries need no push: the service drops expired tokens itself)
    }
    return ok;
  }
  // Only this thread appends or re-reads, so the figures compared are not changed meanwhile.
  const quota::fs::file_stamp s = quota::fs::stamp(path());
  {
    std::lock_guard g(mu_);
    if (s.size == expected_size_ && s.ino == expected_ino_) {
      return true;
    }
  }
  if (auto r = load(now, false); !r) {
    log_error("oauth: {} not re-read (the grants in memory stay in force): {}", path(), r.error());
    std::lock_guard g(mu_);
    expected_size_ = s.size;  // logged once per change
    expected_ino_ = s.ino;
    return true;
  }
  push(now);
  return true;
}

bool store::append_file(const std::string& lines) {
  if (auto r = quota::fs::append_durable(path(), lines); !r) {
    log_error("oauth: {}", r.error());
    return false;
  }
  const quota::fs::file_stamp s = quota::fs::stamp(path());
  std::lock_guard g(mu_);
  if (s.size == expected_size_ + lines.size() || expected_ino_ == 0) {
    expected_size_ = s.size;
    expected_ino_ = s.ino;
  }  // else another process appended too: poll() re-reads the whole file
  return true;
}

bool store::append(const std::string& lines, int64_t now) {
  if (!(redis_ ? redis_append(lines) : append_file(lines))) {
    return false;
  }
  {
    std::lock_guard g(mu_);
    apply_all_locked(lines);
  }
  push(now);
  return true;
}

void store::push(int64_t now) {
  if (svc_ == nullptr) {
    return;
  }
  std::vector<quota::token_alias> aliases;
  {
    std::lock_guard g(mu_);
    aliases.reserve(access_.size());
    for (const auto& [h, t] : access_) {
      auto gi = grants_.find(t.grant_id);
      if (gi == grants_.end() || gi->second.revoked || t.expires <= now) {
        continue;
      }
      quota::token_alias a;
      if (!quota::fs::from_hex(h, a.hash.data(), a.hash.size())) {
        continue;
      }
      a.key_id = gi->second.key_id;
      a.expires_unix = t.expires;
      aliases.push_back(a);
    }
  }
  svc_->set_token_aliases(std::move(aliases));
}

bool store::knows_token(const std::string& h, int64_t now) {
  {
    std::lock_guard g(mu_);
    if (access_.count(h) != 0 || refresh_.count(h) != 0) {
      return true;
    }
  }
  if (!redis_ || !redis_sync(now)) {
    return false;
  }
  std::lock_guard g(mu_);
  return access_.count(h) != 0 || refresh_.count(h) != 0;
}

result<client, std::string> store::register_client(std::string name, std::vector<std::string> uris,
                                                   int64_t now) {
  client c;
  c.id = new_secret(kClientPrefix).substr(0, kClientPrefix.size() + 32);
  if (c.id.size() != kClientPrefix.size() + 32) {
    return unexpected(std::string("no random bytes"));
  }
  c.name = std::move(name);
  c.redirect_uris = std::move(uris);
  c.created = now;
  std::string line = fmt::format("client {} {} {}", c.id, now, field(c.name));
  for (const std::string& u : c.redirect_uris) {
    line += " " + field(u);
  }
  line += "\n";
  if (!append(line, now)) {
    return unexpected(std::string("the registration could not be stored"));
  }
  return c;
}

std::optional<client> store::find_client(std::string_view id) const {
  std::lock_guard g(mu_);
  auto it = clients_.find(std::string(id));
  if (it == clients_.end()) {
    return std::nullopt;
  }
  return it->second;
}

namespace {
// A code's data as one Redis value: seven words, texts percent-encoded.
std::string code_text(const code_data& d) {
  return fmt::format("{} {} {} {} {} {} {}", field(d.client_id), field(d.redirect_uri),
                     field(d.challenge), field(d.resource), field(d.scope),
                     quota::key_id_string(d.key_id), d.expires);
}
std::optional<code_data> parse_code_text(std::string_view s) {
  const std::vector<std::string_view> w = words(s);
  code_data d;
  if (w.size() != 7) {
    return std::nullopt;
  }
  auto k = quota::parse_key_id(w[5]);
  if (!k || !unfield(w[0], d.client_id) || !unfield(w[1], d.redirect_uri) ||
      !unfield(w[2], d.challenge) || !unfield(w[3], d.resource) || !unfield(w[4], d.scope) ||
      !to_int(w[6], d.expires)) {
    return std::nullopt;
  }
  d.key_id = *k;
  return d;
}
}  // namespace

std::string store::issue_code(code_data d) {
  std::string code = new_secret(kCodePrefix);
  if (code.empty()) {
    return code;
  }
  if (redis_) {
    if (!redis_ready()) {
      return {};
    }
    auto r =
        redis_->command({"SET", redis_key("code:" + hash_hex(code)), code_text(d), "EX",
                         std::to_string(std::max<int64_t>(1, d.expires - std::time(nullptr)) + 1)});
    if (!r) {
      log_error("oauth: a code could not be kept in Redis: {}", r.error().message);
      return {};
    }
    return code;
  }
  std::lock_guard g(mu_);
  if (codes_.size() > 10000) {  // expired codes go
    std::erase_if(codes_, [&](const auto& c) { return c.second.expires <= d.expires - 60; });
  }
  codes_[hash_hex(code)] = std::move(d);
  return code;
}

std::optional<code_data> store::take_code(std::string_view code, int64_t now) {
  std::optional<code_data> d;
  if (redis_) {
    static const cluster::redis_script kTake(
        "local v = redis.call('GET', KEYS[1]) if v then redis.call('DEL', KEYS[1]) end return v");
    if (!redis_ready()) {
      return std::nullopt;
    }
    auto r = redis_->eval(kTake, {redis_key("code:" + hash_hex(code))}, {});
    if (!r || r->t != cluster::redis_reply::type::string) {
      return std::nullopt;
    }
    d = parse_code_text(r->str);
  } else {
    std::lock_guard g(mu_);
    auto it = codes_.find(hash_hex(code));
    if (it == codes_.end()) {
      return std::nullopt;
    }
    d = std::move(it->second);
    codes_.erase(it);  // single use, even when it failed a check
  }
  if (!d || d->expires <= now) {
    return std::nullopt;
  }
  return d;
}

result<issued, std::string> store::mint(const std::string& grant_id, std::string& lines,
                                        int64_t now) {
  issued t;
  t.access = new_secret(kAccessPrefix);
  t.refresh = new_secret(kRefreshPrefix);
  if (t.access.empty() || t.refresh.empty()) {
    return unexpected(std::string("no random bytes"));
  }
  t.expires_in = access_secs_;
  lines += fmt::format("access {} {} {}\n", hash_hex(t.access), grant_id, now + access_secs_);
  lines += fmt::format("refresh {} {} {}\n", hash_hex(t.refresh), grant_id, now + refresh_secs_);
  return t;
}

result<issued, std::string> store::new_grant(uint64_t key_id, std::string_view client_id,
                                             std::string_view scope, int64_t now) {
  const std::string id = new_secret("tgg_").substr(0, 4 + 24);
  std::string lines = fmt::format("grant {} {} {} {} {}\n", id, quota::key_id_string(key_id),
                                  client_id, now, field(scope));
  auto t = mint(id, lines, now);
  if (!t) {
    return t;
  }
  if (!append(lines, now)) {
    return unexpected(std::string("the grant could not be stored"));
  }
  t->scope = scope;
  return t;
}

void store::revoke_locked(const std::string& grant_id, std::string& lines) const {
  auto it = grants_.find(grant_id);
  if (it != grants_.end() && !it->second.revoked) {
    lines += fmt::format("revoke {}\n", grant_id);
  }
}

result<issued, store::refresh_error> store::refresh(std::string_view token,
                                                    std::string_view client_id, int64_t now,
                                                    const std::function<bool(uint64_t)>& key_live) {
  const std::string h = hash_hex(token);
  (void)knows_token(h, now);
  std::string grant_id;
  std::string scope;
  uint64_t key_id = 0;
  bool spent = false;
  {
    std::lock_guard g(mu_);
    auto it = refresh_.find(h);
    if (it == refresh_.end() || it->second.expires <= now) {
      return unexpected(refresh_error::invalid);
    }
    auto gi = grants_.find(it->second.grant_id);
    if (gi == grants_.end() || gi->second.revoked || gi->second.client_id != client_id) {
      return unexpected(refresh_error::invalid);
    }
    grant_id = gi->first;
    scope = gi->second.scope;
    key_id = gi->second.key_id;
    spent = it->second.spent;
  }
  if (!spent && redis_) {
    // Its single use across the cluster: the first node to mark it spends it.
    if (!redis_ready()) {
      return unexpected(refresh_error::io);
    }
    auto r = redis_->command(
        {"SET", redis_key("spent:" + h), "1", "NX", "EX", std::to_string(refresh_secs_ + 60)});
    if (!r) {
      return unexpected(refresh_error::io);
    }
    spent = r->t == cluster::redis_reply::type::nil;
  }
  if (spent || !key_live(key_id)) {
    // OAuth 2.1 §4.3.1: a spent refresh token presented again means it leaked; the whole
    // grant goes (its access tokens with it). A revoked key's grant goes too.
    (void)append(fmt::format("revoke {}\n", grant_id), now);
    return unexpected(spent ? refresh_error::reused : refresh_error::invalid);
  }
  std::string lines = fmt::format("spent {}\n", h);
  auto t = mint(grant_id, lines, now);
  if (!t || !append(lines, now)) {
    return unexpected(refresh_error::io);
  }
  t->scope = scope;
  return std::move(*t);
}

bool store::revoke_token(std::string_view secret, std::string_view client_id, int64_t now) {
  const std::string h = hash_hex(secret);
  (void)knows_token(h, now);
  std::string lines;
  {
    std::lock_guard g(mu_);
    const store::token* t = nullptr;
    if (auto it = access_.find(h); it != access_.end()) {
      t = &it->second;
    } else if (auto r = refresh_.find(h); r != refresh_.end()) {
      t = &r->second;
    }
    if (t == nullptr) {
      return true;  // RFC 7009 §2.2: an invalid token is no error
    }
    auto gi = grants_.find(t->grant_id);
    if (gi == grants_.end() || gi->second.client_id != client_id) {
      return true;  // another client's token: not revoked, and not said (§2.1)
    }
    revoke_locked(gi->first, lines);
  }
  return lines.empty() || append(lines, now);
}

std::vector<grant_view> store::list(uint64_t key_id, int64_t now) const {
  std::lock_guard g(mu_);
  std::vector<grant_view> out;
  for (const std::string& id : grant_order_) {
    const grant& gr = grants_.at(id);
    if (key_id != 0 && gr.key_id != key_id) {
      continue;
    }
    grant_view v;
    v.g = gr;
    if (auto c = clients_.find(gr.client_id); c != clients_.end()) {
      v.client_name = c->second.name;
    }
    for (const auto& [h, t] : access_) {
      v.live_access += t.grant_id == id && t.expires > now ? 1 : 0;
    }
    for (const auto& [h, t] : refresh_) {
      v.live_refresh = v.live_refresh || (t.grant_id == id && t.expires > now && !t.spent);
    }
    out.push_back(std::move(v));
  }
  return out;
}

result<size_t, std::string> store::revoke(std::string_view grant_id, uint64_t key_id,
                                          std::string_view client_id, int64_t now) {
  std::string lines;
  size_t n = 0;
  {
    std::lock_guard g(mu_);
    for (const std::string& id : grant_order_) {
      const grant& gr = grants_.at(id);
      if (gr.revoked) {
        continue;
      }
      if ((!grant_id.empty() && id == grant_id) || (key_id != 0 && gr.key_id == key_id) ||
          (!client_id.empty() && gr.client_id == client_id)) {
        revoke_locked(id, lines);
        ++n;
      }
    }
  }
  if (n > 0 && !append(lines, now)) {
    return unexpected(
        redis_ ? fmt::format("the revocation could not be written to Redis {}", redis_key("log"))
               : fmt::format("{}: the revocation could not be written", path()));
  }
  return n;
}

}  // namespace tollgate::app::oauth
