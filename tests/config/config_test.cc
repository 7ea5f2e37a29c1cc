#include "tollgate/config/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "tollgate/quota/plan.h"

namespace tollgate::config {
namespace {

// Writes `text` to a fresh temp file and removes it at scope end.
class temp_toml {
 public:
  explicit temp_toml(const std::string& text) {
    char tmpl[] = "/tmp/tollgate_cfg_XXXXXX";
    int fd = mkstemp(tmpl);
    path_ = tmpl;
    std::ofstream(path_) << text;
    close(fd);
  }
  ~temp_toml() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(config_test, reads_server_plans_and_fleet) {
  // Verifies every section is read into settings and plans merge with the built-ins.
  temp_toml f(R"(
[server]
listen = "127.0.0.1:9000"
threads = 2
[plans.team]
rate_per_sec = 5.5
burst = 7
monthly_quota = 100
overage = "bill"
[mcp]
allowed_origins = ["https://app.example"]
[fleet]
shards = ["127.0.0.1:9101", "127.0.0.1:9102"]
secret = "s3cret"
deadline_ms = 120
local = false
)");
  auto s = load_file(f.path(), defaults());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->listen.port, 9000);
  EXPECT_EQ(s->threads, 2);
  ASSERT_EQ(s->plans.count("team"), 1u);
  EXPECT_DOUBLE_EQ(s->plans["team"].rate_per_sec, 5.5);
  EXPECT_TRUE(s->plans["team"].overage_bill);
  EXPECT_EQ(s->plans.count("free"), 1u);
  EXPECT_EQ(s->allowed_origins.size(), 1u);
  ASSERT_EQ(s->remote_shards.size(), 2u);
  EXPECT_EQ(s->remote_shards[1].port, 9102);
  EXPECT_EQ(s->shard_secret, "s3cret");
  EXPECT_EQ(s->shard_deadline_ms, 120u);
  EXPECT_FALSE(s->fleet_local);
  EXPECT_FALSE(s->role_shard);
}

TEST(config_test, search_answer_cache_can_be_sized_and_turned_off) {
  // Verifies the [corpus] cache keys: on by default, 0 entries turns it off, and an entry size
  // below 1 KiB is refused with the key named.
  EXPECT_GT(defaults().search_cache_entries, 0u);
  temp_toml off(R"(
[corpus]
search_cache_entries = 0
search_cache_entry_bytes = 8192
)");
  auto s = load_file(off.path(), defaults());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->search_cache_entries, 0u);
  EXPECT_EQ(s->search_cache_entry_bytes, 8192u);
  temp_toml tiny(R"(
[corpus]
search_cache_entry_bytes = 100
)");
  auto bad = load_file(tiny.path(), defaults());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("corpus.search_cache_entry_bytes"), std::string::npos)
      << bad.error().message;
}

TEST(config_test, journal_write_is_inline_by_default_and_can_use_the_ring) {
  // Verifies [quota] journal_write: "inline" by default, "ring" selects the io_uring write, and
  // any other value is refused with the file, line and key named.
  EXPECT_TRUE(defaults().journal_inline);
  temp_toml ring("[quota]\njournal_write = \"ring\"\n");
  auto s = load_file(ring.path(), defaults());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_FALSE(s->journal_inline);
  temp_toml in("[quota]\njournal_write = \"inline\"\n");
  auto t = load_file(in.path(), *s);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_TRUE(t->journal_inline);
  temp_toml bad("[quota]\nfsync_ms = 10\njournal_write = \"async\"\n");
  auto b = load_file(bad.path(), defaults());
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message,
            bad.path() + ":3: quota.journal_write: must be \"inline\" or \"ring\"");
}

TEST(config_test, on_bad_line_is_skip_or_fail) {
  // Verifies [corpus] on_bad_line: "skip" and "fail" set the flag, another word is refused
  // naming the key, a non-string is a type error.
  temp_toml skip("[corpus]\non_bad_line = \"skip\"\n");
  auto a = load_file(skip.path(), defaults());
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->skip_bad_lines);
  temp_toml fail("[corpus]\non_bad_line = \"fail\"\n");
  auto b = load_file(fail.path(), *a);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_FALSE(b->skip_bad_lines);
  temp_toml word("[corpus]\non_bad_line = \"ignore\"\n");
  auto c = load_file(word.path(), defaults());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            word.path() + ":2: corpus.on_bad_line: must be \"skip\" or \"fail\"");
  temp_toml number("[corpus]\non_bad_line = 1\n");
  auto d = load_file(number.path(), defaults());
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("corpus.on_bad_line: expected a string"), std::string::npos)
      << d.error().message;
}

TEST(config_test, unknown_key_names_file_line_and_key) {
  // Verifies a typo is an error that names the file, the line and the key.
  temp_toml f("[server]\nthreads = 2\nlisten_port = 9\n");
  auto s = load_file(f.path(), defaults());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, f.path() + ":3: server.listen_port: unknown key");
}

TEST(config_test, bad_plan_value_is_named) {
  // Verifies an invalid plan value names the plan and the field.
  temp_toml f("[plans.free]\noverage = \"maybe\"\n");
  auto s = load_file(f.path(), defaults());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find(":2: plans.free.overage: must be"), std::string::npos)
      << s.error().message;
}

TEST(config_test, wrong_type_and_range_are_errors) {
  // Verifies type and range checks report the offending key.
  temp_toml f1("[server]\nthreads = \"two\"\n");
  auto a = load_file(f1.path(), defaults());
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("server.threads: expected an integer"), std::string::npos);
  temp_toml f2("[quota]\nreconcile_ms = 1\n");
  auto b = load_file(f2.path(), defaults());
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("quota.reconcile_ms: must be between"), std::string::npos);
}

TEST(config_test, sessions_and_their_cap_are_read_and_checked) {
  // Verifies [mcp] sessions, session_idle_secs and max_sessions are read, and a cap of 0 is
  // refused with its key named (a store with room for nothing would end every session at once).
  temp_toml f("[mcp]\nsessions = true\nsession_idle_secs = 60\nmax_sessions = 500\n");
  auto s = load_file(f.path(), defaults());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE(s->sessions);
  EXPECT_EQ(s->session_idle_secs, 60u);
  EXPECT_EQ(s->max_sessions, 500u);
  EXPECT_EQ(defaults().max_sessions, 100000u);
  temp_toml f0("[mcp]\nmax_sessions = 0\n");
  auto z = load_file(f0.path(), defaults());
  ASSERT_FALSE(z);
  EXPECT_NE(z.error().message.find(":2: mcp.max_sessions: must be between"), std::string::npos)
      << z.error().message;
}

TEST(config_test, fsync_interval_of_zero_is_a_config_error) {
  // Verifies fsync_ms = 0 is refused while reading the file (exit 2 naming the key), not later
  // by the quota service after the data dir was already touched (it used to exit 1 there).
  temp_toml f("[quota]\nfsync_ms = 0\n");
  auto s = load_file(f.path(), defaults());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("quota.fsync_ms: must be between 1 and"), std::string::npos)
      << s.error().message;
}

TEST(config_test, plan_limits_and_names_match_the_quota_module) {
  // Verifies config's mirrored plan limits and name rule equal the quota module's, and a plan
  // at every limit that load_file accepts also passes quota::validate_plan (so serve never
  // refuses, without a line, a plan the file reader let through).
  EXPECT_EQ(plan_min_rate_per_sec, quota::min_rate_per_sec);
  EXPECT_EQ(plan_max_rate_per_sec, quota::max_rate_per_sec);
  EXPECT_EQ(plan_max_burst, quota::max_burst);
  EXPECT_EQ(plan_max_monthly_quota, quota::max_monthly_quota);
  EXPECT_EQ(plan_max_burst_ns, quota::max_burst_ns);
  for (int c = 0; c < 256; ++c) {
    const std::string name = "p" + std::string(1, static_cast<char>(c)) + "q";
    EXPECT_EQ(valid_plan_name(name), quota::valid_name(name)) << "byte " << c;
  }
  for (size_t n : {0, 1, 64, 65}) {
    EXPECT_EQ(valid_plan_name(std::string(n, 'a')), quota::valid_name(std::string(n, 'a'))) << n;
  }
  temp_toml f(R"(
[plans.low]
rate_per_sec = 1
burst = 1
monthly_quota = 1
[plans.high]
rate_per_sec = 1e9
burst = 1000000000
monthly_quota = 1099511627776
[plans.slow]
rate_per_sec = 0.001
burst = 1000000
)");
  auto s = load_file(f.path(), defaults());
  ASSERT_TRUE(s) << s.error().message;
  for (const char* name : {"low", "high", "slow"}) {
    const plan& p = s->plans.at(name);
    quota::plan q;
    q.name = name;
    q.rate_per_sec = p.rate_per_sec;
    q.burst = p.burst;
    q.monthly_quota = p.monthly_quota;
    auto v = quota::validate_plan(q);
    EXPECT_TRUE(v) << (v ? "" : v.error());
  }
}

TEST(config_test, plan_values_past_the_quota_limits_name_file_line_and_key) {
  // Verifies the values quota::validate_plan refuses are refused while reading the file, with
  // the file, line and plans.NAME.key (they used to pass here and fail later without a line).
  struct bad_case {
    const char* toml;
    const char* want;
  };
  for (const bad_case& c : {
           bad_case{"[plans.free]\nmonthly_quota = 0\n",
                    ":2: plans.free.monthly_quota: must be between 1 and 1099511627776"},
           bad_case{"[plans.free]\nmonthly_quota = 1099511627777\n",
                    ":2: plans.free.monthly_quota: must be between 1 and 1099511627776"},
           bad_case{"[plans.gold]\nburst = 1000000001\n",
                    ":2: plans.gold.burst: must be between 1 and 1000000000"},
           bad_case{"[plans.gold]\nrate_per_sec = 0.001\nburst = 1000000000\n",
                    ":3: plans.gold.burst: burst / rate_per_sec must be at most 1000000000 "
                    "seconds"},
       }) {
    temp_toml f(c.toml);
    auto s = load_file(f.path(), defaults());
    ASSERT_FALSE(s) << c.toml;
    EXPECT_EQ(s.error().message.rfind(f.path() + c.want, 0), 0u) << s.error().message;
  }
}

TEST(config_test, plan_names_are_checked_and_quoted_in_the_message) {
  // Verifies a plan name quota::valid_name refuses (a space, empty, a newline, too long) is an
  // error at the table's line naming it as TOML writes it, and a dotted name is accepted.
  struct bad_case {
    std::string toml;
    std::string key;
  };
  const std::string long_name(65, 'x');
  for (const bad_case& c : {
           bad_case{"[plans.\"bad name\"]\nburst = 5\n", "plans.\"bad name\""},
           bad_case{"[plans.\"\"]\nburst = 5\n", "plans.\"\""},
           bad_case{"[plans.\"a\\nkey x\"]\nburst = 5\n", "plans.\"a\\nkey x\""},
           bad_case{"[plans." + long_name + "]\n", "plans." + long_name},
       }) {
    temp_toml f("\n" + c.toml);
    auto s = load_file(f.path(), defaults());
    ASSERT_FALSE(s) << c.toml;
    EXPECT_EQ(s.error().message,
              f.path() + ":2: " + c.key +
                  ": a plan name must be 1-64 characters of letters, digits, '.', '_' or '-'");
  }
  temp_toml dotted("[plans.\"v1.2\"]\nburst = 0\n");
  auto d = load_file(dotted.path(), defaults());
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message,
            dotted.path() + ":2: plans.\"v1.2\".burst: must be between 1 and 1000000000");
}

TEST(config_test, a_directory_is_not_a_config_file) {
  // Verifies a path naming a directory is an error (toml++ reads one as an empty file, so the
  // server started, or a reload went on, without the file's plans), as is a missing file.
  char tmpl[] = "/tmp/tollgate_cfgdir_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto s = load_file(dir, defaults());
  rmdir(dir.c_str());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, dir + ": not a regular file (a directory)");
  auto m = load_file(dir + "/missing.toml", defaults());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message, dir + "/missing.toml: No such file or directory");
}

TEST(config_test, search_cache_size_is_capped_per_core) {
  // Verifies search_cache_entries x search_cache_entry_bytes (allocated whole by every core at
  // start-up) may reach 1 GiB but not more, refused with the key, the product and the cap.
  temp_toml at_cap("[corpus]\nsearch_cache_entries = 65536\nsearch_cache_entry_bytes = 16384\n");
  auto a = load_file(at_cap.path(), defaults());
  ASSERT_TRUE(a) << a.error().message;
  temp_toml big_entries("[corpus]\nsearch_cache_entry_bytes = 16777216\n");
  auto b = load_file(big_entries.path(), defaults());
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(uint64_t{b->search_cache_entries} * b->search_cache_entry_bytes,
            search_cache_max_bytes);
  temp_toml over("[corpus]\nsearch_cache_entries = 1048576\n");
  auto c = load_file(over.path(), defaults());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            over.path() +
                ":2: corpus.search_cache_entries: search_cache_entries x "
                "search_cache_entry_bytes must be at most 1073741824 bytes (1 GiB) per core, "
                "which every core allocates at start-up (got 1048576 x 16384 = 17179869184)");
  temp_toml maxima(
      "[corpus]\nsearch_cache_entry_bytes = 16777216\nsearch_cache_entries = 1048576\n");
  auto d = load_file(maxima.path(), defaults());
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message.rfind(maxima.path() + ":3: corpus.search_cache_entries:", 0), 0u)
      << d.error().message;
}

TEST(config_test, readme_documents_every_key) {
  // Verifies README's configuration reference names every key load_file accepts, as
  // `table.key`, so a new setting cannot land undocumented.
  std::ifstream in(TOLLGATE_README);
  ASSERT_TRUE(in) << "cannot read " << TOLLGATE_README;
  std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto keys = known_keys();
  EXPECT_GT(keys.size(), 25u);
  for (const std::string& k : keys) {
    EXPECT_NE(readme.find("`" + k + "`"), std::string::npos) << k << " is not in README.md";
  }
}

TEST(config_test, empty_paths_duplicate_shards_and_unknown_tables_are_named) {
  // Verifies checks that used to pass silently or read oddly: an empty data_dir or corpus.path
  // (the current directory, the embedded sample), a shard listed twice (asked twice, its
  // stories merged twice) or at port 0, an unknown top-level table (was ".servr: unknown key"),
  // and an unknown demo_plan reported at its own line.
  struct bad_case {
    const char* text;
    const char* message;
  };
  const bad_case cases[] = {
      {"[server]\ndata_dir = \"\"\n", ":2: server.data_dir: must not be empty"},
      {"[corpus]\npath = \"\"\n", ":2: corpus.path: must not be empty"},
      {"[fleet]\nsecret = \"s\"\nshards = [\"127.0.0.1:9101\", \"127.0.0.1:9101\"]\n",
       ":3: fleet.shards: '127.0.0.1:9101': listed twice"},
      {"[fleet]\nshards = [\"127.0.0.1:0\"]\n",
       "fleet.shards: '127.0.0.1:0': port 0 names no shard"},
      {"[servr]\nlisten = \"127.0.0.1:1\"\n", ":1: servr: unknown table"},
      {"[quota]\nfsync_ms = 100\ndemo_plan = \"gold\"\n",
       ":3: quota.demo_plan: no plan named 'gold'"},
  };
  for (const bad_case& c : cases) {
    temp_toml f(c.text);
    auto s = load_file(f.path(), defaults());
    ASSERT_FALSE(s) << c.text;
    EXPECT_NE(s.error().message.find(c.message), std::string::npos)
        << c.text << " -> " << s.error().message;
  }
  temp_toml two("[fleet]\nsecret = \"s\"\nshards = [\"127.0.0.1:9101\", \"127.0.0.1:9102\"]\n");
  auto ok = load_file(two.path(), defaults());
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->remote_shards.size(), 2u);
}

TEST(config_test, admin_and_stripe_sections_are_checked) {
  // Verifies [admin] and [stripe]: values are read, one token source at most, a token hash is
  // 64 hex digits, names and ranges are checked, and suspend_on takes subscription statuses.
  temp_toml good(
      "[admin]\ntoken_env = \"T\"\ntoken_name = \"portal\"\nrotate_grace_secs = 60\n"
      "[stripe]\nwebhook_secret_env = \"S\"\npublic_webhook = true\ntolerance_secs = 30\n"
      "suspend_on = [\"canceled\"]\nmeter_event_name = \"api_overage\"\napi_key_env = \"K\"\n"
      "meter_url = \"http://127.0.0.1:9/m\"\nmeter_retry_secs = 5\n");
  auto ok = load_file(good.path(), defaults());
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->admin_token_env, "T");
  EXPECT_EQ(ok->admin_token_name, "portal");
  EXPECT_EQ(ok->admin_rotate_grace_secs, 60);
  EXPECT_EQ(ok->stripe_secret_env, "S");
  EXPECT_TRUE(ok->stripe_public_webhook);
  EXPECT_EQ(ok->stripe_tolerance_secs, 30);
  EXPECT_EQ(ok->stripe_suspend_on, std::vector<std::string>{"canceled"});
  EXPECT_EQ(ok->stripe_meter_event, "api_overage");
  EXPECT_EQ(ok->stripe_api_key_env, "K");
  EXPECT_EQ(ok->stripe_meter_url, "http://127.0.0.1:9/m");
  EXPECT_EQ(ok->stripe_meter_retry_secs, 5);
  struct bad_case {
    const char* text;
    const char* message;
  };
  const bad_case cases[] = {
      {"[admin]\ntoken_env = \"T\"\ntoken_file = \"/x\"\n", "admin: give one of"},
      {"[admin]\ntoken_sha256 = \"abc\"\n", ":2: admin.token_sha256: 64 lowercase hex"},
      {"[admin]\ntoken_env = \"\"\n", "admin.token_env: names no environment variable"},
      {"[admin]\ntoken_name = \"a b\"\n", "admin.token_name:"},
      {"[admin]\nrotate_grace_secs = -1\n", "admin.rotate_grace_secs: must be between"},
      {"[admin]\ntoken = \"x\"\n", "admin.token: unknown key"},
      {"[stripe]\ntolerance_secs = 0\n", "stripe.tolerance_secs: must be between"},
      {"[stripe]\nsuspend_on = [\"active\"]\n", "stripe.suspend_on: 'active' is not"},
      {"[stripe]\npublic_webhook = \"yes\"\n", "stripe.public_webhook: expected true or false"},
      {"[stripe]\nmeter_event_name = \"x\"\n", "stripe.meter_event_name: needs stripe.api_key_env"},
      {"[stripe]\nmeter_url = \"ftp://h/x\"\n", "stripe.meter_url: must be an http:// or https://"},
      {"[stripe]\nmeter_url = \"\"\n", "stripe.meter_url: must not be empty"},
      {"[stripe]\nmeter_retry_secs = 0\n", "stripe.meter_retry_secs: must be between"},
  };
  for (const bad_case& c : cases) {
    temp_toml f(c.text);
    auto s = load_file(f.path(), defaults());
    ASSERT_FALSE(s) << c.text;
    EXPECT_NE(s.error().message.find(c.message), std::string::npos)
        << c.text << " -> " << s.error().message;
  }
}

TEST(config_test, toml_syntax_error_reports_line) {
  // Verifies a syntax error carries the file and line of the problem.
  temp_toml f("[server]\nthreads = = 2\n");
  auto s = load_file(f.path(), defaults());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message.rfind(f.path() + ":2:", 0), 0u) << s.error().message;
}

TEST(config_test, parse_host_port_validates_host_and_port) {
  // Verifies HOST:PORT parsing accepts good input and rejects bad hosts and ports.
  auto ok = parse_host_port("localhost:0");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->host, "127.0.0.1");
  EXPECT_EQ(ok->port, 0);
  EXPECT_FALSE(parse_host_port("127.0.0.1"));
  EXPECT_FALSE(parse_host_port("127.0.0.1:70000"));
  EXPECT_FALSE(parse_host_port("example.com:80"));
  EXPECT_FALSE(parse_host_port("127.0.0.1:8x"));
}

TEST(config_test, oauth_metadata_document_keys_are_read_and_checked) {
  // Verifies [oauth]'s metadata-document keys: both registrations offered by default, the allow
  // list, the CA file (which must be readable) and the timeout's range, each refusal naming
  // its key.
  EXPECT_EQ(defaults().oauth_registrations,
            (std::vector<std::string>{"dynamic", "metadata_document"}));
  temp_toml ok(
      "[oauth]\nregistrations = [\"metadata_document\"]\ncimd_allow = [\"127.0.0.1\", \"::1\"]\n"
      "cimd_ca_file = \"/dev/null\"\ncimd_timeout_ms = 1000\n");
  auto a = load_file(ok.path(), defaults());
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->oauth_registrations, std::vector<std::string>{"metadata_document"});
  EXPECT_EQ(a->oauth_cimd_allow, (std::vector<std::string>{"127.0.0.1", "::1"}));
  EXPECT_EQ(a->oauth_cimd_ca_file, "/dev/null");
  EXPECT_EQ(a->oauth_cimd_timeout_ms, 1000);
  for (const char* bad :
       {"registrations = [\"manual\"]", "registrations = []", "cimd_allow = [\"http://x\"]",
        "cimd_ca_file = \"/nonexistent/ca.pem\"", "cimd_timeout_ms = 50"}) {
    temp_toml f(std::string("[oauth]\n") + bad + "\n");
    auto r = load_file(f.path(), defaults());
    ASSERT_FALSE(r) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.error().message.find("oauth." + key), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace tollgate::config

namespace tollgate::config {
namespace {

TEST(config_test, cluster_table_turns_cluster_mode_on_and_is_checked) {
  // Verifies [cluster] is read (redis, node, password_env, prefix; its presence turns cluster
  // mode on), that a config without it stays single-node, and that bad values are named with
  // their file, line and key.
  auto none = load_file(temp_toml("[server]\nthreads = 1\n").path(), defaults());
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->cluster);
  temp_toml f(
      "[cluster]\nredis = \"10.0.0.5:6379\"\nnode = \"gw-1\"\npassword_env = \"REDIS_PW\"\n"
      "prefix = \"tg:\"\n");
  auto s = load_file(f.path(), defaults());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE(s->cluster);
  EXPECT_EQ(s->cluster_redis, "10.0.0.5:6379");
  EXPECT_EQ(s->cluster_node, "gw-1");
  EXPECT_EQ(s->cluster_password_env, "REDIS_PW");
  EXPECT_EQ(s->cluster_prefix, "tg:");
  auto u = load_file(temp_toml("[cluster]\nredis = \"unix:/run/redis.sock\"\n").path(), defaults());
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->cluster_prefix, "tollgate:");
  struct bad_case {
    const char* text;
    const char* message;
  };
  const bad_case cases[] = {
      {"[cluster]\nnode = \"a\"\n", ":1: cluster.redis: required"},
      {"[cluster]\nredis = \"localhost\"\n", ":2: cluster.redis: 'localhost': expected"},
      {"[cluster]\nredis = \"h:0\"\n", ":2: cluster.redis: 'h:0': the port must be 1-65535"},
      {"[cluster]\nredis = \"unix:relative\"\n", ":2: cluster.redis: 'unix:relative'"},
      {"[cluster]\nredis = \"h:1\"\nnode = \"a b\"\n", ":3: cluster.node: 1-64 printable"},
      {"[cluster]\nredis = \"h:1\"\nprefix = \"{x}\"\n", ":3: cluster.prefix: at most 64"},
      {"[cluster]\nredis = \"h:1\"\npassword_env = \"\"\n", ":3: cluster.password_env:"},
      {"[cluster]\nredis = \"h:1\"\nnodes = 3\n", ":3: cluster.nodes: unknown key"},
  };
  for (const bad_case& c : cases) {
    temp_toml t(c.text);
    auto r = load_file(t.path(), defaults());
    ASSERT_FALSE(r) << c.text;
    EXPECT_NE(r.error().message.find(c.message), std::string::npos)
        << c.text << " -> " << r.error().message;
  }
}

}  // namespace
}  // namespace tollgate::config
