// tollgate's entry point: dispatches to the subcommands (design §10). Wiring only.
#include <fmt/format.h>
#if defined(TOLLGATE_MIMALLOC)
#include <mimalloc.h>

#include "tollgate/common/alloc_hold.h"
#endif

#include <span>
#include <string_view>
#include <vector>

#include "billing.h"
#include "cli.h"
#include "cluster_cli.h"
#include "commands.h"
#include "stdio_remote.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/index_file.h"

namespace tollgate::app {

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
    if (wants_remote(argc - 2, argv + 2)) {
      return run_stdio_remote(argc - 2, argv + 2);
    }
    return run_stdio(argc - 2, argv + 2);
  }
  if (cmd == "keys" || cmd == "accounts") {
    std::vector<std::string_view> args(argv + 2, argv + argc);
    return run_admin(cmd, args, stdout, stderr);
  }
  if (cmd == "usage") {
    std::vector<std::string_view> args(argv + 2, argv + argc);
    return run_usage_command(args, stdout, stderr);
  }
  if (cmd == "oauth") {
    std::vector<std::string_view> args(argv + 2, argv + argc);
    return run_oauth(args, stdout, stderr);
  }
  if (cmd == "cluster") {
    std::vector<std::string_view> args(argv + 2, argv + argc);
    return run_cluster(args, stdout, stderr);
  }
  if (cmd == "config") {
    return run_config(argc - 2, argv + 2);
  }
  if (cmd == "corpus") {
    return search::run_corpus_command(argc - 1, argv + 1);
  }
  if (cmd == "index") {
    return search::run_index_command(argc - 1, argv + 1);
  }
  fmt::print(stderr, "tollgate: unknown command '{}' (see tollgate --help)\n", cmd);
  return 2;
}

}  // namespace tollgate::app

#if defined(TOLLGATE_MIMALLOC)
namespace {
// How long mimalloc keeps freed memory committed during an allocator_hold: longer than a build
// runs (the hold's end gives it all back).
constexpr long kHoldDecommitDelayMs = 600'000;
}  // namespace
#endif

int main(int argc, char** argv) {
#if defined(TOLLGATE_MIMALLOC)
  // Memory freed goes back to the system at once, not after a delay: mimalloc returns delayed
  // pages on a later allocation, and the server allocates nothing once it serves, so a start's
  // build (given back when the shards are mapped from the file it wrote) stayed resident,
  // ~250 MB at 1M stories.
  mi_option_set(mi_option_decommit_delay, 0);
  // An index build frees and allocates gigabytes in turn: while it runs, the memory freed stays
  // committed for its next allocations (not faulted in and zeroed again: ~10% of a 1M-story
  // first start's CPU), and goes back when it ends (tollgate/common/alloc_hold.h).
  tollgate::set_allocator_hold_hooks(
      {[] { mi_option_set(mi_option_decommit_delay, kHoldDecommitDelayMs); },
       [] {
         mi_option_set(mi_option_decommit_delay, 0);
         mi_collect(true);
       }});
#endif
  return tollgate::app::run_main(argc, argv);
}
