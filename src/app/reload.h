// Reloading a running server's plans, keys and accounts: SIGHUP and POST /admin/reload (the
// admin listener only). Plans come from the config file's [plans] tables (on top of the built-in
// ones, as at start-up); keys and accounts from the data dir. Other settings in the file take
// effect at the next start.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "handler.h"

namespace tollgate::app {

struct reload_result {
  bool ok = false;
  std::string message;  ///< what is in force (ok), or why nothing changed
  size_t plans = 0;     ///< plans in force (ok)
  size_t keys = 0;      ///< live keys in force (ok)
};

/// Re-reads the config file's plans and the data dir's keys and accounts and puts them in force
/// whole, or changes nothing and says why (a TOML error naming file, line and key; an invalid
/// plan; a plan still used by a key). Logs the outcome as `source` ("SIGHUP", "admin reload").
/// Any thread; calls are serialised. `stdio_core`: `tollgate stdio`'s one core, which the
/// calling thread drives; it switches to the new tables (its tick, at `now_ns`) before the call
/// waits for every core to have switched, since no loop pass would switch it meanwhile.
reload_result reload_plans_and_keys(const shared_state& st, std::string_view source,
                                    quota::core_ledger* stdio_core = nullptr, int64_t now_ns = 0);

}  // namespace tollgate::app
