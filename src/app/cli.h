// Command-line parsing for `tollgate serve` and `tollgate stdio`: defaults, then the TOML file
// (--config), then flags; and the config step of `tollgate keys|accounts`. Errors name the flag
// (or file, line and key) and exit 2.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "tollgate/common/result.h"
#include "tollgate/config/config.h"
#include "tollgate/quota/plan.h"

namespace tollgate::app {

struct cli_error {
  std::string message;
  bool help = false;  ///< --help was asked for: print usage, exit 0
};

/// The value of the flag at argv[i] into `out`, advancing `i` past it; an error naming the flag
/// and `what` it needs when there is none (or it is empty).
result<void, cli_error> flag_value(int argc, char** argv, int& i, std::string_view what,
                                   std::string& out);

/// Parses the arguments after the subcommand (`serve` or `stdio`) into settings.
result<config::settings, cli_error> parse_server_args(std::string_view command, int argc,
                                                      char** argv);

/// `tollgate keys|accounts` (`command`) with the words after it: loads plans and the data dir
/// from `--config FILE` / `--config=FILE` when given, then runs the quota module's command.
/// Prints to `out` and `err`; returns the exit code (2: bad usage or config, 1: other).
int run_admin(std::string_view command, std::span<const std::string_view> args, std::FILE* out,
              std::FILE* err);

/// The quota module's plans from the config's [plans] tables (serve, stdio and `keys` use
/// the same conversion).
quota::plan_map to_plans(const config::settings& s);

/// The flags `serve` or `stdio` (`command`) takes; its usage text lists each.
std::span<const std::string_view> server_flags(std::string_view command);

/// Usage text of each subcommand.
std::string_view usage_main();
std::string_view usage_serve();
std::string_view usage_stdio();

}  // namespace tollgate::app
