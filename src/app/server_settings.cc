// The settings `serve` and `stdio` run with (server_settings.h), and `tollgate config check`,
// which takes a start's own steps on them up to the first that touches the data dir.
#include "server_settings.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "admin_api.h"
#include "cli.h"
#include "cluster_cli.h"
#include "commands.h"
#include "tls_setup.h"
#include "tollgate/common/log.h"
#include "tollgate/net/server.h"

namespace tollgate::app {
namespace {

// Parses settings for `command`; prints usage or the error. Returns the exit code to use when
// the settings could not be had (0 after --help).
std::optional<config::settings> settings_or_exit(std::string_view command, int argc, char** argv,
                                                 int& code) {
  auto s = parse_server_args(command, argc, argv);
  if (s) {
    return std::move(*s);
  }
  if (s.error().help) {
    fmt::print("{}", command == "serve" ? usage_serve() : usage_stdio());
    code = 0;
  } else {
    fmt::print(stderr, "tollgate {}: {}\n", command, s.error().message);
    code = 2;
  }
  return std::nullopt;
}

// The fleet settings that must hold together; prints the problem and returns 2 when not.
int check_fleet(const config::settings& s, bool stdio) {
  const std::string where = s.config_path.empty() ? "" : s.config_path + ": ";
  if (stdio && (s.role_shard || !s.remote_shards.empty())) {
    fmt::print(stderr,
               "tollgate stdio: {}[fleet]: remote shards and --role shard need `tollgate "
               "serve`; stdio serves its corpus in-process only\n",
               where);
    return 2;
  }
  if (s.role_shard && !s.remote_shards.empty()) {
    fmt::print(stderr,
               "tollgate serve: {}fleet.shards: a shard node does not list shards of its "
               "own (only a gateway does)\n",
               where);
    return 2;
  }
  if ((s.role_shard || !s.remote_shards.empty()) && s.shard_secret.empty()) {
    fmt::print(stderr,
               "tollgate serve: {}fleet.secret: required for {}: set [fleet] secret to the "
               "string the gateway and its shard nodes share\n",
               where,
               s.role_shard ? "a shard node (--role shard)" : "a gateway with [fleet] shards");
    return 2;
  }
  if (!s.fleet_local && s.remote_shards.empty() && !s.role_shard) {
    fmt::print(stderr, "tollgate serve: {}fleet.local: false needs [fleet] shards to search\n",
               where);
    return 2;
  }
  return 0;
}

}  // namespace

std::optional<config::settings> checked_settings(std::string_view command, int argc, char** argv,
                                                 int& code) {
  auto s = settings_or_exit(command, argc, argv, code);
  if (s) {
    code = check_fleet(*s, command == "stdio");
    if (code != 0) {
      return std::nullopt;
    }
  }
  return s;
}

net::server_options engine_options(const config::settings& s) {
  rlimit nofile{};
  net::server_options no;
  no.host = s.listen.host;
  no.port = s.listen.port;
  no.threads = s.threads;
  no.limits.max_header_bytes = s.max_header_bytes;
  no.limits.max_body_bytes = s.max_body_bytes;
  no.header_timeout_ms = s.header_timeout_ms;
  no.idle_timeout_ms = s.idle_timeout_ms;
  no.max_connections = s.max_connections;
  // Descriptors the public side leaves to the rest of the process when the table fills up
  // (1,000s of idle clients under a low `ulimit -n`): half for the admin listener's
  // connections, half for what the server opens while running (usage snapshots, key and
  // account reloads, the access log) and already holds (journals are opened before this).
  // The admin listener, in turn, leaves the second half to the files.
  const rlim_t fd_limit = getrlimit(RLIMIT_NOFILE, &nofile) == 0 ? nofile.rlim_cur : 1024;
  no.fd_reserve = fd_limit >= 1024 ? 128 : static_cast<uint32_t>(fd_limit / 4);
  no.journal_inline = s.journal_inline;
  return no;
}

int run_config(int argc, char** argv) {
  const std::string_view usage =
      "Usage: tollgate config check --config FILE\n\n"
      "Checks FILE as `tollgate serve --config FILE` would read it, without starting: exit 0\n"
      "(\"FILE: ok\" on stdout), or 2 with the message a start would give (FILE:LINE: key: what\n"
      "is wrong). For ExecStartPre= and CI pipelines.\n";
  if (argc >= 1 && (std::string_view(argv[0]) == "--help" || std::string_view(argv[0]) == "-h")) {
    fmt::print("{}", usage);
    return 0;
  }
  if (argc < 1 || std::string_view(argv[0]) != "check") {
    fmt::print(stderr, "tollgate config: expected `check --config FILE`\n\n{}", usage);
    return 2;
  }
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      fmt::print("{}", usage);
      return 0;
    }
    if (a == "--config" && i + 1 < argc) {
      path = argv[++i];
    } else if (a.substr(0, 9) == "--config=") {
      path = std::string(a.substr(9));
    } else {
      fmt::print(stderr, "tollgate config check: unknown argument '{}'\n\n{}", a, usage);
      return 2;
    }
  }
  if (path.empty()) {
    fmt::print(stderr, "tollgate config check: --config: needs a FILE\n\n{}", usage);
    return 2;
  }
  // The start's own steps, in its order, up to the first that touches the data dir.
  std::string flag = "--config";
  char* args[] = {flag.data(), path.data()};
  int code = 1;
  auto s = settings_or_exit("serve", 2, args, code);
  if (!s) {
    return code;
  }
  if (int rc = check_fleet(*s, false); rc != 0) {
    return rc;
  }
  if (s->cluster) {
    // serve refuses a [cluster] whose password variable is unset (exit 2): so does the check,
    // so a systemd ExecStartPre check and the start agree.
    if (auto cs = cluster_settings(*s, "check"); !cs) {
      fmt::print(stderr, "tollgate serve: {}\n", cs.error());
      return 2;
    }
  }
  if (int rc = check_tls_settings(*s); rc != 0) {
    return rc;
  }
  if (auto a = check_admin_config(*s, false); !a) {
    fmt::print(stderr, "tollgate serve: {}: {}\n", path, a.error());
    return 2;
  }
  if (!s->corpus_path.empty() && ::access(s->corpus_path.c_str(), R_OK) != 0) {
    fmt::print(stderr, "tollgate serve: {}: corpus.path: cannot read {}: {}\n", path,
               s->corpus_path, std::strerror(errno));
    return 2;
  }
  if (!s->access_log.empty() && s->access_log != "-") {
    // Writable as it is, or creatable in its directory (a check creates nothing).
    const std::string& f = s->access_log;
    const size_t slash = f.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : f.substr(0, slash == 0 ? 1 : slash);
    const bool ok = ::access(f.c_str(), F_OK) == 0 ? ::access(f.c_str(), W_OK) == 0
                                                   : ::access(dir.c_str(), W_OK) == 0;
    if (!ok) {
      log_error("access log {}: {}", f, std::strerror(errno));
      return 2;
    }
  }
  fmt::print("{}: ok\n", path);
  return 0;
}

}  // namespace tollgate::app
