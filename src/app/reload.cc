#include "reload.h"

#include <fmt/format.h>

#include <mutex>

#include "cli.h"
#include "tollgate/common/log.h"
#include "tollgate/config/config.h"

namespace tollgate::app {

namespace {

reload_result reload_locked(const shared_state& st, quota::core_ledger* stdio_core,
                            int64_t now_ns) {
  reload_result r;
  if (!st.quota) {
    r.message = "this node has no keys or plans (a shard node)";
    return r;
  }
  const std::string& path = st.settings->config_path;
  config::settings fresh = config::defaults();
  if (!path.empty()) {
    auto loaded = config::load_file(path, std::move(fresh));
    if (!loaded) {
      r.message = loaded.error().message;  // "FILE:LINE: key: what is wrong"
      return r;
    }
    fresh = std::move(*loaded);
  }
  quota::plan_map plans = to_plans(fresh);
  const size_t n = plans.size();
  if (auto v = st.quota->replace_plans(std::move(plans)); !v) {
    r.message = path.empty() ? v.error() : fmt::format("{}: {}", path, v.error());
    return r;
  }
  r.ok = true;
  r.plans = n;
  r.keys = st.quota->key_count();
  r.message = fmt::format("{} plan(s) from {}, {} live key(s)", r.plans,
                          path.empty() ? std::string("the built-in defaults") : path, r.keys);
  // Every core switches tables at its next pass or tick: once they all have, a request that
  // arrives after this returns is judged by the new figures on whichever core takes it.
  if (stdio_core != nullptr) {
    stdio_core->on_tick(now_ns);
  }
  if (!st.quota->wait_until_in_force(2000)) {
    r.message += "; a core has not switched yet (it will at its next pass)";
  }
  return r;
}

}  // namespace

reload_result reload_plans_and_keys(const shared_state& st, std::string_view source,
                                    quota::core_ledger* stdio_core, int64_t now_ns) {
  static std::mutex mu;  // SIGHUP and admin calls: one reload at a time
  std::lock_guard g(mu);
  // The HTTPS pair first (not at start-up: it was just loaded): a pair that does not load
  // changes nothing, plans and keys included.
  std::string tls_note;
  if (st.tls && source != "start-up") {
    if (auto t = st.tls->reload(); !t) {
      reload_result bad;
      bad.message = t.error();
      log_error("{}: nothing reloaded, the previous certificate, plans and keys stay in force: {}",
                source, bad.message);
      return bad;
    }
    tls_note = fmt::format("; TLS certificate {} for new connections", st.tls->cert_path());
  }
  reload_result r = reload_locked(st, stdio_core, now_ns);
  r.message += tls_note;
  if (r.ok) {
    log_info("{}: reloaded: {}", source, r.message);
  } else {
    log_error("{}: nothing reloaded, the previous plans and keys stay in force: {}", source,
              r.message);
  }
  return r;
}

}  // namespace tollgate::app
