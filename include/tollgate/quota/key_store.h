// The key store: API keys and accounts in the data dir, and the `keys` / `accounts` CLI.
//
// Files (line-oriented text, rewritten whole through a temp file + fsync + rename, so a reader
// sees either the old or the new file, never a mix):
//   <data>/keys.txt      `key <id> <sha256-hex> <account> <plan> <created-unix> active|revoked`
//                        [`expires=<unix>`: a rotated key, refused from that second on]
//   <data>/accounts.txt  `account <name> active|suspended` [`customer=<id>`: its Stripe customer]
//   <data>/.keys.lock    flock()ed by writers so two CLIs (or a CLI and an admin call) serialise
// Secrets are shown once by create_key() and never stored: only their SHA-256 is.
//
// Thread-safe: every method may be called from any thread (a mutex serialises this process's
// writers; flock serialises processes). Not for the request path (the service builds its lookup
// table from load()).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/result.h"
#include "tollgate/quota/plan.h"

namespace tollgate::quota {

/// Why a store operation failed. `usage` errors are the caller's fault (unknown plan, account
/// or key, bad name): the CLI exits 2 on them and 1 on the rest (I/O).
struct store_error {
  bool usage = false;
  std::string message;
  bool exists = false;       ///< the thing to create is there already (admin API: 409)
  bool not_found = false;    ///< the named key or account is not there (admin API: 404)
  bool unsupported = false;  ///< this backend cannot make the change (admin API: 501)
};

using digest = std::array<uint8_t, 32>;

/// The checks every key store makes before it creates a key: a plain account name, a plain plan
/// name, and a plan the config defines (the error lists the configured ones). usage errors.
result<void, store_error> check_new_key(std::string_view account, std::string_view plan,
                                        const plan_map& plans);
/// The checks of a new account both stores make (the admin API's create_account): its name,
/// and its customer id when one is given, are plain names.
result<void, store_error> check_new_account(std::string_view account, std::string_view customer);

/// A stored key (no secret).
struct key_entry {
  uint64_t id = 0;  ///< shown as key_id_string(id): "key_" + 16 hex digits
  digest hash{};    ///< SHA-256 of the full secret
  std::string account;
  std::string plan;
  int64_t created_unix = 0;
  bool revoked = false;
  /// Unix second from which the key is refused (a rotated key's grace period); 0: never.
  int64_t expires_unix = 0;
};

struct account_entry {
  std::string name;
  bool suspended = false;
  /// The billing system's customer id (`cus_…`), empty when none: what a Stripe event names.
  std::string customer = {};
};

/// Everything the service needs to build its lookup table.
struct store_contents {
  std::vector<key_entry> keys;
  std::vector<account_entry> accounts;
};

struct created_key {
  std::string key_id;  ///< "key_…"
  std::string secret;  ///< "tg_live_" + 40 hex digits (160 bits from getrandom); shown once
};

/// The length of a key id's text: "key_" + 16 lowercase hex digits.
inline constexpr size_t key_id_length = 20;
/// Writes the key id's text into `buf` and returns it; allocates nothing (request paths).
std::string_view key_id_text(uint64_t id, std::span<char, key_id_length> buf);
/// key_id_text() as a string: "key_" + 16 lowercase hex digits.
std::string key_id_string(uint64_t id);
/// Parses key_id_string()'s format.
result<uint64_t, std::string> parse_key_id(std::string_view s);
/// SHA-256 (OpenSSL EVP, one-shot; allocates a context: use core_ledger's on the request path).
digest sha256(std::string_view data);

/// Where keys and accounts live: the data dir's files (key_store) or, in cluster mode, Redis
/// (cluster::redis_keys). The `keys` and `accounts` commands act on either.
class key_backend {
 public:
  virtual ~key_backend() = default;
  /// Creates a key for `account` (created active if new) on `plan`, which must be in `plans`.
  virtual result<created_key, store_error> create_key(std::string_view account,
                                                      std::string_view plan, const plan_map& plans,
                                                      int64_t now_unix) = 0;
  /// Every key ever created (revoked ones flagged), oldest first.
  virtual result<std::vector<key_entry>, store_error> list_keys() = 0;
  /// Marks a key revoked (kept for audit). Unknown id: usage error.
  virtual result<void, store_error> revoke(std::string_view key_id) = 0;
  /// Suspends / resumes an account. Unknown account: usage error.
  virtual result<void, store_error> suspend(std::string_view account) = 0;
  virtual result<void, store_error> resume(std::string_view account) = 0;
  /// Every key and account.
  virtual result<store_contents, store_error> load() = 0;

  // The admin API's edits (src/app/admin_api.cc). A backend that cannot make one answers with
  // `unsupported` set, and the caller says so (501) rather than pretending.
  /// Creates an account (active) with an optional customer id. An existing name: usage error
  /// with `exists` set.
  virtual result<void, store_error> create_account(std::string_view account,
                                                   std::string_view customer);
  /// Moves a key to another plan, which must be in `plans`; the next request is judged by it.
  virtual result<void, store_error> set_plan(std::string_view key_id, std::string_view plan,
                                             const plan_map& plans);
  /// Makes a new key for the account and plan of `key_id` and lets the old one live until
  /// `expires_unix` (then it is refused as if revoked). Refused for a revoked key.
  virtual result<created_key, store_error> rotate(std::string_view key_id, int64_t now_unix,
                                                  int64_t expires_unix);
};

class key_store final : public key_backend {
 public:
  /// The store lives in `data_dir` (created on first write).
  explicit key_store(std::string data_dir);

  result<created_key, store_error> create_key(std::string_view account, std::string_view plan,
                                              const plan_map& plans, int64_t now_unix) override;
  result<std::vector<key_entry>, store_error> list_keys() override;
  result<void, store_error> revoke(std::string_view key_id) override;
  result<void, store_error> suspend(std::string_view account) override;
  result<void, store_error> resume(std::string_view account) override;
  /// Reads both files (missing files read as empty). Malformed lines are errors naming the file
  /// and line.
  result<store_contents, store_error> load() override;
  result<void, store_error> create_account(std::string_view account,
                                           std::string_view customer) override;
  result<void, store_error> set_plan(std::string_view key_id, std::string_view plan,
                                     const plan_map& plans) override;
  result<created_key, store_error> rotate(std::string_view key_id, int64_t now_unix,
                                          int64_t expires_unix) override;

  const std::string& data_dir() const noexcept { return dir_; }
  std::string keys_path() const { return dir_ + "/keys.txt"; }
  std::string accounts_path() const { return dir_ + "/accounts.txt"; }

 private:
  result<void, store_error> set_suspended(std::string_view account, bool suspended);
  /// Under both locks (the process's and the data dir's): loads, applies `edit` (a
  /// result<void, store_error>(store_contents&)) and saves unless it failed.
  template <class F>
  result<void, store_error> edit_locked(F&& edit);
  result<void, store_error> save(const store_contents& c);
  /// A fresh key entry (id unique in `c`) and its secret, for create_key and rotate.
  result<created_key, store_error> mint(store_contents& c, key_entry& e);

  std::string dir_;
  std::mutex mu_;
};

/// `tollgate keys ...`: `args` are the words after "keys" (e.g. {"create","--account","a",
/// "--plan","free"}). Options take `--name VALUE` or `--name=VALUE`; an empty VALUE is bad usage.
/// `--data-dir DIR` anywhere overrides `data_dir`; `--config FILE` is accepted and otherwise
/// ignored (the app loads `plans` from config_option(args)). Prints to `out` (the key, listings)
/// and `err` (messages). Returns the exit code: 0 ok, 2 bad usage (message names the problem),
/// 1 other.
/// `config_path`: the --config file `plans` came from ("" when none), named when PLAN is unknown.
/// `backend` (cluster mode: Redis) replaces the data dir's store when given.
int run_keys_command(std::span<const std::string_view> args, const plan_map& plans,
                     std::string_view data_dir, std::FILE* out, std::FILE* err,
                     std::string_view config_path = {}, key_backend* backend = nullptr);
/// The options `keys` and `accounts` take (each listed by its help text), and the help texts.
std::span<const std::string_view> keys_options();
std::span<const std::string_view> accounts_options();
std::string_view keys_help();
std::string_view accounts_help();
/// The FILE of `--config FILE` or `--config=FILE` (the last one given) in keys/accounts
/// arguments, found by the same parser the two commands use, so the app loads exactly the file
/// they were given. Empty when there is none or the arguments are bad usage (the command then
/// reports the usage error).
std::string config_option(std::span<const std::string_view> args);
/// `tollgate accounts suspend|resume ACCOUNT`; same conventions as run_keys_command.
int run_accounts_command(std::span<const std::string_view> args, std::string_view data_dir,
                         std::FILE* out, std::FILE* err, key_backend* backend = nullptr);

}  // namespace tollgate::quota
