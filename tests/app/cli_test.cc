#include "app/cli.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "app/reload.h"
#include "quota/test_util.h"

namespace tollgate::app {
namespace {

result<config::settings, cli_error> parse(std::string_view cmd, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  return parse_server_args(cmd, static_cast<int>(argv.size()), argv.data());
}

TEST(cli_test, flags_override_config_file) {
  // Verifies the precedence defaults < file < flags.
  std::string path = "/tmp/tollgate_cli_test.toml";
  std::ofstream(path) << "[server]\nlisten = \"127.0.0.1:9000\"\nthreads = 3\n";
  auto s = parse("serve", {"--config", path, "--threads", "1", "--data-dir", "/tmp/d"});
  std::remove(path.c_str());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->listen.port, 9000);
  EXPECT_EQ(s->threads, 1);
  EXPECT_EQ(s->data_dir, "/tmp/d");
}

TEST(cli_test, unknown_flag_is_named) {
  // Verifies an unknown option is an error naming it.
  auto s = parse("serve", {"--listne", "x"});
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("'--listne'"), std::string::npos);
}

TEST(cli_test, bad_values_are_errors) {
  // Verifies value checks for --threads, --listen and a missing or empty value (an empty
  // --data-dir or --corpus would silently mean the current directory or the sample);
  // --threads 0 means one per core, as server.threads = 0 does.
  auto zero = parse("serve", {"--threads", "0"});
  ASSERT_TRUE(zero) << zero.error().message;
  EXPECT_EQ(zero->threads, 0);
  EXPECT_FALSE(parse("serve", {"--threads", "-1"}));
  EXPECT_FALSE(parse("serve", {"--threads", "two"}));
  for (const char* flag : {"--data-dir", "--corpus", "--listen"}) {
    auto e = parse("serve", {flag, ""});
    ASSERT_FALSE(e) << flag;
    EXPECT_NE(e.error().message.find(flag), std::string::npos) << e.error().message;
  }
  EXPECT_FALSE(parse("serve", {"--listen", "nohost"}));
  EXPECT_FALSE(parse("serve", {"--data-dir"}));
  EXPECT_FALSE(parse("serve", {"--corpus", "a.jsonl", "--sample"}));
}

TEST(cli_test, stdio_rejects_serve_only_flags) {
  // Verifies --listen is not accepted by stdio (it has no socket).
  EXPECT_FALSE(parse("stdio", {"--listen", "127.0.0.1:1"}));
  EXPECT_TRUE(parse("stdio", {"--sample"}));
}

TEST(cli_test, help_is_reported_as_help) {
  // Verifies --help anywhere asks for usage rather than failing.
  auto s = parse("serve", {"--threads", "2", "--help"});
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().help);
}

TEST(cli_test, config_error_keeps_file_line_key) {
  // Verifies a bad config value surfaces with its file, line and key.
  std::string path = "/tmp/tollgate_cli_test2.toml";
  std::ofstream(path) << "[plans.free]\nburst = -1\n";
  auto s = parse("serve", {"--config", path});
  std::remove(path.c_str());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find(path + ":2: plans.free.burst"), std::string::npos)
      << s.error().message;
}

TEST(cli_test, an_empty_config_path_is_an_error) {
  // Verifies --config "" is refused naming the flag instead of serving on the defaults.
  auto s = parse("serve", {"--config", ""});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message.rfind("--config:", 0), 0u) << s.error().message;
  EXPECT_FALSE(parse("stdio", {"--config", ""}));
}

TEST(cli_test, a_directory_as_config_is_an_error) {
  // Verifies --config naming a directory exits 2 with the path named (it used to read as an
  // empty file: the server started on the defaults).
  quota::test::temp_dir d;
  auto s = parse("serve", {"--config", d.path()});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, d.path() + ": not a regular file (a directory)");
}

// `tollgate keys|accounts ARGS...` through run_admin, with its output captured.
quota::test::cli_result admin(std::string_view command, std::vector<std::string> args) {
  std::vector<std::string_view> words(args.begin(), args.end());
  return quota::test::capture_cli(
      [&](std::FILE* out, std::FILE* err) { return run_admin(command, words, out, err); });
}

using quota::test::read_text;

TEST(cli_test, keys_reads_the_config_given_in_either_form) {
  // Verifies `keys create` loads the plans of --config FILE and of --config=FILE (the = form
  // was accepted by the option parser but never loaded: "unknown plan").
  quota::test::temp_dir d;
  const std::string cfg = d.path() + "/cfg.toml";
  std::ofstream(cfg) << "[plans.gold]\nrate_per_sec = 50\nburst = 100\nmonthly_quota = 5000\n";
  const std::string data = d.path() + "/data";
  auto eq = admin("keys", {"create", "--account", "acme", "--plan", "gold", "--config=" + cfg,
                           "--data-dir", data});
  EXPECT_EQ(eq.code, 0) << eq.err;
  EXPECT_EQ(eq.out.rfind("tg_live_", 0), 0u) << eq.out;
  auto two = admin("keys", {"create", "--account", "acme", "--plan", "gold", "--config", cfg,
                            "--data-dir=" + data});
  EXPECT_EQ(two.code, 0) << two.err;
  auto none = admin("keys", {"create", "--account", "acme", "--plan", "gold", "--data-dir", data});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("unknown plan \"gold\""), std::string::npos) << none.err;
  auto empty = admin("keys", {"list", "--config=", "--data-dir", data});
  EXPECT_EQ(empty.code, 2);
  EXPECT_NE(empty.err.find("--config"), std::string::npos) << empty.err;
  auto list = admin("keys", {"list", "--config=" + cfg, "--data-dir", data});
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find("gold"), std::string::npos) << list.out;
}

TEST(cli_test, keys_refuses_a_config_serve_refuses) {
  // Verifies keys and serve refuse the same configs with the same FILE:LINE: key message
  // (monthly_quota = 0 used to pass `keys create`; a plan name with a space got into keys.txt
  // and broke every later keys, accounts and serve run), a directory included.
  quota::test::temp_dir d;
  const std::string data = d.path() + "/data";
  struct bad_case {
    std::string toml;
    std::string plan;
  };
  for (const bad_case& c : {
           bad_case{"[plans.free]\nmonthly_quota = 0\n", "free"},
           bad_case{"[plans.\"bad name\"]\nburst = 5\n", "bad name"},
           bad_case{"[plans.\"x\\nkey y\"]\nburst = 5\n", "free"},
       }) {
    const std::string cfg = d.path() + "/cfg.toml";
    std::ofstream(cfg) << c.toml;
    auto served = parse("serve", {"--config", cfg, "--data-dir", data});
    ASSERT_FALSE(served) << c.toml;
    auto k = admin("keys", {"create", "--account", "acme", "--plan", c.plan, "--config", cfg,
                            "--data-dir", data});
    EXPECT_EQ(k.code, 2) << c.toml;
    EXPECT_EQ(k.err, "tollgate keys: " + served.error().message + "\n");
    EXPECT_EQ(read_text(data + "/keys.txt"), "") << c.toml;
  }
  auto dir = admin("accounts", {"suspend", "acme", "--config", d.path()});
  EXPECT_EQ(dir.code, 2);
  EXPECT_EQ(dir.err, "tollgate accounts: " + d.path() + ": not a regular file (a directory)\n");
}

TEST(cli_test, reload_from_a_directory_keeps_the_plans_in_force) {
  // Verifies a config path that became a directory fails the reload (SIGHUP, admin call) with
  // the path named, changing nothing, instead of reloading the built-in plans alone and
  // silently dropping the file's.
  quota::test::temp_dir d;
  config::settings settings = config::defaults();
  settings.data_dir = d.path() + "/data";
  settings.config_path = d.path();  // a directory
  quota::plan_map plans = to_plans(settings);
  plans["gold"] = quota::test::make_plan("gold", 50, 100, 5000, quota::overage_policy::stop);
  quota::test::add_key(settings.data_dir, "acme", "free", plans);
  quota::service_options qo;
  qo.data_dir = settings.data_dir;
  qo.plans = plans;
  qo.cores = 1;
  shared_state st;
  st.settings = &settings;
  st.quota = quota::test::open_service(qo, quota::test::kSec);
  ASSERT_NE(st.quota, nullptr);
  auto r = reload_plans_and_keys(st, "test");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, d.path() + ": not a regular file (a directory)");
  EXPECT_EQ(r.plans, 0u);
  EXPECT_EQ(st.quota->key_count(), 1u);
}

}  // namespace
}  // namespace tollgate::app
