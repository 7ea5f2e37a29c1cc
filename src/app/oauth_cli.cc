// `tollgate oauth list | revoke`: the grants made by the authorization server (oauth.h), read
// from and appended to the data dir's oauth.log. A running server re-reads the file within
// 250 ms of an append, so a revoked grant's tokens stop working within a second.
#include <fmt/format.h>

#include <ctime>

#include "admin_util.h"
#include "cluster_cli.h"
#include "commands.h"
#include "oauth_store.h"
#include "tollgate/config/config.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::app {
namespace {

constexpr std::string_view kUsage =
    "Usage: tollgate oauth list [--key KEY_ID] [--config FILE] [--data-dir DIR]\n"
    "       tollgate oauth revoke GRANT_ID | --key KEY_ID | --client CLIENT_ID\n"
    "                              [--config FILE] [--data-dir DIR]\n"
    "\n"
    "Lists or revokes the OAuth grants of this server's keys: a grant is one API key lent to\n"
    "one app (client) on the consent page; revoking it stops its access tokens within a\n"
    "second and its refresh token at once. `tollgate keys revoke` ends every grant of the key.\n";

}  // namespace

int run_oauth(std::span<const std::string_view> args, std::FILE* out, std::FILE* err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    fmt::print(args.empty() ? err : out, "{}", kUsage);
    return args.empty() ? 2 : 0;
  }
  const std::string_view verb = args[0];
  std::string config_path, data_dir, key, client, grant;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view a = args[i];
    std::string_view value;
    const size_t eq = a.find('=');
    if (a.substr(0, 2) == "--" && eq != std::string_view::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (a.substr(0, 2) == "--") {
      if (i + 1 >= args.size()) {
        fmt::print(err, "tollgate oauth: {} needs a value\n{}", a, kUsage);
        return 2;
      }
      value = args[++i];
    }
    if (a == "--config") {
      config_path = value;
    } else if (a == "--data-dir") {
      data_dir = value;
    } else if (a == "--key") {
      key = value;
    } else if (a == "--client") {
      client = value;
    } else if (a.substr(0, 2) != "--" && verb == "revoke" && grant.empty()) {
      grant = a;
    } else {
      fmt::print(err, "tollgate oauth: unexpected '{}'\n{}", a, kUsage);
      return 2;
    }
  }
  config::settings s = config::defaults();
  if (!config_path.empty()) {
    auto loaded = config::load_file(config_path, std::move(s));
    if (!loaded) {
      fmt::print(err, "tollgate oauth: {}\n", loaded.error().message);
      return 2;
    }
    s = std::move(*loaded);
  }
  if (!data_dir.empty()) {
    s.data_dir = data_dir;
  }
  uint64_t key_id = 0;
  if (!key.empty()) {
    auto k = quota::parse_key_id(key);
    if (!k) {
      fmt::print(err, "tollgate oauth: --key: {}\n", k.error());
      return 2;
    }
    key_id = *k;
  }
  const auto now = static_cast<int64_t>(std::time(nullptr));
  oauth::store st(s.data_dir, nullptr, s.oauth_access_token_secs, s.oauth_refresh_token_secs);
  if (s.cluster) {  // the grants live in Redis: read and revoked there, from any host
    auto cs = cluster_settings(s, "cli");
    if (!cs) {
      fmt::print(err, "tollgate oauth: {}\n", cs.error());
      return 2;
    }
    st.use_redis(*cs, 2000, false);
  }
  if (auto o = st.open(now, false); !o) {
    fmt::print(err, "tollgate oauth: {}\n", o.error());
    return 1;
  }
  if (s.cluster && !st.poll(now)) {
    fmt::print(err, "tollgate oauth: Redis {} could not be read\n", s.cluster_redis);
    return 1;
  }
  if (verb == "list") {
    if (!client.empty() || !grant.empty()) {
      fmt::print(err, "tollgate oauth list: takes only --key\n{}", kUsage);
      return 2;
    }
    fmt::print(out, "{:<28} {:<20} {:<36} {:<8} {:<20} {}\n", "GRANT", "KEY", "CLIENT", "STATUS",
               "CREATED", "CLIENT NAME");
    for (const oauth::grant_view& v : st.list(key_id, now)) {
      const char* status = v.g.revoked                           ? "revoked"
                           : v.live_access > 0 || v.live_refresh ? "active"
                                                                 : "expired";
      fmt::print(out, "{:<28} {:<20} {:<36} {:<8} {:<20} {}\n", v.g.id,
                 quota::key_id_string(v.g.key_id), v.g.client_id, status, admin::utc(v.g.created),
                 v.client_name);
    }
    return 0;
  }
  if (verb == "revoke") {
    const int given = (grant.empty() ? 0 : 1) + (key.empty() ? 0 : 1) + (client.empty() ? 0 : 1);
    if (given != 1) {
      fmt::print(err, "tollgate oauth revoke: give one of GRANT_ID, --key or --client\n{}", kUsage);
      return 2;
    }
    auto r = st.revoke(grant, key_id, client, now);
    if (!r) {
      fmt::print(err, "tollgate oauth: {}\n", r.error());
      return 1;
    }
    if (*r == 0 && !grant.empty()) {
      fmt::print(err, "tollgate oauth revoke: no live grant {}\n", grant);
      return 2;
    }
    fmt::print(out, "revoked {} grant(s)\n", *r);
    return 0;
  }
  fmt::print(err, "tollgate oauth: unknown subcommand '{}'\n{}", verb, kUsage);
  return 2;
}

void revoke_oauth_of_key(const config::settings& s, const std::string& data_dir,
                         std::string_view key_id, std::FILE* out) {
  auto k = quota::parse_key_id(key_id);
  if (!k || (s.cluster && !s.oauth_enabled)) {
    return;
  }
  const auto now = static_cast<int64_t>(std::time(nullptr));
  oauth::store st(data_dir, nullptr, 3600, 86400);
  if (s.cluster) {
    auto cs = cluster_settings(s, "cli");
    if (!cs) {
      return;
    }
    st.use_redis(*cs, 2000, false);
  }
  if (!st.open(now, false) || (s.cluster && !st.poll(now))) {
    return;
  }
  auto r = st.revoke({}, *k, {}, now);
  if (r && *r > 0) {
    fmt::print(out, "revoked {} OAuth grant(s) of {}\n", *r, key_id);
  }
}

}  // namespace tollgate::app
