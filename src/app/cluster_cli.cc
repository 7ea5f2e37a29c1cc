// `tollgate cluster import|status` and the [cluster] settings.
#include "cluster_cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <vector>

#include "cli.h"
#include "data_dir_lock.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/common/json_out.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/service.h"

namespace tollgate::app {

namespace {

constexpr std::string_view kClusterHelp =
    "usage: tollgate cluster import --config FILE --data-dir DIR\n"
    "       tollgate cluster status --config FILE [--json]\n"
    "\n"
    "  import   copies a single node's keys, accounts and this month's usage into the Redis of\n"
    "           the config's [cluster]; keys and accounts already there are left as they are,\n"
    "           and running it again changes nothing\n"
    "  status   whether Redis answers, and the nodes seen (name, last heartbeat, units held)\n"
    "\n"
    "  --config FILE   the TOML config whose [cluster] names the Redis (both subcommands)\n"
    "  --data-dir DIR  import: the single node's data dir to copy from\n"
    "  --json          status: one JSON object instead of the table\n"
    "  --help          this text\n"
    "An option takes its value as the next word or after an equals sign.\n";

// The options `cluster` takes: its parser refuses any other, and its help lists each.
constexpr std::string_view kClusterOptions[] = {"--config", "--data-dir", "--json", "--help"};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string json_string(std::string_view s) {
  out_buffer b;
  append_json_escaped(b, s);
  return "\"" + std::string(b.view()) + "\"";
}

// This month's usage of every key in `contents`, pushed to Redis as node `node`. 0, or 1 after
// the message; `calls` and `pushed` count what went.
int push_usage(const cluster::settings& cs, cluster::redis_keys& keys, quota::service& svc,
               const quota::store_contents& contents, const std::string& node, int64_t& calls,
               int& pushed, std::FILE* err) {
  const uint32_t month = svc.month();
  const cluster::redis_script push(R"(
local h = KEYS[1]
for _, f in ipairs({'u:', 'o:', 'g:'}) do
  local v = tonumber(ARGV[({['u:'] = 2, ['o:'] = 3, ['g:'] = 4})[f]])
  local cur = tonumber(redis.call('HGET', h, f .. ARGV[1]) or '0')
  if v > cur then redis.call('HSET', h, f .. ARGV[1], v) end
end
redis.call('PEXPIRE', h, 8640000000)
return 1)");
  for (const quota::key_entry& k : contents.keys) {
    const quota::usage_totals u = svc.usage(k.id, month);
    if (u.used == 0) {
      continue;
    }
    auto r = keys.conn().eval(push, {cluster::usage_key(cs, k.id, month)},
                              {node, std::to_string(u.used), std::to_string(u.overage),
                               std::to_string(u.used - u.overage)});
    if (!r) {
      fmt::print(err, "tollgate cluster import: {}\n", r.error().message);
      return 1;
    }
    calls += u.used;
    ++pushed;
  }
  return 0;
}

// Marks the data dir as imported: serve refuses such a dir in cluster mode. 0, or 1.
int mark_imported(const cluster::settings& cs, const config::settings& s, const std::string& node,
                  std::FILE* err) {
  std::FILE* f = std::fopen((s.data_dir + "/cluster-imported.txt").c_str(), "w");
  if (f == nullptr) {
    fmt::print(err, "tollgate cluster import: cannot write {}/cluster-imported.txt\n", s.data_dir);
    return 1;
  }
  fmt::print(f, "this data dir's usage was imported into redis {} as node {}\n", cs.redis, node);
  std::fclose(f);
  return 0;
}

int import_usage(const cluster::settings& cs, const config::settings& s, std::FILE* out,
                 std::FILE* err) {
  if (::access(s.data_dir.c_str(), F_OK) != 0) {
    fmt::print(err, "tollgate cluster import: no data dir at {}\n", s.data_dir);
    return 2;
  }
  auto lock = data_dir_lock::acquire(s.data_dir);
  if (!lock) {
    fmt::print(err, "tollgate cluster import: {}\n", lock.error());
    return 1;
  }
  quota::key_store store(s.data_dir);
  auto contents = store.load();
  if (!contents) {
    fmt::print(err, "tollgate cluster import: {}\n", contents.error().message);
    return contents.error().usage ? 2 : 1;
  }
  // A key on a plan the cluster's config lacks would be refused by every node (a 401 for a
  // key the customer holds): name every such key and copy nothing.
  int unknown = 0;
  for (const auto& k : contents->keys) {
    if (!k.revoked && s.plans.find(k.plan) == s.plans.end()) {
      fmt::print(err,
                 "tollgate cluster import: {}: key {} (account {}) is on plan \"{}\", which {} "
                 "does not define\n",
                 s.data_dir, quota::key_id_string(k.id), k.account, k.plan, s.config_path);
      ++unknown;
    }
  }
  if (unknown > 0) {
    fmt::print(err,
               "tollgate cluster import: nothing imported: add the plan(s) to [plans] in {} (or "
               "revoke those keys) and run it again\n",
               s.config_path);
    return 2;
  }
  cluster::redis_keys keys(cs);
  auto added = keys.import(*contents);
  if (!added) {
    fmt::print(err, "tollgate cluster import: {}\n", added.error().message);
    return 1;
  }
  // This month's usage, as the node's snapshot and journals have it, under a node name of its
  // own: "import:" + the data dir's absolute path. Absolute figures: a second run sets the same.
  quota::service_options qo;
  qo.data_dir = s.data_dir;
  qo.plans = to_plans(s);
  qo.cores = 1;
  auto svc = quota::service::open(std::move(qo), now_ns());
  if (!svc) {
    fmt::print(err, "tollgate cluster import: {}\n", svc.error());
    return 1;
  }
  std::error_code ec;
  const std::string node = "import:" + std::filesystem::absolute(s.data_dir, ec).string();
  int64_t calls = 0;
  int pushed = 0;
  if (int rc = push_usage(cs, keys, **svc, *contents, node, calls, pushed, err); rc != 0) {
    return rc;
  }
  (*svc)->close(now_ns());
  // A node later started on this dir would push the same usage again under its own name:
  // serve refuses a dir with this file in cluster mode.
  if (int rc = mark_imported(cs, s, node, err); rc != 0) {
    return rc;
  }
  fmt::print(out,
             "imported {} new key(s) of {} and {} account(s); this month's usage of {} key(s) "
             "({} billed call(s)) as node {}\n",
             *added, contents->keys.size(), contents->accounts.size(), pushed, calls, node);
  return 0;
}

int status(const cluster::settings& cs, bool json, std::FILE* out, std::FILE* err) {
  auto addr = cluster::parse_redis_address(cs.redis);
  cluster::redis_conn c(addr ? *addr : cluster::redis_address{}, cs.password, cs.timeout_ms);
  auto ok = c.connect();
  std::vector<std::pair<std::string, std::string>> nodes;
  int64_t keys = -1;
  std::string problem;
  if (ok) {
    auto r = c.command({"HGETALL", cluster::nodes_key(cs)});
    auto k = c.command({"HLEN", cluster::keys_key(cs)});
    if (r && k) {
      for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
        nodes.emplace_back(r->elements[i].str, r->elements[i + 1].str);
      }
      keys = k->integer;
    } else {
      problem = r ? k.error().message : r.error().message;
    }
  } else {
    problem = ok.error().message;
  }
  const bool up = problem.empty();
  const int64_t now_ms = now_ns() / 1000000;
  struct row {
    std::string name;
    int64_t beat_ms = 0;
    int64_t held = 0;
    std::string state;
  };
  std::vector<row> rows;
  for (const auto& [name, v] : nodes) {
    row r;
    r.name = name;
    long long b = 0, h = 0;
    char st[32] = {};
    if (std::sscanf(v.c_str(), "%lld %lld %31s", &b, &h, st) >= 2) {
      r.beat_ms = b;
      r.held = h;
    }
    r.state = std::string(st) == "stopped" ? "stopped"
              : now_ms - r.beat_ms > 5000  ? "silent"
                                           : "up";
    rows.push_back(std::move(r));
  }
  if (json) {
    std::string o = fmt::format("{{\"redis\":{},\"reachable\":{},", json_string(cs.redis),
                                up ? "true" : "false");
    if (!up) {
      o += fmt::format("\"error\":{},", json_string(problem));
    }
    o += fmt::format("\"keys\":{},\"nodes\":[", keys);
    for (size_t i = 0; i < rows.size(); ++i) {
      o += fmt::format(
          "{}{{\"node\":{},\"last_heartbeat_unix_ms\":{},\"heartbeat_age_secs\":{:.1f},"
          "\"units_held\":{},\"state\":\"{}\"}}",
          i ? "," : "", json_string(rows[i].name), rows[i].beat_ms,
          static_cast<double>(now_ms - rows[i].beat_ms) / 1000.0, rows[i].held, rows[i].state);
    }
    o += "]}\n";
    fmt::print(out, "{}", o);
  } else {
    if (up) {
      fmt::print(out, "redis {}: reachable; {} key(s)\n", cs.redis, keys);
    } else {
      fmt::print(out, "redis {}: UNREACHABLE ({})\n", cs.redis, problem);
    }
    fmt::print(out, "{:<32}  {:<24}  {:>12}  {}\n", "NODE", "LAST HEARTBEAT", "UNITS HELD",
               "STATE");
    for (const row& r : rows) {
      fmt::print(out, "{:<32}  {:<24}  {:>12}  {}\n", r.name,
                 fmt::format("{:.1f} s ago", static_cast<double>(now_ms - r.beat_ms) / 1000.0),
                 r.held, r.state);
    }
  }
  (void)err;
  return up ? 0 : 1;
}

}  // namespace

result<cluster::settings, std::string> cluster_settings(const config::settings& s,
                                                        std::string default_node) {
  cluster::settings c;
  c.redis = s.cluster_redis;
  c.node = s.cluster_node.empty() ? std::move(default_node) : s.cluster_node;
  c.prefix = s.cluster_prefix;
  if (!s.cluster_password_env.empty()) {
    const char* pw = std::getenv(s.cluster_password_env.c_str());
    if (pw == nullptr || *pw == '\0') {
      return unexpected(
          fmt::format("{}: cluster.password_env: the environment variable {} is "
                      "not set (it holds the Redis password)",
                      s.config_path, s.cluster_password_env));
    }
    c.password = pw;
  }
  return c;
}

std::span<const std::string_view> cluster_options() { return kClusterOptions; }
std::string_view cluster_help() { return kClusterHelp; }

int run_cluster(std::span<const std::string_view> args, std::FILE* out, std::FILE* err) {
  std::string config_path, data_dir;
  bool json = false, help = false;
  std::vector<std::string_view> words;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--help" || a == "-h") {
      help = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--config" || a == "--data-dir" || a.rfind("--config=", 0) == 0 ||
               a.rfind("--data-dir=", 0) == 0) {
      std::string_view name = a, value;
      if (auto eq = a.find('='); eq != std::string_view::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      }
      if (value.empty()) {
        fmt::print(err, "tollgate cluster: option {} needs a value\n{}", name, kClusterHelp);
        return 2;
      }
      (name == "--config" ? config_path : data_dir) = std::string(value);
    } else if (a.rfind("--", 0) == 0) {
      fmt::print(err, "tollgate cluster: unknown option {}\n{}", a, kClusterHelp);
      return 2;
    } else {
      words.push_back(a);
    }
  }
  if (help) {
    fmt::print(out, "{}", kClusterHelp);
    return 0;
  }
  if (words.size() != 1 || (words[0] != "import" && words[0] != "status")) {
    fmt::print(err, "tollgate cluster: needs one subcommand: import or status\n{}", kClusterHelp);
    return 2;
  }
  const bool import = words[0] == "import";
  if (config_path.empty() || (import && data_dir.empty())) {
    fmt::print(err, "tollgate cluster {}: needs --config FILE{}\n{}", words[0],
               import ? " and --data-dir DIR" : "", kClusterHelp);
    return 2;
  }
  if (!import && !data_dir.empty()) {
    fmt::print(err, "tollgate cluster status: takes no --data-dir\n{}", kClusterHelp);
    return 2;
  }
  if (import && json) {
    fmt::print(err, "tollgate cluster import: takes no --json\n{}", kClusterHelp);
    return 2;
  }
  auto s = config::load_file(config_path, config::defaults());
  if (!s) {
    fmt::print(err, "tollgate cluster: {}\n", s.error().message);
    return 2;
  }
  if (!s->cluster) {
    fmt::print(err, "tollgate cluster: {}: no [cluster] table (redis = \"HOST:PORT\")\n",
               config_path);
    return 2;
  }
  auto cs = cluster_settings(*s, "cli");
  if (!cs) {
    fmt::print(err, "tollgate cluster: {}\n", cs.error());
    return 2;
  }
  if (import) {
    s->data_dir = data_dir;
    return import_usage(*cs, *s, out, err);
  }
  return status(*cs, json, out, err);
}

}  // namespace tollgate::app
