// `tollgate keys ...` and `tollgate accounts ...`: argv parsing over key_store.
#include <fmt/format.h>
#include <unistd.h>

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "tollgate/quota/key_store.h"

namespace tollgate::quota {

namespace {

constexpr std::string_view kKeysHelp =
    "usage: tollgate keys create --account ACCOUNT --plan PLAN [--config FILE] [--data-dir DIR]\n"
    "       tollgate keys list [--config FILE] [--data-dir DIR]\n"
    "       tollgate keys revoke KEY_ID [--config FILE] [--data-dir DIR]\n"
    "\n"
    "  create   makes a new API key for ACCOUNT (created if new) on PLAN and prints it once on\n"
    "           stdout; only its SHA-256 is stored\n"
    "  list     shows key ids, accounts, plans, creation times and status (never secrets)\n"
    "  revoke   disables KEY_ID; a running server refuses it after its next reload (<= 1 s)\n"
    "\n"
    "  --account ACCOUNT  the account the new key belongs to (create)\n"
    "  --plan PLAN        the new key's plan: free, pro, or a [plans.NAME] of --config (create)\n"
    "  --config FILE      the TOML config whose [plans] (and server.data_dir) to use, as serve\n"
    "                     is given it; without it only the built-in free and pro exist\n"
    "  --data-dir DIR     the data dir holding keys and accounts (default ./tollgate-data)\n"
    "  --help             this text\n"
    "An option takes its value as the next word or after an equals sign.\n"
    "With --config FILE holding [cluster], keys and accounts live in that Redis (any host;\n"
    "every node applies a change within a second) and --data-dir is not used.\n";

constexpr std::string_view kAccountsHelp =
    "usage: tollgate accounts suspend ACCOUNT [--config FILE] [--data-dir DIR]\n"
    "       tollgate accounts resume ACCOUNT [--config FILE] [--data-dir DIR]\n"
    "\n"
    "  suspend  billable calls of ACCOUNT's keys get a `suspended` error (initialize, tools/list\n"
    "           and ping still work); a running server applies it within a second\n"
    "  resume   lifts a suspension\n"
    "\n"
    "  --config FILE      the TOML config (its server.data_dir is used)\n"
    "  --data-dir DIR     the data dir holding keys and accounts (default ./tollgate-data)\n"
    "  --help             this text\n"
    "With --config FILE holding [cluster], the account is changed in that Redis.\n";

// The options each command takes: its parser refuses any other, and its help lists each.
constexpr std::string_view kKeysOptions[] = {"--account", "--plan", "--config", "--data-dir",
                                             "--help"};
constexpr std::string_view kAccountsOptions[] = {"--config", "--data-dir", "--help"};

struct parsed {
  std::vector<std::string_view> positional;
  std::string_view account, plan, config;
  std::string data_dir;
  bool help = false;
  std::string error;
};

// Splits options from positional words. Options that take a value, as `--name VALUE` or
// `--name=VALUE` (never empty): --account --plan --data-dir --config (the last is the app's: it
// loads the plans through config_option(), which runs this same parser).
parsed parse(std::span<const std::string_view> args, std::string_view data_dir) {
  parsed p;
  p.data_dir = std::string(data_dir);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--help" || a == "-h") {
      p.help = true;
      continue;
    }
    if (a.substr(0, 2) == "--") {
      std::string_view name = a, value;
      bool has_value = false;
      if (auto eq = a.find('='); eq != std::string_view::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        has_value = true;
      }
      // The union of the commands' value options: `accounts` refuses --account and --plan
      // itself, with a message saying how it takes the account.
      if (name != "--account" && name != "--plan" && name != "--data-dir" && name != "--config") {
        p.error = fmt::format("unknown option {}", name);
        return p;
      }
      if (!has_value) {
        if (i + 1 >= args.size()) {
          p.error = fmt::format("option {} needs a value", name);
          return p;
        }
        value = args[++i];
      }
      if (value.empty()) {
        p.error = fmt::format("option {} needs a value (got an empty one)", name);
        return p;
      }
      if (name == "--account") {
        p.account = value;
      } else if (name == "--plan") {
        p.plan = value;
      } else if (name == "--data-dir") {
        p.data_dir = std::string(value);
      } else {
        p.config = value;
      }
      continue;
    }
    p.positional.push_back(a);
  }
  return p;
}

int usage_error(std::FILE* err, std::string_view msg, std::string_view help) {
  fmt::print(err, "tollgate: {}\n{}", msg, help);
  return 2;
}

int report(std::FILE* err, const store_error& e) {
  fmt::print(err, "tollgate: {}\n", e.message);
  return e.usage ? 2 : 1;
}

// A command's --help or argument error, answered here: its exit code, or none when the command
// is to run.
std::optional<int> answered_early(const parsed& p, std::string_view help, std::FILE* out,
                                  std::FILE* err) {
  if (p.help) {
    fmt::print(out, "{}", help);
    return 0;
  }
  if (!p.error.empty()) {
    return usage_error(err, p.error, help);
  }
  return std::nullopt;
}

std::string utc_time(int64_t unix) {
  std::time_t t = static_cast<std::time_t>(unix);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// keys create: a new key, printed once.
int keys_create(const parsed& p, const plan_map& plans, key_backend& store, std::FILE* out,
                std::FILE* err, std::string_view config_path) {
  if (p.positional.size() != 1) {
    return usage_error(err, fmt::format("unexpected argument {}", p.positional[1]), kKeysHelp);
  }
  if (p.account.empty() || p.plan.empty()) {
    return usage_error(err, "keys create needs --account ACCOUNT and --plan PLAN", kKeysHelp);
  }
  auto r = store.create_key(p.account, p.plan, plans, static_cast<int64_t>(std::time(nullptr)));
  if (!r) {
    if (r.error().usage && plans.find(std::string(p.plan)) == plans.end()) {
      // Say where the plans were looked for: a plan of a config file needs --config.
      fmt::print(err, "tollgate: {}; {}\n", r.error().message,
                 config_path.empty()
                     ? std::string("no --config FILE was given, so only the built-in plans "
                                   "exist (pass the config that defines [plans." +
                                   std::string(p.plan) + "])")
                     : fmt::format("looked in the [plans] of {}", config_path));
      return 2;
    }
    return report(err, r.error());
  }
  fmt::print(out, "{}\n", r->secret);
  fmt::print(err,
             "tollgate: created {} for account {} on plan {}; the key above is shown only "
             "once, store it now\n",
             r->key_id, p.account, p.plan);
  return 0;
}

// keys list: every key with its account, plan, creation time and status.
int keys_list(const parsed& p, key_backend& store, const key_store& local, bool own_store,
              std::FILE* out, std::FILE* err) {
  if (p.positional.size() != 1) {
    return usage_error(err, fmt::format("unexpected argument {}", p.positional[1]), kKeysHelp);
  }
  auto keys = store.list_keys();
  if (!keys) {
    return report(err, keys.error());
  }
  if (own_store && keys->empty() && ::access(local.data_dir().c_str(), F_OK) != 0) {
    // A mistyped --data-dir would otherwise look like a store with no keys.
    fmt::print(err, "tollgate keys: no data dir at {} (no keys yet)\n", local.data_dir());
  }
  auto accounts = store.load();
  if (!accounts) {
    return report(err, accounts.error());
  }
  fmt::print(out, "{:<20}  {:<20}  {:<12}  {:<20}  {}\n", "KEY_ID", "ACCOUNT", "PLAN", "CREATED",
             "STATUS");
  for (const auto& k : *keys) {
    bool suspended = false;
    for (const auto& a : accounts->accounts) {
      suspended |= a.name == k.account && a.suspended;
    }
    fmt::print(out, "{:<20}  {:<20}  {:<12}  {:<20}  {}\n", key_id_string(k.id), k.account, k.plan,
               utc_time(k.created_unix),
               k.revoked ? "revoked" : (suspended ? "suspended" : "active"));
  }
  return 0;
}

}  // namespace

std::span<const std::string_view> keys_options() { return kKeysOptions; }
std::span<const std::string_view> accounts_options() { return kAccountsOptions; }
std::string_view keys_help() { return kKeysHelp; }
std::string_view accounts_help() { return kAccountsHelp; }

std::string config_option(std::span<const std::string_view> args) {
  parsed p = parse(args, "");
  return p.error.empty() ? std::string(p.config) : std::string();
}

int run_keys_command(std::span<const std::string_view> args, const plan_map& plans,
                     std::string_view data_dir, std::FILE* out, std::FILE* err,
                     std::string_view config_path, key_backend* backend) {
  parsed p = parse(args, data_dir);
  if (auto done = answered_early(p, kKeysHelp, out, err)) {
    return *done;
  }
  if (p.positional.empty()) {
    return usage_error(err, "keys needs a subcommand: create, list or revoke", kKeysHelp);
  }
  key_store local(p.data_dir);
  key_backend& store = backend != nullptr ? *backend : local;
  const std::string_view cmd = p.positional[0];
  if (cmd == "create") {
    return keys_create(p, plans, store, out, err, config_path);
  }
  if (!p.account.empty() || !p.plan.empty()) {
    return usage_error(err, fmt::format("keys {} takes no --account or --plan", cmd), kKeysHelp);
  }
  if (cmd == "list") {
    return keys_list(p, store, local, backend == nullptr, out, err);
  }
  if (cmd == "revoke") {
    if (p.positional.size() != 2) {
      return usage_error(err, "keys revoke needs exactly one KEY_ID", kKeysHelp);
    }
    auto r = store.revoke(p.positional[1]);
    if (!r) {
      return report(err, r.error());
    }
    fmt::print(err, "tollgate: revoked {}\n", p.positional[1]);
    return 0;
  }
  return usage_error(err, fmt::format("unknown keys subcommand \"{}\"", cmd), kKeysHelp);
}

int run_accounts_command(std::span<const std::string_view> args, std::string_view data_dir,
                         std::FILE* out, std::FILE* err, key_backend* backend) {
  parsed p = parse(args, data_dir);
  if (auto done = answered_early(p, kAccountsHelp, out, err)) {
    return *done;
  }
  if (!p.account.empty() || !p.plan.empty()) {
    return usage_error(err, "accounts takes the account as a word, not --account", kAccountsHelp);
  }
  if (p.positional.empty()) {
    return usage_error(err, "accounts needs a subcommand: suspend or resume", kAccountsHelp);
  }
  const std::string_view cmd = p.positional[0];
  if (cmd != "suspend" && cmd != "resume") {
    return usage_error(err, fmt::format("unknown accounts subcommand \"{}\"", cmd), kAccountsHelp);
  }
  if (p.positional.size() != 2) {
    return usage_error(err, fmt::format("accounts {} needs exactly one ACCOUNT", cmd),
                       kAccountsHelp);
  }
  key_store local(p.data_dir);
  key_backend& store = backend != nullptr ? *backend : local;
  auto r = cmd == "suspend" ? store.suspend(p.positional[1]) : store.resume(p.positional[1]);
  if (!r) {
    return report(err, r.error());
  }
  fmt::print(err, "tollgate: account {} {}\n", p.positional[1],
             cmd == "suspend" ? "suspended" : "resumed");
  return 0;
}

}  // namespace tollgate::quota
