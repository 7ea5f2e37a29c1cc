#include "tollgate/config/config.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <type_traits>

#include "tollgate/common/names.h"

namespace tollgate::config {
namespace {

// Every key each table accepts; README's configuration reference lists the same (a test holds
// the two together). "plans.NAME" stands for each [plans.<name>] table.
struct section {
  std::string_view table;
  std::initializer_list<std::string_view> keys;
};
constexpr std::string_view plan_table = "plans.NAME";
const std::initializer_list<section> sections = {
    {"server",
     {"listen", "admin_listen", "threads", "data_dir", "max_connections", "header_timeout_ms",
      "idle_timeout_ms", "max_header_bytes", "max_body_bytes", "public_metrics"}},
    {"corpus",
     {"path", "on_bad_line", "shards", "search_cache_entries", "search_cache_entry_bytes",
      "search_slice_postings"}},
    {"mcp", {"allowed_origins", "sessions", "session_idle_secs", "max_sessions"}},
    {"quota", {"reconcile_ms", "fsync_ms", "journal_write", "demo_plan"}},
    {plan_table, {"rate_per_sec", "burst", "monthly_quota", "overage"}},
    {"fleet", {"role", "secret", "shards", "deadline_ms", "local"}},
    {"log", {"access", "sample"}},
    {"cluster", {"redis", "node", "password_env", "prefix", "lease_wait_ms"}},
    {"tls", {"listen", "cert", "key", "min_version", "ktls"}},
    {"admin", {"token_env", "token_file", "token_sha256", "token_name", "rotate_grace_secs"}},
    {"stripe",
     {"webhook_secret_env", "public_webhook", "tolerance_secs", "suspend_on", "meter_event_name",
      "api_key_env", "meter_url", "meter_retry_secs"}},
    {"oauth",
     {"enabled", "issuer", "access_token_secs", "refresh_token_secs", "registrations", "cimd_allow",
      "cimd_ca_file", "cimd_timeout_ms"}},
};

std::initializer_list<std::string_view> keys_of(std::string_view table) {
  for (const section& s : sections) {
    if (s.table == table) {
      return s.keys;
    }
  }
  return {};
}

// "plans.NAME" as the key is written in TOML: bare when NAME is a bare key, else quoted with
// TOML's escapes (so a name holding a space, a dot or a newline reads back as one word).
std::string plan_key(std::string_view name) {
  bool bare = !name.empty();
  for (char c : name) {
    bare = bare && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-');
  }
  if (bare) {
    return fmt::format("plans.{}", name);
  }
  std::string out = "plans.\"";
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\u{:04X}", u);
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

// Collects the first error with its file:line position; later checks are skipped once one fails.
class reader {
 public:
  explicit reader(std::string file) : file_(std::move(file)) {}

  bool failed() const { return error_.has_value(); }
  const std::string& error() const { return *error_; }

  void fail(const toml::node* node, std::string_view key, std::string_view what) {
    if (error_) {
      return;
    }
    uint32_t line = node != nullptr ? node->source().begin.line : 0;
    error_ = fmt::format("{}:{}: {}: {}", file_, line, key, what);
  }

  // Each table may only hold the keys listed; anything else is a typo worth failing on.
  void only_keys(const toml::table& t, std::string_view table,
                 std::initializer_list<std::string_view> allowed) {
    for (const auto& [k, v] : t) {
      bool ok = false;
      for (auto a : allowed) {
        ok = ok || a == k.str();
      }
      if (!ok) {
        if (table.empty()) {
          fail(&v, k.str(), "unknown table");
        } else {
          fail(&v, fmt::format("{}.{}", table, k.str()), "unknown key");
        }
      }
    }
  }

  // fail() naming `table.key`.
  void fail_key(const toml::node* node, std::string_view table, std::string_view key,
                std::string_view what) {
    fail(node, fmt::format("{}.{}", table, key), what);
  }

  // A number read as V (int64_t: an integer; double: an integer or a float) within [lo, hi].
  template <class V, class Out>
  void ranged(const toml::table& t, std::string_view table, std::string_view key, Out& out, V lo,
              V hi) {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      return;
    }
    constexpr bool integral = std::is_integral_v<V>;
    auto v = n->value<V>();
    if (!(integral ? n->is_integer() : n->is_integer() || n->is_floating_point()) || !v) {
      fail_key(n, table, key, integral ? "expected an integer" : "expected a number");
      return;
    }
    if (!(*v >= lo && *v <= hi)) {
      fail_key(n, table, key, fmt::format("must be between {} and {}", lo, hi));
      return;
    }
    out = static_cast<Out>(*v);
  }

  template <class Int>
  void integer(const toml::table& t, std::string_view table, std::string_view key, Int& out,
               int64_t lo, int64_t hi) {
    ranged<int64_t>(t, table, key, out, lo, hi);
  }

  void number(const toml::table& t, std::string_view table, std::string_view key, double& out,
              double lo, double hi) {
    ranged<double>(t, table, key, out, lo, hi);
  }

  // The node at `key` when it is there and `is_type`; one of another type fails with `what`.
  const toml::node* typed(const toml::table& t, std::string_view table, std::string_view key,
                          bool (toml::node::*is_type)() const noexcept, std::string_view what) {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      return nullptr;
    }
    if (!(n->*is_type)()) {
      fail_key(n, table, key, what);
      return nullptr;
    }
    return n;
  }

  /// `nonempty`: a path, where "" would silently mean something else (the current directory,
  /// the embedded sample).
  void string(const toml::table& t, std::string_view table, std::string_view key, std::string& out,
              bool nonempty = false) {
    const toml::node* n = typed(t, table, key, &toml::node::is_string, "expected a string");
    if (n == nullptr) {
      return;
    }
    std::string v = *n->value<std::string>();
    if (nonempty && v.empty()) {
      fail_key(n, table, key, "must not be empty");
      return;
    }
    out = std::move(v);
  }

  /// A string that must be one of two words: `out` = (value == first).
  void either(const toml::table& t, std::string_view table, std::string_view key,
              std::string_view first, std::string_view second, bool& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      return;
    }
    std::string v;
    string(t, table, key, v);
    if (v == first || v == second) {
      out = v == first;
    } else if (!failed()) {
      fail_key(n, table, key, fmt::format("must be \"{}\" or \"{}\"", first, second));
    }
  }

  void boolean(const toml::table& t, std::string_view table, std::string_view key, bool& out) {
    const toml::node* n = typed(t, table, key, &toml::node::is_boolean, "expected true or false");
    if (n != nullptr) {
      out = *n->value<bool>();
    }
  }

  void string_list(const toml::table& t, std::string_view table, std::string_view key,
                   std::vector<std::string>& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      return;
    }
    const toml::array* a = n->as_array();
    if (a == nullptr) {
      fail_key(n, table, key, "expected an array of strings");
      return;
    }
    out.clear();
    for (const auto& e : *a) {
      if (!e.is_string()) {
        fail_key(&e, table, key, "expected an array of strings");
        return;
      }
      out.push_back(*e.value<std::string>());
    }
  }

  void host_port_value(const toml::table& t, std::string_view table, std::string_view key,
                       host_port& out) {
    std::string s;
    string(t, table, key, s);
    if (failed() || t.get(key) == nullptr) {
      return;
    }
    auto ep = parse_host_port(s);
    if (!ep) {
      fail_key(t.get(key), table, key, ep.error());
      return;
    }
    out = *ep;
  }

  const toml::table* table(const toml::table& root, std::string_view name) {
    const toml::node* n = root.get(name);
    if (n == nullptr) {
      return nullptr;
    }
    if (!n->is_table()) {
      fail(n, name, "expected a table");
      return nullptr;
    }
    return n->as_table();
  }

 private:
  std::string file_;
  std::optional<std::string> error_;
};

}  // namespace

settings defaults() {
  settings s;
  s.plans["free"] = plan{10, 20, 1000, false};
  s.plans["pro"] = plan{100, 200, 1000000, true};
  return s;
}

result<host_port, std::string> parse_host_port(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return unexpected(std::string("expected HOST:PORT, e.g. 127.0.0.1:8080"));
  }
  host_port ep;
  ep.host = s.substr(0, colon);
  if (ep.host == "localhost") {
    ep.host = "127.0.0.1";
  }
  in_addr addr{};
  if (inet_pton(AF_INET, ep.host.c_str(), &addr) != 1) {
    return unexpected(fmt::format("'{}' is not an IPv4 address", ep.host));
  }
  std::string_view port = std::string_view(s).substr(colon + 1);
  unsigned v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (ec != std::errc() || p != port.data() + port.size() || port.empty() || v > 65535) {
    return unexpected(fmt::format("'{}' is not a port number (0-65535)", port));
  }
  ep.port = static_cast<uint16_t>(v);
  return ep;
}

bool valid_plan_name(std::string_view name) noexcept { return is_plain_name(name); }

namespace {

// load_file's steps: one per table, each reading its keys into `s` (only_keys has checked
// the table's keys).

void read_server(reader& r, const toml::table& t, settings& s) {
  r.host_port_value(t, "server", "listen", s.listen);
  if (t.get("admin_listen") != nullptr) {
    host_port ep;
    r.host_port_value(t, "server", "admin_listen", ep);
    s.admin_listen = ep;
  }
  r.integer(t, "server", "threads", s.threads, 0, 1024);
  r.string(t, "server", "data_dir", s.data_dir, true);
  r.integer(t, "server", "max_connections", s.max_connections, 1, 1000000);
  r.integer(t, "server", "header_timeout_ms", s.header_timeout_ms, 100, 3600000);
  r.integer(t, "server", "idle_timeout_ms", s.idle_timeout_ms, 100, 86400000);
  r.integer(t, "server", "max_header_bytes", s.max_header_bytes, 1024, 1 << 20);
  r.integer(t, "server", "max_body_bytes", s.max_body_bytes, 1024, 64 << 20);
  r.boolean(t, "server", "public_metrics", s.public_metrics);
}

void read_corpus(reader& r, const toml::table& t, settings& s) {
  r.string(t, "corpus", "path", s.corpus_path, true);
  r.either(t, "corpus", "on_bad_line", "skip", "fail", s.skip_bad_lines);
  r.integer(t, "corpus", "shards", s.index_shards, 1, 256);
  r.integer(t, "corpus", "search_cache_entries", s.search_cache_entries, 0, 1 << 20);
  r.integer(t, "corpus", "search_cache_entry_bytes", s.search_cache_entry_bytes, 1024, 16 << 20);
  r.integer(t, "corpus", "search_slice_postings", s.search_slice_postings, 0, 1 << 30);
  // Each core allocates and zeroes entries x entry_bytes at start-up: the maxima of the two
  // keys together would ask for 16 TiB per core.
  const uint64_t cache_bytes =
      uint64_t{s.search_cache_entries} * uint64_t{s.search_cache_entry_bytes};
  if (!r.failed() && cache_bytes > search_cache_max_bytes) {
    const toml::node* n = t.get("search_cache_entries");
    r.fail(n != nullptr ? n : t.get("search_cache_entry_bytes"), "corpus.search_cache_entries",
           fmt::format("search_cache_entries x search_cache_entry_bytes must be at most {} "
                       "bytes (1 GiB) per core, which every core allocates at start-up (got "
                       "{} x {} = {})",
                       search_cache_max_bytes, s.search_cache_entries, s.search_cache_entry_bytes,
                       cache_bytes));
  }
}

void read_mcp(reader& r, const toml::table& t, settings& s) {
  r.string_list(t, "mcp", "allowed_origins", s.allowed_origins);
  r.boolean(t, "mcp", "sessions", s.sessions);
  r.integer(t, "mcp", "session_idle_secs", s.session_idle_secs, 1, 86400 * 7);
  r.integer(t, "mcp", "max_sessions", s.max_sessions, 1, 100000000);
}

void read_quota(reader& r, const toml::table& t, settings& s) {
  r.integer(t, "quota", "reconcile_ms", s.reconcile_ms, 10, 600000);
  r.integer(t, "quota", "fsync_ms", s.fsync_ms, 1, 600000);
  r.either(t, "quota", "journal_write", "inline", "ring", s.journal_inline);
  r.string(t, "quota", "demo_plan", s.demo_plan);
}

void read_plans(reader& r, const toml::table& t, settings& s) {
  for (const auto& [name, node] : t) {
    std::string tname = plan_key(name.str());
    if (!valid_plan_name(name.str())) {
      r.fail(&node, tname,
             "a plan name must be 1-64 characters of letters, digits, '.', '_' or '-'");
      break;
    }
    const toml::table* pt = node.as_table();
    if (pt == nullptr) {
      r.fail(&node, tname, "expected a table with rate_per_sec, burst, monthly_quota, overage");
      break;
    }
    plan p;
    if (auto it = s.plans.find(std::string(name.str())); it != s.plans.end()) {
      p = it->second;
    }
    r.only_keys(*pt, tname, keys_of(plan_table));
    r.number(*pt, tname, "rate_per_sec", p.rate_per_sec, plan_min_rate_per_sec,
             plan_max_rate_per_sec);
    r.integer(*pt, tname, "burst", p.burst, 1, plan_max_burst);
    r.integer(*pt, tname, "monthly_quota", p.monthly_quota, 1, plan_max_monthly_quota);
    // The quota arithmetic's bound on burst x emission interval (quota::validate_plan).
    if (!r.failed() && static_cast<double>(p.burst) * (1e9 / p.rate_per_sec) > plan_max_burst_ns) {
      const toml::node* n = pt->get("burst");
      r.fail(n != nullptr ? n : pt->get("rate_per_sec"), tname + ".burst",
             fmt::format("burst / rate_per_sec must be at most {} seconds (~31 years) (got {} "
                         "/ {})",
                         plan_max_burst_ns / 1e9, p.burst, p.rate_per_sec));
    }
    bool stop = !p.overage_bill;
    r.either(*pt, tname, "overage", "stop", "bill", stop);
    p.overage_bill = !stop;
    s.plans[std::string(name.str())] = p;
  }
}

void read_fleet(reader& r, const toml::table& t, settings& s) {
  bool gateway = !s.role_shard;
  r.either(t, "fleet", "role", "gateway", "shard", gateway);
  s.role_shard = !gateway;
  r.string(t, "fleet", "secret", s.shard_secret);
  std::vector<std::string> shards;
  r.string_list(t, "fleet", "shards", shards);
  for (const auto& sh : shards) {
    auto ep = parse_host_port(sh);
    if (!ep) {
      r.fail(t.get("shards"), "fleet.shards", fmt::format("'{}': {}", sh, ep.error()));
      break;
    }
    // A shard listed twice would be asked twice and its stories merged in twice.
    std::string_view problem;
    if (ep->port == 0) {
      problem = "port 0 names no shard";
    }
    for (const host_port& seen : s.remote_shards) {
      if (seen.host == ep->host && seen.port == ep->port) {
        problem = "listed twice";
      }
    }
    if (!problem.empty()) {
      r.fail(t.get("shards"), "fleet.shards", fmt::format("'{}': {}", sh, problem));
      break;
    }
    s.remote_shards.push_back(*ep);
  }
  r.integer(t, "fleet", "deadline_ms", s.shard_deadline_ms, 1, 60000);
  r.boolean(t, "fleet", "local", s.fleet_local);
}

void read_log(reader& r, const toml::table& t, settings& s) {
  r.string(t, "log", "access", s.access_log, true);
  r.number(t, "log", "sample", s.log_sample, 0.0, 1.0);
}

// [tls]: listen, cert and key together (the pair itself is loaded and checked by the server,
// which names the file at fault).
void read_tls(reader& r, const toml::table& t, settings& s) {
  for (const char* k : {"listen", "cert", "key"}) {
    if (t.get(k) == nullptr && !r.failed()) {
      r.fail(&t, fmt::format("tls.{}", k), "required in [tls] (listen, cert and key go together)");
    }
  }
  host_port ep;
  r.host_port_value(t, "tls", "listen", ep);
  s.tls_listen = ep;
  r.string(t, "tls", "cert", s.tls_cert, true);
  r.string(t, "tls", "key", s.tls_key, true);
  bool v12 = true;
  r.either(t, "tls", "min_version", "1.2", "1.3", v12);
  s.tls_min_version = v12 ? "1.2" : "1.3";
  r.boolean(t, "tls", "ktls", s.tls_ktls);
}

void read_cluster(reader& r, const toml::table& t, settings& s) {
  if (t.get("redis") == nullptr) {
    r.fail(&t, "cluster.redis", "required: \"HOST:PORT\" or \"unix:PATH\" of the Redis server");
  }
  r.string(t, "cluster", "redis", s.cluster_redis);
  if (auto a = check_redis_address(s.cluster_redis); !a && !r.failed()) {
    r.fail(t.get("redis"), "cluster.redis", a.error());
  }
  r.string(t, "cluster", "node", s.cluster_node);
  if (t.get("node") != nullptr && !r.failed()) {
    bool ok = !s.cluster_node.empty() && s.cluster_node.size() <= 64;
    for (char c : s.cluster_node) {
      ok = ok && c > ' ' && c != 0x7f && c != '"' && c != '\\';
    }
    if (!ok) {
      r.fail(t.get("node"), "cluster.node",
             "1-64 printable characters without spaces, quotes or backslashes");
    }
  }
  r.string(t, "cluster", "password_env", s.cluster_password_env);
  if (t.get("password_env") != nullptr && s.cluster_password_env.empty() && !r.failed()) {
    r.fail(t.get("password_env"), "cluster.password_env", "names no environment variable");
  }
  r.integer(t, "cluster", "lease_wait_ms", s.cluster_lease_wait_ms, 1, 10000);
  r.string(t, "cluster", "prefix", s.cluster_prefix);
  if (t.get("prefix") != nullptr && !r.failed()) {
    bool ok = s.cluster_prefix.size() <= 64;
    for (char c : s.cluster_prefix) {
      ok = ok && c > ' ' && c != 0x7f && c != '{' && c != '}';
    }
    if (!ok) {
      r.fail(t.get("prefix"), "cluster.prefix",
             "at most 64 printable characters without spaces or braces (braces are hash tags)");
    }
  }
  s.cluster = true;
}

// [admin]: where the admin API's bearer token comes from (one source) and its audit name.
void read_admin(reader& r, const toml::table& t, settings& s) {
  r.string(t, "admin", "token_env", s.admin_token_env);
  r.string(t, "admin", "token_file", s.admin_token_file, true);
  r.string(t, "admin", "token_sha256", s.admin_token_sha256);
  int sources = 0;
  for (std::string_view k : {"token_env", "token_file", "token_sha256"}) {
    sources += t.get(k) != nullptr ? 1 : 0;
  }
  if (sources > 1 && !r.failed()) {
    r.fail(&t, "admin", "give one of token_env, token_file and token_sha256, not several");
  }
  if (t.get("token_env") != nullptr && s.admin_token_env.empty() && !r.failed()) {
    r.fail(t.get("token_env"), "admin.token_env", "names no environment variable");
  }
  if (t.get("token_sha256") != nullptr && !r.failed()) {
    bool hex = s.admin_token_sha256.size() == 64;
    for (char c : s.admin_token_sha256) {
      hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    }
    if (!hex) {
      r.fail(t.get("token_sha256"), "admin.token_sha256",
             "64 lowercase hex digits: the SHA-256 of the token (sha256sum of it, no newline)");
    }
  }
  r.string(t, "admin", "token_name", s.admin_token_name, true);
  if (t.get("token_name") != nullptr && !r.failed() && !valid_plan_name(s.admin_token_name)) {
    r.fail(t.get("token_name"), "admin.token_name", "1-64 letters, digits, '.', '_' or '-'");
  }
  r.integer(t, "admin", "rotate_grace_secs", s.admin_rotate_grace_secs, 0, 30 * 86400);
}

// [stripe]: the webhook's endpoint secret, where it is served, and what suspends.
void read_stripe(reader& r, const toml::table& t, settings& s) {
  r.string(t, "stripe", "webhook_secret_env", s.stripe_secret_env);
  if (t.get("webhook_secret_env") != nullptr && s.stripe_secret_env.empty() && !r.failed()) {
    r.fail(t.get("webhook_secret_env"), "stripe.webhook_secret_env",
           "names no environment variable");
  }
  r.boolean(t, "stripe", "public_webhook", s.stripe_public_webhook);
  r.integer(t, "stripe", "tolerance_secs", s.stripe_tolerance_secs, 1, 3600);
  r.string_list(t, "stripe", "suspend_on", s.stripe_suspend_on);
  r.string(t, "stripe", "meter_event_name", s.stripe_meter_event);
  r.string(t, "stripe", "api_key_env", s.stripe_api_key_env);
  r.string(t, "stripe", "meter_url", s.stripe_meter_url, true);
  r.integer(t, "stripe", "meter_retry_secs", s.stripe_meter_retry_secs, 1, 86400);
  if (!r.failed() && !s.stripe_meter_url.starts_with("https://") &&
      !s.stripe_meter_url.starts_with("http://")) {
    r.fail(t.get("meter_url"), "stripe.meter_url", "must be an http:// or https:// URL");
  }
  if (!r.failed() && !s.stripe_meter_event.empty() && s.stripe_api_key_env.empty()) {
    r.fail(t.get("meter_event_name"), "stripe.meter_event_name",
           "needs stripe.api_key_env (the variable holding the secret API key the push sends)");
  }
  for (const std::string& st : s.stripe_suspend_on) {
    if (st != "canceled" && st != "unpaid" && st != "past_due" && st != "incomplete_expired" &&
        st != "incomplete" && st != "paused" && !r.failed()) {
      r.fail(t.get("suspend_on"), "stripe.suspend_on",
             fmt::format("'{}' is not a subscription status that can suspend (canceled, unpaid, "
                         "past_due, incomplete, incomplete_expired, paused)",
                         st));
    }
  }
}

// [oauth]: whether tollgate is its own authorization server, its public URL, token lifetimes.
void read_oauth(reader& r, const toml::table& t, settings& s) {
  r.boolean(t, "oauth", "enabled", s.oauth_enabled);
  r.string(t, "oauth", "issuer", s.oauth_issuer);
  if (t.get("issuer") != nullptr && !r.failed()) {
    const std::string& u = s.oauth_issuer;
    const bool https = u.rfind("https://", 0) == 0;
    const bool http = u.rfind("http://", 0) == 0;
    bool ok = (https || http) && u.size() <= 200 && u.back() != '/';
    const std::string_view rest = std::string_view(u).substr(https ? 8 : 7);
    ok = ok && !rest.empty() && rest.find_first_of("?#") == std::string_view::npos;
    for (char c : u) {
      ok = ok && c > ' ' && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>';
    }
    if (!ok) {
      r.fail(t.get("issuer"), "oauth.issuer",
             "the public base URL, https://HOST[:PORT][/PATH] without a trailing slash, query "
             "or fragment (http:// only for a loopback host)");
    } else if (http) {
      const std::string_view host = rest.substr(0, rest.find_first_of(":/"));
      if (!is_loopback_host(host)) {
        r.fail(t.get("issuer"), "oauth.issuer",
               "http:// is allowed only for a loopback host (OAuth 2.1); use https://");
      }
    }
  }
  r.integer(t, "oauth", "access_token_secs", s.oauth_access_token_secs, 1, 86400);
  r.integer(t, "oauth", "refresh_token_secs", s.oauth_refresh_token_secs, 60, 365 * 86400);
  r.string_list(t, "oauth", "registrations", s.oauth_registrations);
  for (const std::string& g : s.oauth_registrations) {
    if (g != "dynamic" && g != "metadata_document" && !r.failed()) {
      r.fail(
          t.get("registrations"), "oauth.registrations",
          fmt::format("'{}' is not a registration kind (\"dynamic\", \"metadata_document\")", g));
    }
  }
  if (s.oauth_registrations.empty() && !r.failed()) {
    r.fail(t.get("registrations"), "oauth.registrations",
           "offer at least one: \"dynamic\", \"metadata_document\"");
  }
  r.string_list(t, "oauth", "cimd_allow", s.oauth_cimd_allow);
  for (const std::string& h : s.oauth_cimd_allow) {
    bool ok = !h.empty() && h.size() <= 253;
    for (char c : h) {
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == ':');
    }
    if (!ok && !r.failed()) {
      r.fail(t.get("cimd_allow"), "oauth.cimd_allow",
             fmt::format("'{}' is not a host name or address", h));
    }
  }
  r.string(t, "oauth", "cimd_ca_file", s.oauth_cimd_ca_file, true);
  if (t.get("cimd_ca_file") != nullptr && !r.failed() &&
      ::access(s.oauth_cimd_ca_file.c_str(), R_OK) != 0) {
    r.fail(t.get("cimd_ca_file"), "oauth.cimd_ca_file",
           fmt::format("'{}' cannot be read: {}", s.oauth_cimd_ca_file, std::strerror(errno)));
  }
  r.integer(t, "oauth", "cimd_timeout_ms", s.oauth_cimd_timeout_ms, 100, 60000);
}

// The file's text as a TOML table; a directory, a missing file or a syntax error is an error.
result<toml::table, config_error> parse_toml(const std::string& path) {
  // toml++ reads a directory as an empty file: the server would start (or a reload would go on)
  // on the defaults alone, silently without the file's plans.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return unexpected(config_error{fmt::format("{}: {}", path, std::strerror(errno))});
  }
  if (S_ISDIR(st.st_mode)) {
    return unexpected(config_error{fmt::format("{}: not a regular file (a directory)", path)});
  }
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return unexpected(
        config_error{fmt::format("{}:{}: {}", path, e.source().begin.line, e.description())});
  }
}

}  // namespace

result<settings, config_error> load_file(const std::string& path, settings s) {
  auto parsed = parse_toml(path);
  if (!parsed) {
    return unexpected(parsed.error());
  }
  const toml::table& root = *parsed;
  s.config_path = path;
  reader r(path);
  r.only_keys(root, "",
              {"server", "corpus", "mcp", "quota", "plans", "fleet", "log", "cluster", "tls",
               "admin", "stripe", "oauth"});
  struct step {
    std::string_view table;
    void (*read)(reader&, const toml::table&, settings&);
  };
  for (const step& st :
       {step{"server", read_server}, step{"corpus", read_corpus}, step{"mcp", read_mcp},
        step{"quota", read_quota}, step{"plans", read_plans}, step{"fleet", read_fleet},
        step{"log", read_log}, step{"cluster", read_cluster}, step{"tls", read_tls},
        step{"admin", read_admin}, step{"stripe", read_stripe}, step{"oauth", read_oauth}}) {
    if (const toml::table* t = r.table(root, st.table)) {
      if (st.table != "plans") {  // [plans] holds one table per plan name, checked by read_plans
        r.only_keys(*t, st.table, keys_of(st.table));
      }
      st.read(r, *t, s);
    }
  }
  if (!r.failed() && s.plans.find(s.demo_plan) == s.plans.end()) {
    const toml::table* q = root.get("quota") != nullptr ? root.get("quota")->as_table() : nullptr;
    const toml::node* at =
        q != nullptr && q->get("demo_plan") != nullptr ? q->get("demo_plan") : root.get("quota");
    r.fail(at, "quota.demo_plan", fmt::format("no plan named '{}'", s.demo_plan));
  }
  if (!r.failed() && s.oauth_enabled && s.oauth_issuer.empty() &&
      !is_loopback_host(s.listen.host)) {
    r.fail(root.get("oauth"), "oauth.issuer",
           fmt::format("required when the listener ({}) is not loopback: the public base URL "
                       "clients reach this server at (https://...), which a server behind a "
                       "proxy cannot guess",
                       s.listen.host));
  }
  if (r.failed()) {
    return unexpected(config_error{r.error()});
  }
  return s;
}

bool is_loopback_host(std::string_view host) noexcept {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

result<void, std::string> check_redis_address(std::string_view a) {
  if (a.substr(0, 5) == "unix:") {
    if (a.size() < 7 || a[5] != '/') {
      return unexpected(fmt::format("'{}': a unix socket is written unix:/ABSOLUTE/PATH", a));
    }
    return {};
  }
  const size_t colon = a.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return unexpected(fmt::format("'{}': expected \"HOST:PORT\" or \"unix:PATH\"", a));
  }
  for (char c : a.substr(0, colon)) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '-')) {
      return unexpected(fmt::format("'{}': the host is a name or an IPv4 address", a));
    }
  }
  const std::string_view port = a.substr(colon + 1);
  unsigned p = 0;
  auto r = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || r.ec != std::errc() || r.ptr != port.data() + port.size() || p < 1 ||
      p > 65535) {
    return unexpected(fmt::format("'{}': the port must be 1-65535", a));
  }
  return {};
}

std::vector<std::string> known_keys() {
  std::vector<std::string> out;
  for (const section& sec : sections) {
    for (std::string_view k : sec.keys) {
      out.push_back(fmt::format("{}.{}", sec.table, k));
    }
  }
  return out;
}

}  // namespace tollgate::config
