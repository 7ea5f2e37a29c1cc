#include "app/cli.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

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
  // Verifies value checks for --threads, --listen and a missing value.
  EXPECT_FALSE(parse("serve", {"--threads", "0"}));
  EXPECT_FALSE(parse("serve", {"--threads", "two"}));
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

}  // namespace
}  // namespace tollgate::app
