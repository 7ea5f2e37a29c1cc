// tollgate's entry point: dispatches to the subcommands (DESIGN §10). Wiring only.
#include <fmt/format.h>

#include <span>
#include <string_view>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "tollgate/config/config.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/search/corpus.h"

namespace tollgate::app {
namespace {

// keys/accounts read plans and the data dir from --config/--data-dir; the quota module parses
// the rest of their arguments.
int run_admin(std::string_view command, int argc, char** argv) {
  std::vector<std::string_view> args(argv, argv + argc);
  config::settings s = config::defaults();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      auto loaded = config::load_file(std::string(args[i + 1]), std::move(s));
      if (!loaded) {
        fmt::print(stderr, "tollgate {}: {}\n", command, loaded.error().message);
        return 2;
      }
      s = std::move(*loaded);
    }
  }
  if (command == "keys") {
    return quota::run_keys_command(args, to_plans(s), s.data_dir, stdout, stderr);
  }
  return quota::run_accounts_command(args, s.data_dir, stdout, stderr);
}

}  // namespace

int run_main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "{}", usage_main());
    return 2;
  }
  std::string_view cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    fmt::print("tollgate {}\n", TOLLGATE_VERSION);
    return 0;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    fmt::print("{}", usage_main());
    return 0;
  }
  if (cmd == "serve") {
    return run_serve(argc - 2, argv + 2);
  }
  if (cmd == "stdio") {
    return run_stdio(argc - 2, argv + 2);
  }
  if (cmd == "keys" || cmd == "accounts") {
    return run_admin(cmd, argc - 2, argv + 2);
  }
  if (cmd == "corpus") {
    return search::run_corpus_command(argc - 1, argv + 1);
  }
  fmt::print(stderr, "tollgate: unknown command '{}' (see tollgate --help)\n", cmd);
  return 2;
}

}  // namespace tollgate::app

int main(int argc, char** argv) { return tollgate::app::run_main(argc, argv); }
