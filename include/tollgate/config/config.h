// tollgate's settings: defaults, the TOML config file (toml++), and command-line overrides.
//
// Loading is start-up only (it allocates and may throw internally); every problem is reported
// as a config_error naming the file, line and key, and the CLI exits 2 with that message.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/result.h"

namespace tollgate::config {

/// A host and port: an address the server listens on or a gateway dials.
struct host_port {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
};

/// The range of each [plans.NAME] value. The quota module checks plans against the same figures
/// (quota/plan.h: min_rate_per_sec .. max_burst_ns); config does not depend on quota, so they are
/// mirrored here and config_test holds the two together. Checking them while reading the file
/// lets a bad value be reported with its file, line and key.
inline constexpr double plan_min_rate_per_sec = 0.001;
inline constexpr double plan_max_rate_per_sec = 1e9;
inline constexpr int64_t plan_max_burst = 1000000000;
inline constexpr int64_t plan_max_monthly_quota = int64_t{1} << 40;
/// burst x (1e9 / rate_per_sec) in ns: the quota arithmetic's limit (~31 years).
inline constexpr double plan_max_burst_ns = 1e18;

/// The per-core cap on search_cache_entries x search_cache_entry_bytes: every core allocates
/// (and zeroes) that many bytes up front, so a config that asks for more is refused while it is
/// read instead of the process dying of memory exhaustion at start-up.
inline constexpr uint64_t search_cache_max_bytes = uint64_t{1} << 30;

struct plan {
  double rate_per_sec = 10;
  int64_t burst = 20;
  int64_t monthly_quota = 1000;
  bool overage_bill = false;  ///< "bill" (true) or "stop" (false)
};

struct settings {
  std::string config_path;  ///< empty when no file was given

  // [server]
  host_port listen;
  std::optional<host_port> admin_listen;
  int threads = 0;  ///< 0 = one per online core
  std::string data_dir = "./tollgate-data";
  /// --accept-usage-loss (command line only): start although the usage snapshot is missing or
  /// empty after journals were compacted into it (usage counted there is lost).
  bool accept_usage_loss = false;
  uint32_t max_connections = 10000;  ///< per core
  uint32_t header_timeout_ms = 10000;
  uint32_t idle_timeout_ms = 60000;
  uint32_t max_header_bytes = 16 * 1024;
  uint32_t max_body_bytes = 1024 * 1024;
  /// /metrics on the public listener when there is no admin listener (false: 404 there).
  bool public_metrics = true;

  // [corpus]
  std::string corpus_path;  ///< JSON Lines; empty = the embedded sample
  bool skip_bad_lines = true;
  uint32_t index_shards = 4;
  /// Per-core cache of rendered search_stories answers (the corpus never changes while
  /// serving): entries per core (0 turns it off) and the bytes of one entry (key + payload).
  uint32_t search_cache_entries = 64;
  uint32_t search_cache_entry_bytes = 16384;
  /// search_stories over MCP runs in slices of about this many postings of work, one per loop
  /// pass, so a long search never holds its core (0: each search runs whole).
  uint32_t search_slice_postings = 16384;

  // [mcp]
  std::vector<std::string> allowed_origins;  ///< in addition to loopback origins
  bool sessions = false;
  uint32_t session_idle_secs = 1800;
  /// Live sessions at most; at the cap a new one ends the least recently used.
  uint32_t max_sessions = 100000;

  // [quota]
  uint32_t reconcile_ms = 1000;
  uint32_t fsync_ms = 1000;
  /// How each pass's usage-journal batch is written: write(2) on the core's thread ("inline",
  /// true) or an io_uring write ("ring"); see net::server_options::journal_inline.
  bool journal_inline = true;
  std::string demo_plan = "free";

  // [plans.NAME]
  std::map<std::string, plan> plans;

  // [fleet]
  bool role_shard = false;               ///< serve this node's corpus to gateways only
  std::string shard_secret;              ///< shared by a gateway and its shard nodes
  std::vector<host_port> remote_shards;  ///< gateway: the shard nodes it fans out to
  uint32_t shard_deadline_ms = 250;      ///< gateway: per-query deadline for remote answers
  bool fleet_local = true;               ///< gateway: also serve its own corpus in-process

  // [log]
  std::string access_log;   ///< JSON Lines access log: a path, "-" for stderr, empty = off
  double log_sample = 1.0;  ///< share of successful requests logged (errors always are)

  // [cluster] (its presence turns cluster mode on: keys, accounts and usage live in Redis)
  bool cluster = false;
  std::string cluster_redis;         ///< "HOST:PORT" or "unix:PATH"
  std::string cluster_node;          ///< unique node name; empty: hostname:port of the listener
  std::string cluster_password_env;  ///< AUTH password read from this environment variable
  std::string cluster_prefix = "tollgate:";  ///< namespace of every Redis key
  /// Longest a billed request waits (parked, its core serving others) for quota units its node
  /// asked Redis for; then the outage rules answer it.
  int64_t cluster_lease_wait_ms = 50;

  // [tls] (its presence, or --tls-listen, adds the HTTPS listener; see net/tls.h)
  std::optional<host_port> tls_listen;
  std::string tls_cert;                 ///< PEM chain
  std::string tls_key;                  ///< PEM private key
  std::string tls_min_version = "1.2";  ///< "1.2" or "1.3"
  bool tls_ktls = true;  ///< hand TLS 1.3 sessions' transmit side to the kernel where it can
  // [admin] (the admin API on admin_listen; no token source: its routes answer 403)
  std::string admin_token_env;     ///< the bearer token is this environment variable's value
  std::string admin_token_file;    ///< or this file's first line
  std::string admin_token_sha256;  ///< or the token's SHA-256 (hex), so the config holds no secret
  std::string admin_token_name = "admin";   ///< who the audit log names for this token
  int64_t admin_rotate_grace_secs = 86400;  ///< a rotated key stays valid this long (default)

  // [stripe] (POST /admin/webhooks/stripe)
  std::string stripe_secret_env;  ///< the endpoint's signing secret (whsec_…) comes from here
  bool stripe_public_webhook = false;   ///< also serve the webhook route on the public listener
  int64_t stripe_tolerance_secs = 300;  ///< a signature's timestamp may be this far off
  /// Subscription statuses that suspend the account (customer.subscription.updated).
  std::vector<std::string> stripe_suspend_on = {"canceled", "unpaid", "past_due"};
  /// The overage push (app/stripe_meter.h): each closed month's billed overage per account, as
  /// meter events named this (empty: no push) ...
  std::string stripe_meter_event;
  /// ... sent with the secret API key in this variable ...
  std::string stripe_api_key_env;
  /// ... to this URL (the API's; a test points it at a local stand-in) ...
  std::string stripe_meter_url = "https://api.stripe.com/v1/billing/meter_events";
  /// ... retrying what failed this often.
  int64_t stripe_meter_retry_secs = 300;

  // [oauth] (tollgate as its own OAuth 2.1 authorization server; README "Connect claude.ai,
  // ChatGPT or any OAuth client")
  bool oauth_enabled = false;
  /// The public base URL ("https://mcp.example.com", no trailing slash): the issuer, and the
  /// base of every endpoint and of the resource `<issuer>/mcp`. Empty: derived from the request's
  /// Host on a loopback listener (required otherwise; serve and `config check` say so).
  std::string oauth_issuer;
  int64_t oauth_access_token_secs = 3600;
  int64_t oauth_refresh_token_secs = 30 * 86400;
  /// How clients may register: "dynamic" (RFC 7591 POST /register) and "metadata_document"
  /// (a client_id that is an https URL of a client ID metadata document, fetched by tollgate).
  std::vector<std::string> oauth_registrations = {"dynamic", "metadata_document"};
  /// Hosts (names or addresses) a client ID metadata document may be fetched from although
  /// they resolve to a private, link-local, loopback or other non-public address; a loopback
  /// host listed here may also be fetched over http:// (tests).
  std::vector<std::string> oauth_cimd_allow;
  /// A PEM file of the CAs trusted for the documents' https fetch (empty: the system's).
  std::string oauth_cimd_ca_file;
  /// The whole fetch of one document, connect to last byte.
  int64_t oauth_cimd_timeout_ms = 5000;
};

/// Whether `host` names the loopback interface ("127.x.y.z", "localhost", "::1").
bool is_loopback_host(std::string_view host) noexcept;

struct config_error {
  std::string message;  ///< "FILE:LINE: key: what is wrong"
};

/// Settings with every default filled in, including the built-in plans `free` and `pro`.
settings defaults();

/// Reads and validates a TOML file on top of `base`. Unknown tables or keys are errors (a typo
/// must not silently fall back to a default), and so is a path naming a directory.
result<settings, config_error> load_file(const std::string& path, settings base);

/// Every key a config file may set, as "table.key" ("plans.NAME.key" for each plan's table).
std::vector<std::string> known_keys();

/// True for a usable plan name: 1-64 characters of [A-Za-z0-9._-], common/names.h's rule
/// (quota::valid_name is the same function). Plan names are written
/// into keys.txt as words, so a space or a newline must never get that far.
bool valid_plan_name(std::string_view name) noexcept;

/// Checks a [cluster] redis address: "HOST:PORT" (PORT 1-65535, HOST a name or IPv4 address) or
/// "unix:PATH" (an absolute path). Returns the reason when it is not one.
result<void, std::string> check_redis_address(std::string_view s);

/// Parses "HOST:PORT" (PORT 0–65535; HOST an IPv4 address or "localhost").
result<host_port, std::string> parse_host_port(const std::string& s);

}  // namespace tollgate::config
