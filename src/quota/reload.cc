// Reloading keys, accounts and plans into a new lookup table, and the cluster's installs; the
// reclamation of replaced tables is described in service.cc.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <thread>
#include <unordered_map>

#include "quota/service_impl.h"
#include "quota/state.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

namespace {
// "N what (a, b, c, ...)": at most 8 names listed.
std::string counted(const std::vector<std::string>& names, std::string_view what) {
  std::string s = fmt::format("{} {}", names.size(), what);
  for (size_t i = 0; i < names.size() && i < 8; ++i) {
    s += i == 0 ? " (" : ", ";
    s += names[i];
  }
  if (!names.empty()) {
    s += names.size() > 8 ? ", ...)" : ")";
  }
  return s;
}

// Logs what a new table changes against the one in force (none: the first load).
// Only the keys count: a rebuild for OAuth tokens alone logs nothing.
void log_reload_effect(const key_table* old, const key_table& now) {
  if (old == nullptr) {
    log_info("keys loaded: {} key(s) in force", now.keys);
    return;
  }
  std::unordered_map<uint64_t, const key_record*> before;
  for (size_t i = 0; i < old->keys; ++i) {
    before.emplace(old->records[i].key_id, &old->records[i]);
  }
  std::vector<std::string> added, revoked, suspended, resumed;
  size_t unchanged = 0;
  for (size_t i = 0; i < now.keys; ++i) {
    const key_record& r = now.records[i];
    auto it = before.find(r.key_id);
    if (it == before.end()) {
      added.push_back(key_id_string(r.key_id));
      continue;
    }
    if (r.suspended != it->second->suspended) {
      (r.suspended ? suspended : resumed).push_back(key_id_string(r.key_id));
    } else {
      ++unchanged;
    }
    before.erase(it);
  }
  for (const auto& [id, r] : before) {
    revoked.push_back(key_id_string(id));
  }
  if (added.empty() && revoked.empty() && suspended.empty() && resumed.empty() &&
      old->keys == now.keys && old->records.size() != now.records.size()) {
    return;  // tokens issued or gone: not a key change
  }
  log_info("keys reloaded: {}, {}, {}, {}, {} unchanged", counted(added, "added"),
           counted(revoked, "revoked"), counted(suspended, "suspended"),
           counted(resumed, "resumed"), unchanged);
}
}  // namespace

bool service::reload_if_changed(bool force, std::string* why) {
  std::lock_guard rl(impl_->reload_mu);
  const bool external = impl_->cluster;
  const fs::file_stamp ks = external ? fs::file_stamp{} : fs::stamp(impl_->store.keys_path());
  const fs::file_stamp as = external ? fs::file_stamp{} : fs::stamp(impl_->store.accounts_path());
  bool made = false;
  // A rotated key's grace period ending is a change too: the table is rebuilt without it.
  const int64_t now_unix = static_cast<int64_t>(std::time(nullptr));
  const bool expired = impl_->next_expiry_unix.load(std::memory_order_relaxed) > 0 &&
                       now_unix >= impl_->next_expiry_unix.load(std::memory_order_relaxed);
  if (external ? force || impl_->installed_new || expired || impl_->tokens_new
               : force || expired || impl_->tokens_new || !(ks == impl_->keys_stamp) ||
                     !(as == impl_->accounts_stamp)) {
    impl_->installed_new = false;
    impl_->tokens_new = false;
    auto contents =
        external ? result<store_contents, store_error>(impl_->installed) : impl_->store.load();
    const std::string suspect =
        contents && !external ? suspect_contents(*contents, ks.ino == 0, as.ino == 0) : "";
    if (!contents || !suspect.empty()) {
      std::string msg = contents ? suspect +
                                       "; the tollgate CLI never writes that, so it is "
                                       "taken as damage. Restore the file (or revoke keys "
                                       "with `tollgate keys revoke`)"
                                 : contents.error().message;
      log_error("keys not reloaded (the previous table stays in force): {}", msg);
      if (!suspect.empty()) {
        impl_->keys_stamp = ks;  // logged once per change of the files, not every second
        impl_->accounts_stamp = as;
      }
      if (why != nullptr) {
        *why = std::move(msg);
      }
    } else {
      impl_->keys_stamp = ks;
      impl_->accounts_stamp = as;
      impl_->loaded_keys = contents->keys.size();
      impl_->loaded_accounts = contents->accounts.size();
      swap_in(build_table(*contents));
      made = true;
    }
  }
  reclaim_tables();
  return made;
}

std::string service::suspect_contents(const store_contents& c, bool keys_gone,
                                      bool accounts_gone) const {
  // The CLI rewrites these files whole (temp file + rename) and never drops an entry (revoked
  // keys stay, flagged), so a file that held entries and now is gone or holds none was not
  // written by tollgate: a deletion, a truncation, a restore gone wrong. Revoking every key
  // (or resuming every account) on that is refused; the table in force stays. (Cluster mode:
  // the agent guards the key set it installs from Redis.)
  if (impl_->loaded_keys > 0 && c.keys.empty()) {
    return fmt::format("{} {} (it held {} key(s))", impl_->store.keys_path(),
                       keys_gone ? "is gone" : "holds no key", impl_->loaded_keys);
  }
  if (impl_->loaded_accounts > 0 && c.accounts.empty()) {
    return fmt::format("{} {} (it held {} account(s))", impl_->store.accounts_path(),
                       accounts_gone ? "is gone" : "holds no account", impl_->loaded_accounts);
  }
  return {};
}

std::unique_ptr<key_table> service::build_table(const store_contents& c) {
  auto t = std::make_unique<key_table>();
  t->epoch = impl_->next_epoch++;
  std::unordered_map<std::string_view, bool> suspended;
  for (const auto& a : c.accounts) {
    suspended[a.name] = a.suspended;
  }
  {
    std::lock_guard g(impl_->mu);
    const uint32_t month = month_.load(std::memory_order_relaxed);
    const int64_t now_unix = static_cast<int64_t>(std::time(nullptr));
    int64_t next_expiry = 0;
    for (const key_entry& e : c.keys) {
      if (e.revoked) {
        continue;
      }
      if (e.expires_unix > 0) {
        if (e.expires_unix <= now_unix) {
          continue;  // a rotated key past its grace period: refused as if revoked
        }
        next_expiry = next_expiry == 0 ? e.expires_unix : std::min(next_expiry, e.expires_unix);
      }
      auto pit = opt_.plans.find(e.plan);
      if (pit == opt_.plans.end()) {
        log_error("key {} of account {} names unknown plan \"{}\"; it is refused",
                  key_id_string(e.id), e.account, e.plan);
        continue;
      }
      auto sit = suspended.find(e.account);
      t->records.push_back(
          make_record_locked(e, pit->second, sit != suspended.end() && sit->second, month));
    }
    t->keys = t->records.size();
    // OAuth tokens: a copy of their key's record under the token's digest (none for a key
    // left out above: revoked, expired or of an unknown plan).
    if (!impl_->tokens.empty()) {
      std::unordered_map<uint64_t, size_t> at;
      for (size_t i = 0; i < t->keys; ++i) {
        at.emplace(t->records[i].key_id, i);
      }
      for (const token_alias& a : impl_->tokens) {
        auto it = at.find(a.key_id);
        if (it == at.end() || a.expires_unix <= now_unix) {
          continue;
        }
        next_expiry = next_expiry == 0 ? a.expires_unix : std::min(next_expiry, a.expires_unix);
        key_record r = t->records[it->second];
        r.hash = a.hash;
        t->records.push_back(std::move(r));
      }
    }
    t->slot_count = static_cast<uint32_t>(impl_->by_slot.size());
    impl_->next_expiry_unix.store(next_expiry, std::memory_order_relaxed);  // a hint only
  }
  size_t cap = 16;
  while (cap < t->records.size() * 2) {
    cap *= 2;
  }
  t->mask = cap - 1;
  t->index.assign(cap, -1);
  for (size_t i = 0; i < t->records.size(); ++i) {
    uint64_t h;
    std::memcpy(&h, t->records[i].hash.data(), sizeof h);
    uint64_t j = h & t->mask;
    while (t->index[j] >= 0) {
      j = (j + 1) & t->mask;
    }
    t->index[j] = static_cast<int32_t>(i);
  }
  return t;
}

key_record service::make_record_locked(const key_entry& e, const plan& p, bool suspended,
                                       uint32_t month) {
  key_record r;
  r.hash = e.hash;
  r.key_id = e.id;
  r.state = impl_->state_for_locked(e.id, p.monthly_quota, month);
  r.slot = r.state->slot;
  r.suspended = suspended;
  r.overage = p.overage;
  r.monthly_quota = p.monthly_quota;
  r.burst = p.burst;
  r.emission_ns = std::max<int64_t>(1, static_cast<int64_t>(1e9 / p.rate_per_sec));
  r.tolerance_ns = r.emission_ns * p.burst;
  if (impl_->cluster) {
    // This node's share of the key's rate and burst (cluster::agent sets it by demand).
    r.state->base_emission_ns = r.emission_ns;
    r.state->base_burst = p.burst;
    auto sit = impl_->rate_share.find(e.id);
    const double share = sit != impl_->rate_share.end() ? sit->second : impl_->default_share;
    if (share < 1.0) {
      r.burst = std::max<int64_t>(1, static_cast<int64_t>(p.burst * share));
      r.emission_ns =
          std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(r.emission_ns) / share));
      r.tolerance_ns = r.emission_ns * r.burst;
    }
  }
  r.window_secs = std::max<int64_t>(1, ceil_secs(r.tolerance_ns));
  r.account = e.account;
  r.plan = e.plan;
  return r;
}

void service::swap_in(std::unique_ptr<key_table> t) {
  log_reload_effect(impl_->current.get(), *t);
  if (impl_->current) {
    impl_->retired.push_back(std::move(impl_->current));
  }
  impl_->current = std::move(t);
  // release: ledgers that acquire-load the pointer see the fully built table.
  current_.store(impl_->current.get(), std::memory_order_release);
}

void service::reclaim_tables() {
  // Reclaim tables no ledger can still be using.
  uint64_t min_seen = UINT64_MAX;
  for (const auto& s : ledgers_) {
    min_seen = std::min(min_seen, s->seen_epoch_.load(std::memory_order_acquire));
  }
  std::erase_if(impl_->retired,
                [&](const std::unique_ptr<key_table>& t) { return t->epoch < min_seen; });
}

result<void, std::string> service::replace_plans(plan_map plans) {
  if (auto v = validate_plans(plans); !v) {
    return unexpected(v.error());
  }
  {
    std::lock_guard rl(impl_->reload_mu);
    // A key of a plan that disappeared would start getting 401s: refuse instead, naming it.
    if (impl_->current) {
      for (const key_record& r : impl_->current->records) {
        if (plans.find(r.plan) == plans.end()) {
          return unexpected(fmt::format(
              "plan \"{}\" is still used by key {} (account {}); move or revoke its keys "
              "before removing it",
              r.plan, key_id_string(r.key_id), r.account));
        }
      }
    }
    std::swap(opt_.plans, plans);  // `plans` now holds the previous set
  }
  std::string why;
  if (!reload_if_changed(true, &why)) {
    // The keys files could not be read: nothing changes, the previous plans included (the
    // table in force was built from them).
    std::lock_guard rl(impl_->reload_mu);
    opt_.plans = std::move(plans);
    return unexpected(why);
  }
  return {};
}

void service::install_keys(store_contents c) {
  {
    std::lock_guard rl(impl_->reload_mu);
    impl_->installed = std::move(c);
    impl_->installed_new = true;
  }
  reload_if_changed(false);
}

void service::set_rate_shares(double default_share,
                              const std::vector<std::pair<uint64_t, double>>& shares) {
  {
    std::lock_guard rl(impl_->reload_mu);
    impl_->default_share = std::clamp(default_share, 1e-6, 1.0);
    for (const auto& [id, s] : shares) {
      impl_->rate_share[id] = std::clamp(s, 1e-6, 1.0);
    }
    impl_->installed_new = true;
  }
  reload_if_changed(false);
}

void service::for_each_state(const std::function<void(key_state&)>& fn) {
  std::lock_guard g(impl_->mu);
  for (key_state* s : impl_->by_slot) {
    fn(*s);
  }
}

size_t service::key_count() const {
  std::lock_guard rl(impl_->reload_mu);
  return impl_->current ? impl_->current->keys : 0;
}

bool service::key_in_force(uint64_t key_id) const {
  std::lock_guard rl(impl_->reload_mu);
  if (!impl_->current) {
    return false;
  }
  const key_table& t = *impl_->current;
  for (size_t i = 0; i < t.keys; ++i) {
    if (t.records[i].key_id == key_id) {
      return true;
    }
  }
  return false;
}

void service::set_token_aliases(std::vector<token_alias> tokens) {
  {
    std::lock_guard rl(impl_->reload_mu);
    impl_->tokens = std::move(tokens);
    impl_->tokens_new = true;
  }
  reload_if_changed(false);
}

bool service::wait_until_in_force(int64_t timeout_ms) const {
  const key_table* t = current_.load(std::memory_order_acquire);
  if (t == nullptr) {
    return true;
  }
  for (int64_t waited = 0;; ++waited) {
    bool all = true;
    for (const auto& s : ledgers_) {
      all = all && s->seen_epoch_.load(std::memory_order_acquire) >= t->epoch;
    }
    if (all) {
      return true;
    }
    if (waited >= timeout_ms) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace tollgate::quota
