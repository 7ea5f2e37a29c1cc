// Every command's --help lists every flag it takes, compared generically: each command's flag
// table (the one its parser refuses anything outside of) against the flags its help text
// names, and each listed flag run through the real parser to see it is not refused as
// unknown. Plus the hint an unknown plan gives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/cluster_cli.h"
#include "quota/test_util.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/index_file.h"

namespace tollgate::app {
namespace {

std::set<std::string> flags_in(std::string_view help) {
  // Every "--name" (a lower-case letter, then letters and dashes). A hand scan rather than
  // std::regex: GCC 12's -O2 + ASan build reports a false maybe-uninitialized inside <regex>.
  std::set<std::string> out;
  const auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  size_t i = 0;
  while (i + 2 < help.size()) {
    if (help[i] == '-' && help[i + 1] == '-' && lower(help[i + 2])) {
      size_t j = i + 3;
      while (j < help.size() && (lower(help[j]) || help[j] == '-')) {
        ++j;
      }
      out.insert(std::string(help.substr(i, j - i)));
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

// What a command said on stderr (or in its error) when given `flag` and a value.
using probe = std::function<std::string(const std::string& flag)>;

std::string server_probe(const char* command, const std::string& flag) {
  std::vector<std::string> args = {flag, "x"};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  auto s = parse_server_args(command, static_cast<int>(argv.size()), argv.data());
  return s ? std::string() : s.error().message;
}

std::string admin_probe(const char* command, const char* sub, const std::string& flag) {
  quota::test::temp_dir d;
  std::vector<std::string> args = {sub, flag, "x", "--data-dir", d.path()};
  std::vector<std::string_view> words(args.begin(), args.end());
  auto r = quota::test::capture_cli(
      [&](std::FILE* out, std::FILE* err) { return run_admin(command, words, out, err); });
  return r.err;
}

std::string cluster_probe(const std::string& flag) {
  std::vector<std::string> args = {"status", flag, "x"};
  std::vector<std::string_view> words(args.begin(), args.end());
  auto r = quota::test::capture_cli(
      [&](std::FILE* out, std::FILE* err) { return run_cluster(words, out, err); });
  return r.err;
}

// What `run` (a command that writes to the process's stderr) said for `args`: captured through
// a temp file on fd 2.
std::string process_stderr_of(int (*run)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  std::fflush(stderr);
  std::FILE* tmp = std::tmpfile();
  const int saved = dup(2);
  dup2(fileno(tmp), 2);
  (void)run(static_cast<int>(argv.size()), argv.data());
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  return quota::test::slurp(tmp);
}

std::string corpus_probe(const std::string& flag) {
  return process_stderr_of(search::run_corpus_command, {"corpus", "generate", flag, "0"});
}

std::string index_probe(const std::string& flag) {
  return process_stderr_of(search::run_index_command, {"index", "build", flag, "0"});
}

// Whether `said` refuses `flag` itself as an unknown option (a value after a flag that takes
// none is refused too, under its own name).
bool refused_as_unknown(const std::string& said, const std::string& flag) {
  for (const std::string& form : {"unknown option '" + flag + "'", "unknown option " + flag,
                                  "unknown option \"" + flag + "\""}) {
    const size_t at = said.find(form);
    if (at != std::string::npos &&
        (at + form.size() == said.size() || said[at + form.size()] == '\n' ||
         said[at + form.size()] == ' ' || form.back() != flag.back())) {
      return true;
    }
  }
  return false;
}

TEST(cli_help_test, every_command_help_lists_exactly_the_flags_it_takes) {
  // Verifies, for serve, stdio, keys, accounts, cluster, corpus generate and index build: the
  // flags the help text names are the flags the command's parser takes (both ways), each of them is
  // taken (not refused as unknown), and a made-up one is refused.
  struct command {
    const char* name;
    std::string_view help;
    std::span<const std::string_view> flags;
    probe ask;
  };
  const command commands[] = {
      {"serve", usage_serve(), server_flags("serve"),
       [](const std::string& f) { return server_probe("serve", f); }},
      {"stdio", usage_stdio(), server_flags("stdio"),
       [](const std::string& f) { return server_probe("stdio", f); }},
      {"keys", quota::keys_help(), quota::keys_options(),
       [](const std::string& f) { return admin_probe("keys", "list", f); }},
      {"accounts", quota::accounts_help(), quota::accounts_options(),
       [](const std::string& f) { return admin_probe("accounts", "suspend", f); }},
      {"cluster", cluster_help(), cluster_options(), cluster_probe},
      {"corpus generate", search::corpus_usage_text(), search::corpus_generate_flags(),
       corpus_probe},
      {"index build", search::index_usage_text(), search::index_build_flags(), index_probe},
  };
  for (const auto& c : commands) {
    const std::set<std::string> taken(c.flags.begin(), c.flags.end());
    EXPECT_EQ(flags_in(c.help), taken) << c.name << " --help:\n" << c.help;
    for (const auto& f : taken) {
      if (f == "--help") {
        continue;  // prints the help (checked above)
      }
      const std::string said = c.ask(f);
      EXPECT_FALSE(refused_as_unknown(said, f)) << c.name << " " << f << ": " << said;
    }
    EXPECT_TRUE(refused_as_unknown(c.ask("--no-such-flag"), "--no-such-flag")) << c.name;
  }
}

TEST(cli_help_test, keys_create_help_lists_config) {
  // Verifies the case users hit: `keys create --help` names --config (a plan outside free/pro
  // needs it) and says where plans come from.
  auto r = quota::test::capture_cli([](std::FILE* out, std::FILE* err) {
    std::vector<std::string_view> words = {"create", "--help"};
    return run_admin("keys", words, out, err);
  });
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("tollgate keys create --account ACCOUNT --plan PLAN [--config FILE]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  --config FILE"), std::string::npos) << r.out;
}

TEST(cli_help_test, an_unknown_plan_says_where_plans_were_looked_for) {
  // Verifies `keys create --plan slow` names the config file it read, or says that none was
  // given (only the built-in plans), and exits 2.
  quota::test::temp_dir d;
  const std::string data = d.path() + "/data";
  auto none = quota::test::capture_cli([&](std::FILE* out, std::FILE* err) {
    std::vector<std::string_view> words = {"create", "--account",  "a", "--plan",
                                           "slow",   "--data-dir", data};
    return run_admin("keys", words, out, err);
  });
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("unknown plan \"slow\""), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("no --config FILE was given"), std::string::npos) << none.err;
  const std::string cfg = d.path() + "/cfg.toml";
  std::ofstream(cfg) << "[plans.gold]\nrate_per_sec = 5\nburst = 5\nmonthly_quota = 50\n";
  auto with = quota::test::capture_cli([&](std::FILE* out, std::FILE* err) {
    std::vector<std::string_view> words = {"create",   "--account", "a",          "--plan", "slow",
                                           "--config", cfg,         "--data-dir", data};
    return run_admin("keys", words, out, err);
  });
  EXPECT_EQ(with.code, 2);
  EXPECT_NE(with.err.find("looked in the [plans] of " + cfg), std::string::npos) << with.err;
  EXPECT_NE(with.err.find("gold"), std::string::npos) << with.err;
}

}  // namespace
}  // namespace tollgate::app
