#include "cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <string_view>
#include <vector>

#include "cluster_cli.h"
#include "commands.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::app {

std::string_view usage_main() {
  return R"(tollgate: an MCP server (Streamable HTTP and stdio) and REST API for story search,
behind API keys, per-key rate limits and monthly quotas.

Usage:
  tollgate serve  [--config FILE] [--listen HOST:PORT] [--threads N] [--data-dir DIR]
                  [--corpus FILE.jsonl | --sample] [--admin-listen HOST:PORT] [--role gateway|shard]
                  [--tls-listen HOST:PORT --tls-cert FILE --tls-key FILE] [--oauth]
  tollgate stdio  [--config FILE] [--data-dir DIR] [--corpus FILE.jsonl | --sample]
                  (key: TOLLGATE_API_KEY)
  tollgate stdio  --remote URL [--cacert FILE] [--timeout-ms N]   (key: TOLLGATE_API_KEY)
                  the bridge from a desktop client to a tollgate server
  tollgate keys create --account ACCOUNT --plan PLAN [--config FILE] [--data-dir DIR]
  tollgate keys list | revoke KEY_ID [--config FILE] [--data-dir DIR]
  tollgate accounts suspend ACCOUNT | resume ACCOUNT [--config FILE] [--data-dir DIR]
  tollgate usage export --month YYYY-MM [--format csv|json] [--config FILE] [--data-dir DIR]
  tollgate oauth list [--key KEY_ID] | revoke GRANT_ID|--key KEY_ID|--client CLIENT_ID
                  [--config FILE] [--data-dir DIR]
  tollgate cluster import --config FILE --data-dir DIR | status --config FILE [--json]
  tollgate config check --config FILE   (exit 0, or 2 with the start's message)
  tollgate corpus generate --count N [--seed S]
  tollgate index build --corpus FILE.jsonl [--out FILE] [--shards N]
  tollgate --version | --help          (every command has --help)

Exit codes: 0 ok, 2 bad usage or config, 1 other failure.
)";
}

std::string_view usage_serve() {
  return R"(Usage: tollgate serve [options]

Serves MCP (POST /mcp), REST (/v1/...) and ops routes (/healthz, /readyz, /metrics).

  --config FILE          TOML config (flags override it)
  --listen HOST:PORT     address to listen on (default 127.0.0.1:8080; port 0 picks a free one)
  --threads N            event-loop threads, one per core (default, or 0: online cores)
  --data-dir DIR         keys, accounts, usage journals and snapshots (default ./tollgate-data)
  --corpus FILE.jsonl    stories to serve, JSON Lines
  --sample               serve the embedded sample corpus (default when no corpus is given)
  --admin-listen H:P     serve /healthz, /readyz, /metrics and POST /admin/reload on a
                         separate address
  --role gateway|shard   shard: serve this node's slice to gateways (default gateway)
  --tls-listen H:P       also serve HTTPS (the same routes) on this address ([tls] listen)
  --tls-cert FILE        PEM certificate chain for it ([tls] cert; re-read on SIGHUP)
  --tls-key FILE         PEM private key for it ([tls] key; re-read on SIGHUP)
  --oauth                serve OAuth 2.1 ([oauth] enabled = true): OAuth-only clients connect
                         with nothing but the URL and the user's key on the consent page
  --accept-usage-loss    start although usage/snapshot.txt is missing or empty after usage
                         journals were compacted into it (refused otherwise: the usage it
                         counted would silently go back to what the remaining journals hold)
  --help                 this text

The first start on an empty data dir creates a demo account and prints its key. Keys and
accounts are re-read within a second of a change; SIGHUP (or POST /admin/reload on the admin
address) also re-reads the config file's plans. One serve or stdio process uses a data dir at a
time: a second is refused (exit 1, naming the pid that holds it).
)";
}

std::string_view usage_stdio() {
  return R"(Usage: TOLLGATE_API_KEY=KEY tollgate stdio [options]

Speaks newline-delimited JSON-RPC (MCP) on stdin/stdout; logs go to stderr. Ends at EOF.
SIGHUP reloads the config file's plans and the keys and accounts (these also reload within a
second by themselves); SIGTERM or SIGINT ends it once every line read is answered, with usage
flushed (exit 0). It needs a data dir no other serve or stdio process is using: beside a running
server, give it its own (--data-dir) with a key made there (tollgate keys create --data-dir).

  --config FILE          TOML config
  --data-dir DIR         keys, accounts and usage (default ./tollgate-data)
  --corpus FILE.jsonl    stories to serve, JSON Lines
  --sample               serve the embedded sample corpus (default)
  --accept-usage-loss    start although usage/snapshot.txt is missing or empty after usage
                         journals were compacted into it (see tollgate serve --help)
  --help                 this text

To forward to a running tollgate server instead (its key, rate limit and quota apply; any number
of bridges at once): tollgate stdio --remote URL --help.
)";
}

namespace {
// The flags each server command takes: parse_server_args refuses any other, and the command's
// usage text lists each (tests/app/cli_help_test.cc compares the two).
constexpr std::string_view kServeFlags[] = {
    "--config",       "--listen", "--threads",           "--data-dir", "--corpus",     "--sample",
    "--admin-listen", "--role",   "--accept-usage-loss", "--help",     "--tls-listen", "--tls-cert",
    "--tls-key",      "--oauth"};
constexpr std::string_view kStdioFlags[] = {
    "--config", "--data-dir", "--corpus", "--sample", "--accept-usage-loss", "--remote", "--help"};
}  // namespace

std::span<const std::string_view> server_flags(std::string_view command) {
  if (command == "serve") {
    return kServeFlags;
  }
  return kStdioFlags;
}

namespace {

result<int64_t, cli_error> parse_int(std::string_view flag, std::string_view v, int64_t lo,
                                     int64_t hi) {
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty() || n < lo || n > hi) {
    return unexpected(cli_error{
        fmt::format("{}: '{}' is not a whole number between {} and {}", flag, v, lo, hi)});
  }
  return n;
}

}  // namespace

result<void, cli_error> flag_value(int argc, char** argv, int& i, std::string_view what,
                                   std::string& out) {
  if (i + 1 >= argc || argv[i + 1][0] == '\0') {
    return unexpected(cli_error{fmt::format("{}: needs {}", argv[i], what)});
  }
  out = argv[++i];
  return {};
}

namespace {

// The settings --config names, or the defaults without one: the base the other flags override.
result<config::settings, cli_error> base_settings(int argc, char** argv) {
  std::string config_path;
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      return unexpected(cli_error{"", true});
    }
    if (a == "--config") {
      if (i + 1 >= argc) {
        return unexpected(cli_error{"--config: needs a FILE"});
      }
      config_path = argv[++i];
      if (config_path.empty()) {
        return unexpected(cli_error{"--config: needs a FILE (got an empty string)"});
      }
    }
  }
  config::settings s = config::defaults();
  if (!config_path.empty()) {
    auto loaded = config::load_file(config_path, std::move(s));
    if (!loaded) {
      return unexpected(cli_error{loaded.error().message});
    }
    s = std::move(*loaded);
  }
  return s;
}

struct corpus_flags {
  bool sample = false;
  bool corpus = false;
};

// serve's own flags: --listen, --admin-listen, --threads, --role. False: not one of them.
result<bool, cli_error> apply_serve_flag(int argc, char** argv, int& i, config::settings& s) {
  const std::string_view a = argv[i];
  std::string v;
  if (a == "--tls-cert" || a == "--tls-key") {
    if (auto r = flag_value(argc, argv, i, "a FILE", a == "--tls-cert" ? s.tls_cert : s.tls_key);
        !r) {
      return unexpected(r.error());
    }
  } else if (a == "--listen" || a == "--admin-listen" || a == "--tls-listen") {
    if (auto r = flag_value(argc, argv, i, "HOST:PORT", v); !r) {
      return unexpected(r.error());
    }
    auto ep = config::parse_host_port(v);
    if (!ep) {
      return unexpected(cli_error{fmt::format("{}: {}", a, ep.error())});
    }
    if (a == "--listen") {
      s.listen = *ep;
    } else if (a == "--tls-listen") {
      s.tls_listen = *ep;
    } else {
      s.admin_listen = *ep;
    }
  } else if (a == "--threads") {
    if (auto r = flag_value(argc, argv, i, "a number", v); !r) {
      return unexpected(r.error());
    }
    auto n = parse_int(a, v, 0, 1024);  // 0: one per online core, as in the config
    if (!n) {
      return unexpected(n.error());
    }
    s.threads = static_cast<int>(*n);
  } else if (a == "--oauth") {
    s.oauth_enabled = true;  // [oauth] enabled = true, its other keys as configured
  } else if (a == "--role") {
    if (auto r = flag_value(argc, argv, i, "gateway or shard", v); !r) {
      return unexpected(r.error());
    }
    if (v != "gateway" && v != "shard") {
      return unexpected(cli_error{fmt::format("--role: '{}' is not gateway or shard", v)});
    }
    s.role_shard = v == "shard";
  } else {
    return false;
  }
  return true;
}

// Applies the flag at argv[i] (and its value, advancing `i`) to `s`.
result<void, cli_error> apply_flag(std::string_view command, int argc, char** argv, int& i,
                                   config::settings& s, corpus_flags& seen) {
  const bool serve = command == "serve";
  const std::string_view a = argv[i];
  if (a == "--config") {
    ++i;
  } else if (a == "--data-dir") {
    return flag_value(argc, argv, i, "a DIR", s.data_dir);
  } else if (a == "--corpus") {
    seen.corpus = true;
    return flag_value(argc, argv, i, "a FILE.jsonl", s.corpus_path);
  } else if (a == "--sample") {
    seen.sample = true;
    s.corpus_path.clear();
  } else if (a == "--accept-usage-loss") {
    s.accept_usage_loss = true;
  } else if (!serve && a == "--remote") {
    // main() sends `stdio --remote` to the bridge (stdio_remote.cc) before this parser runs:
    // reaching here means it was combined in a way the bridge does not take.
    return unexpected(cli_error{
        "--remote runs the bridge, which takes only --cacert and --timeout-ms (see tollgate "
        "stdio --remote URL --help)"});
  } else {
    auto taken = serve ? apply_serve_flag(argc, argv, i, s) : result<bool, cli_error>(false);
    if (!taken) {
      return unexpected(taken.error());
    }
    if (!*taken) {
      return unexpected(
          cli_error{fmt::format("unknown option '{}' (see tollgate {} --help)", a, command)});
    }
  }
  return {};
}

}  // namespace

result<config::settings, cli_error> parse_server_args(std::string_view command, int argc,
                                                      char** argv) {
  auto base = base_settings(argc, argv);
  if (!base) {
    return unexpected(base.error());
  }
  config::settings s = std::move(*base);
  corpus_flags seen;
  const std::span<const std::string_view> known = server_flags(command);
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    if (std::find(known.begin(), known.end(), a) == known.end()) {
      return unexpected(
          cli_error{fmt::format("unknown option '{}' (see tollgate {} --help)", a, command)});
    }
    if (auto r = apply_flag(command, argc, argv, i, s, seen); !r) {
      return unexpected(r.error());
    }
  }
  if (seen.sample && seen.corpus) {
    return unexpected(cli_error{"--corpus and --sample: give one or the other"});
  }
  return s;
}

int run_admin(std::string_view command, std::span<const std::string_view> args, std::FILE* out,
              std::FILE* err) {
  config::settings s = config::defaults();
  // The quota module's own parser finds --config (either form), so the file loaded here is the
  // one the command was given; bad usage is left for the command to report.
  const std::string path = quota::config_option(args);
  if (!path.empty()) {
    auto loaded = config::load_file(path, std::move(s));
    if (!loaded) {
      fmt::print(err, "tollgate {}: {}\n", command, loaded.error().message);
      return 2;
    }
    s = std::move(*loaded);
  }
  quota::plan_map plans = to_plans(s);
  // The check serve makes before it starts, so a config serve refuses is refused here too.
  if (auto v = quota::validate_plans(plans); !v) {
    fmt::print(err, "tollgate {}: {}{}\n", command, path.empty() ? "" : path + ": ", v.error());
    return 2;
  }
  std::unique_ptr<cluster::redis_keys> redis;
  if (s.cluster) {  // [cluster]: keys and accounts live in Redis, from any host
    auto cs = cluster_settings(s, "cli");
    if (!cs) {
      fmt::print(err, "tollgate {}: {}\n", command, cs.error());
      return 2;
    }
    redis = std::make_unique<cluster::redis_keys>(std::move(*cs));
  }
  if (command == "keys") {
    const int rc = quota::run_keys_command(args, plans, s.data_dir, out, err, path, redis.get());
    if (rc == 0 && args.size() >= 2 && args[0] == "revoke") {
      // Its tokens already stop with it (they are aliases of the key); its grants end too, so
      // `oauth list` says so and no refresh is ever tried against a revoked key.
      std::string dir = s.data_dir;
      for (size_t i = 0; i + 1 < args.size(); ++i) {
        if (args[i] == "--data-dir") {
          dir = args[i + 1];
        } else if (args[i].substr(0, 11) == "--data-dir=") {
          dir = args[i].substr(11);
        }
      }
      revoke_oauth_of_key(s, dir, args[1], out);
    }
    return rc;
  }
  return quota::run_accounts_command(args, s.data_dir, out, err, redis.get());
}

quota::plan_map to_plans(const config::settings& s) {
  quota::plan_map plans;
  for (const auto& [name, p] : s.plans) {
    quota::plan q;
    q.name = name;
    q.rate_per_sec = p.rate_per_sec;
    q.burst = p.burst;
    q.monthly_quota = p.monthly_quota;
    q.overage = p.overage_bill ? quota::overage_policy::bill : quota::overage_policy::stop;
    plans.emplace(name, q);
  }
  return plans;
}

}  // namespace tollgate::app
