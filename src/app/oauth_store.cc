#include "oauth_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "oauth_util.h"
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
    if (grants_.find(g.id) == grants_.end()) {
      grant_order_.push_back(g.id);
    }
    grants_[g.id] = std::move(g);
  } else if ((kind == "access" || kind == "refresh") && w.size() == 4 && w[1].size() == 64 &&
             to_int(w[3], n)) {
    (kind == "access" ? access_ : refresh_)[std::string(w[1])] = token{std::string(w[2]), n};
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

result<void, std::string> store::load_locked(int64_t now, bool compact) {
  bool missing = false;
  auto f = quota::fs::read_file(path(), &missing);
  if (!f) {
    return unexpected(f.error());
  }
  clients_.clear();
  grants_.clear();
  grant_order_.clear();
  access_.clear();
  refresh_.clear();
  size_t pos = 0;
  size_t line_no = 0;
  while (pos < f->size()) {
    const size_t nl = f->find('\n', pos);
    if (nl == std::string::npos) {
      break;  // a torn last line: its answer was never sent
    }
    ++line_no;
    const std::string_view line = std::string_view(*f).substr(pos, nl - pos);
    pos = nl + 1;
    if (auto a = apply(line); !a) {
      return unexpected(fmt::format("{}:{}: {}", path(), line_no, a.error()));
    }
  }
  expected_size_ = pos;
  // A torn last line (a kill -9 mid-append) is cut off now: the next append must start a line.
  if ((compact || pos < f->size()) && !missing) {
    // Rewritten with what is still alive: clients, grants not revoked whose refresh token
    // lives, their live tokens.
    std::string out;
    for (const auto& [id, c] : clients_) {
      out += fmt::format("client {} {} {}", id, c.created, field(c.name));
      for (const std::string& u : c.redirect_uris) {
        out += " " + field(u);
      }
      out += "\n";
    }
    std::unordered_map<std::string, bool> alive;
    for (const auto& [h, t] : refresh_) {
      auto g = grants_.find(t.grant_id);
      if (g != grants_.end() && !g->second.revoked && t.expires > now) {
        alive[t.grant_id] = true;
      }
    }
    for (const auto& [h, t] : access_) {
      auto g = grants_.find(t.grant_id);
      if (g != grants_.end() && !g->second.revoked && t.expires > now) {
        alive[t.grant_id] = true;
      }
    }
    for (const std::string& id : grant_order_) {
      const grant& g = grants_[id];
      if (alive.count(id) != 0) {
        out += fmt::format("grant {} {} {} {} {}\n", id, quota::key_id_string(g.key_id),
                           g.client_id, g.created, field(g.scope));
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
    if (auto w = quota::fs::write_file_atomic(path(), out); !w) {
      return unexpected(w.error());
    }
    return load_locked(now, false);
  }
  expected_ino_ = quota::fs::stamp(path()).ino;
  return {};
}

result<void, std::string> store::open(int64_t now, bool compact) {
  std::lock_guard g(mu_);
  if (auto d = quota::fs::ensure_dir(dir_); !d) {
    return unexpected(d.error());
  }
  if (auto r = load_locked(now, compact); !r) {
    return r;
  }
  push_locked(now);
  return {};
}

void store::poll(int64_t now) {
  std::lock_guard g(mu_);
  const quota::fs::file_stamp s = quota::fs::stamp(path());
  if (s.size == expected_size_ && s.ino == expected_ino_) {
    return;
  }
  if (auto r = load_locked(now, false); !r) {
    log_error("oauth: {} not re-read (the grants in memory stay in force): {}", path(), r.error());
    expected_size_ = s.size;  // logged once per change
    expected_ino_ = s.ino;
    return;
  }
  push_locked(now);
}

bool store::append_locked(const std::string& lines) {
  if (auto r = quota::fs::append_durable(path(), lines); !r) {
    log_error("oauth: {}", r.error());
    return false;
  }
  const quota::fs::file_stamp s = quota::fs::stamp(path());
  if (s.size == expected_size_ + lines.size() || expected_ino_ == 0) {
    expected_size_ = s.size;
    expected_ino_ = s.ino;
  }  // else another process appended too: poll() re-reads the whole file
  return true;
}

void store::push_locked(int64_t now) {
  if (svc_ == nullptr) {
    return;
  }
  std::vector<quota::token_alias> aliases;
  aliases.reserve(access_.size());
  for (const auto& [h, t] : access_) {
    auto g = grants_.find(t.grant_id);
    if (g == grants_.end() || g->second.revoked || t.expires <= now) {
      continue;
    }
    quota::token_alias a;
    if (!quota::fs::from_hex(h, a.hash.data(), a.hash.size())) {
      continue;
    }
    a.key_id = g->second.key_id;
    a.expires_unix = t.expires;
    aliases.push_back(a);
  }
  svc_->set_token_aliases(std::move(aliases));
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
  std::lock_guard g(mu_);
  if (!append_locked(line)) {
    return unexpected(std::string("the registration could not be stored"));
  }
  clients_[c.id] = c;
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

std::string store::issue_code(code_data d) {
  std::string code = new_secret(kCodePrefix);
  std::lock_guard g(mu_);
  if (codes_.size() > 10000) {  // expired codes go
    std::erase_if(codes_, [&](const auto& c) { return c.second.expires <= d.expires - 60; });
  }
  codes_[hash_hex(code)] = std::move(d);
  return code;
}

std::optional<code_data> store::take_code(std::string_view code, int64_t now) {
  std::lock_guard g(mu_);
  auto it = codes_.find(hash_hex(code));
  if (it == codes_.end()) {
    return std::nullopt;
  }
  code_data d = std::move(it->second);
  codes_.erase(it);  // single use, even when it failed a check
  if (d.expires <= now) {
    return std::nullopt;
  }
  return d;
}

result<issued, std::string> store::mint_locked(const std::string& grant_id, std::string& lines,
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
  grant gr;
  gr.id = new_secret("tgg_").substr(0, 4 + 24);
  gr.key_id = key_id;
  gr.client_id = client_id;
  gr.created = now;
  gr.scope = scope;
  std::string lines = fmt::format("grant {} {} {} {} {}\n", gr.id, quota::key_id_string(key_id),
                                  client_id, now, field(scope));
  std::lock_guard g(mu_);
  auto t = mint_locked(gr.id, lines, now);
  if (!t) {
    return t;
  }
  if (!append_locked(lines)) {
    return unexpected(std::string("the grant could not be stored"));
  }
  for (size_t i = 0; i < lines.size();) {
    const size_t nl = lines.find('\n', i);
    (void)apply(std::string_view(lines).substr(i, nl - i));
    i = nl + 1;
  }
  t->scope = scope;
  push_locked(now);
  return t;
}

void store::revoke_locked(const std::string& grant_id, std::string& lines) {
  auto it = grants_.find(grant_id);
  if (it != grants_.end() && !it->second.revoked) {
    lines += fmt::format("revoke {}\n", grant_id);
  }
}

result<issued, store::refresh_error> store::refresh(std::string_view token,
                                                    std::string_view client_id, int64_t now,
                                                    const std::function<bool(uint64_t)>& key_live) {
  const std::string h = hash_hex(token);
  std::lock_guard g(mu_);
  auto it = refresh_.find(h);
  if (it == refresh_.end() || it->second.expires <= now) {
    return unexpected(refresh_error::invalid);
  }
  auto gi = grants_.find(it->second.grant_id);
  if (gi == grants_.end() || gi->second.revoked || gi->second.client_id != client_id) {
    return unexpected(refresh_error::invalid);
  }
  std::string lines;
  if (it->second.spent || !key_live(gi->second.key_id)) {
    // OAuth 2.1 §4.3.1: a spent refresh token presented again means it leaked; the whole
    // grant goes (its access tokens with it). A revoked key's grant goes too.
    const bool reused = it->second.spent;
    revoke_locked(gi->first, lines);
    if (!lines.empty() && append_locked(lines)) {
      gi->second.revoked = true;
      push_locked(now);
    }
    return unexpected(reused ? refresh_error::reused : refresh_error::invalid);
  }
  lines = fmt::format("spent {}\n", h);
  auto t = mint_locked(gi->first, lines, now);
  if (!t || !append_locked(lines)) {
    return unexpected(refresh_error::io);
  }
  for (size_t i = 0; i < lines.size();) {
    const size_t nl = lines.find('\n', i);
    (void)apply(std::string_view(lines).substr(i, nl - i));
    i = nl + 1;
  }
  t->scope = gi->second.scope;
  push_locked(now);
  return std::move(*t);
}

bool store::revoke_token(std::string_view secret, std::string_view client_id, int64_t now) {
  const std::string h = hash_hex(secret);
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
  std::string lines;
  revoke_locked(gi->first, lines);
  if (lines.empty()) {
    return true;
  }
  if (!append_locked(lines)) {
    return false;
  }
  gi->second.revoked = true;
  push_locked(now);
  return true;
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
  std::lock_guard g(mu_);
  std::string lines;
  size_t n = 0;
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
  if (n > 0) {
    if (!append_locked(lines)) {
      return unexpected(fmt::format("{}: the revocation could not be written", path()));
    }
    for (size_t i = 0; i < lines.size();) {
      const size_t nl = lines.find('\n', i);
      (void)apply(std::string_view(lines).substr(i, nl - i));
      i = nl + 1;
    }
    push_locked(now);
  }
  return n;
}

}  // namespace tollgate::app::oauth
