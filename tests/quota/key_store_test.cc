#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "quota/test_util.h"
#include "support/alloc_counter.h"

namespace tollgate::quota {
namespace {

using test::temp_dir;

using test::cli_result;
using test::read_text;
using test::slurp;

cli_result run_keys(std::vector<std::string_view> args, const std::string& dir) {
  return test::capture_cli([&](std::FILE* out, std::FILE* err) {
    return run_keys_command(args, test::default_plans(), dir, out, err);
  });
}

cli_result run_accounts(std::vector<std::string_view> args, const std::string& dir) {
  return test::capture_cli(
      [&](std::FILE* out, std::FILE* err) { return run_accounts_command(args, dir, out, err); });
}

TEST(key_store_test, key_id_text_is_key_id_string_without_allocating) {
  // Verifies the request path's key id text equals the admin one, parses back, and allocates
  // nothing.
  for (uint64_t id : {uint64_t{0}, uint64_t{0x0123456789abcdef}, ~uint64_t{0}}) {
    std::array<char, key_id_length> buf;
    std::string_view text;
    {
      tollgate::test::alloc_scope scope;
      text = key_id_text(id, buf);
      EXPECT_EQ(scope.count(), 0u);
    }
    EXPECT_EQ(text, key_id_string(id));
    auto back = parse_key_id(text);
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(*back, id);
  }
  EXPECT_EQ(key_id_string(0x0123456789abcdef), "key_0123456789abcdef");
}

TEST(key_store_test, create_prints_secret_once_and_stores_only_its_hash) {
  // Verifies keys create prints a tg_live_ key with >= 128 bits and keys.txt holds its SHA-256,
  // never the secret.
  temp_dir d;
  auto r = run_keys({"create", "--account", "acme", "--plan", "free"}, d.path());
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.out.back(), '\n');
  const std::string secret = r.out.substr(0, r.out.size() - 1);
  ASSERT_EQ(secret.rfind("tg_live_", 0), 0u);
  EXPECT_GE((secret.size() - 8) * 4, 128u);  // hex digits * 4 bits
  const std::string keys = read_text(d.path() + "/keys.txt");
  EXPECT_EQ(keys.find(secret.substr(8)), std::string::npos) << "secret stored in clear";
  digest h = sha256(secret);
  char hex[65];
  for (int i = 0; i < 32; ++i) {
    std::snprintf(hex + 2 * i, 3, "%02x", h[static_cast<size_t>(i)]);
  }
  EXPECT_NE(keys.find(hex), std::string::npos);
  EXPECT_NE(keys.find(" acme free "), std::string::npos);
}

TEST(key_store_test, two_keys_differ) {
  // Verifies secrets and ids come from the OS RNG (no repeats).
  temp_dir d;
  auto a = test::add_key(d.path(), "acme", "free");
  auto b = test::add_key(d.path(), "acme", "free");
  EXPECT_NE(a.secret, b.secret);
  EXPECT_NE(a.key_id, b.key_id);
}

TEST(key_store_test, unknown_plan_exits_2_naming_it) {
  // Verifies an unknown plan is a usage error whose message names the plan.
  temp_dir d;
  auto r = run_keys({"create", "--account", "acme", "--plan", "gold"}, d.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("\"gold\""), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(key_store_test, list_shows_ids_never_secrets) {
  // Verifies keys list prints the id, account, plan and status but not the secret.
  temp_dir d;
  auto k = test::add_key(d.path(), "acme", "pro");
  auto r = run_keys({"list"}, d.path());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(k.key_id), std::string::npos);
  EXPECT_NE(r.out.find("acme"), std::string::npos);
  EXPECT_NE(r.out.find("pro"), std::string::npos);
  EXPECT_EQ(r.out.find(k.secret.substr(8)), std::string::npos);
}

TEST(key_store_test, list_of_a_missing_data_dir_says_so) {
  // Verifies keys list on a data dir that does not exist (a typo) still lists nothing and
  // exits 0, but says on stderr that there is no such dir; an existing empty one says nothing.
  temp_dir d;
  auto missing = run_keys({"list"}, d.path() + "/typo");
  EXPECT_EQ(missing.code, 0);
  EXPECT_NE(missing.err.find("no data dir at " + d.path() + "/typo"), std::string::npos)
      << missing.err;
  auto empty = run_keys({"list"}, d.path());
  EXPECT_EQ(empty.code, 0);
  EXPECT_EQ(empty.err, "");
}

TEST(key_store_test, revoke_round_trip) {
  // Verifies keys revoke marks the key revoked in the listing and the store.
  temp_dir d;
  auto k = test::add_key(d.path(), "acme", "free");
  auto r = run_keys({"revoke", k.key_id}, d.path());
  ASSERT_EQ(r.code, 0) << r.err;
  auto l = run_keys({"list"}, d.path());
  EXPECT_NE(l.out.find("revoked"), std::string::npos) << l.out;
  key_store s(d.path());
  auto keys = s.list_keys();
  ASSERT_TRUE(keys.has_value());
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_TRUE((*keys)[0].revoked);
}

TEST(key_store_test, revoke_unknown_key_exits_2) {
  // Verifies revoking a well-formed but unknown id, or a malformed one, is a usage error.
  temp_dir d;
  EXPECT_EQ(run_keys({"revoke", "key_0123456789abcdef"}, d.path()).code, 2);
  EXPECT_EQ(run_keys({"revoke", "nonsense"}, d.path()).code, 2);
}

TEST(key_store_test, suspend_and_resume_round_trip) {
  // Verifies accounts suspend/resume flip the account's status in accounts.txt.
  temp_dir d;
  test::add_key(d.path(), "acme", "free");
  ASSERT_EQ(run_accounts({"suspend", "acme"}, d.path()).code, 0);
  EXPECT_NE(read_text(d.path() + "/accounts.txt").find("account acme suspended"),
            std::string::npos);
  auto l = run_keys({"list"}, d.path());
  EXPECT_NE(l.out.find("suspended"), std::string::npos);
  ASSERT_EQ(run_accounts({"resume", "acme"}, d.path()).code, 0);
  EXPECT_NE(read_text(d.path() + "/accounts.txt").find("account acme active"), std::string::npos);
}

TEST(key_store_test, suspend_unknown_account_exits_2) {
  // Verifies an unknown account is named in a usage error.
  temp_dir d;
  auto r = run_accounts({"suspend", "ghost"}, d.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("ghost"), std::string::npos);
}

TEST(key_store_test, bad_usage_exits_2_with_a_message) {
  // Verifies missing subcommands, missing options and unknown options are usage errors.
  temp_dir d;
  EXPECT_EQ(run_keys({}, d.path()).code, 2);
  EXPECT_EQ(run_keys({"create", "--account", "a"}, d.path()).code, 2);
  EXPECT_EQ(run_keys({"create", "--plan"}, d.path()).code, 2);
  EXPECT_EQ(run_keys({"list", "--bogus"}, d.path()).code, 2);
  EXPECT_EQ(run_keys({"frobnicate"}, d.path()).code, 2);
  EXPECT_EQ(run_keys({"revoke"}, d.path()).code, 2);
  EXPECT_EQ(run_accounts({"suspend"}, d.path()).code, 2);
  EXPECT_EQ(run_accounts({"delete", "a"}, d.path()).code, 2);
  auto r = run_keys({"create", "--account", "bad name!", "--plan", "free"}, d.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("account"), std::string::npos);
}

TEST(key_store_test, help_exits_0) {
  // Verifies --help prints usage on stdout and exits 0 for both commands.
  temp_dir d;
  auto r = run_keys({"--help"}, d.path());
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("keys create"), std::string::npos);
  auto a = run_accounts({"suspend", "--help"}, d.path());
  EXPECT_EQ(a.code, 0);
  EXPECT_NE(a.out.find("accounts suspend"), std::string::npos);
}

TEST(key_store_test, data_dir_option_overrides_the_default) {
  // Verifies --data-dir DIR and --data-dir=DIR redirect the store; --config is ignored.
  temp_dir d, other;
  auto r = run_keys({"create", "--account", "a", "--plan", "free", "--data-dir", other.path(),
                     "--config", "x.toml"},
                    d.path());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(read_text(d.path() + "/keys.txt").empty());
  EXPECT_FALSE(read_text(other.path() + "/keys.txt").empty());
  std::string opt = "--data-dir=" + other.path();
  auto l = run_keys({"list", opt}, d.path());
  EXPECT_NE(l.out.find("key_"), std::string::npos);
}

TEST(key_store_test, create_never_writes_a_plan_name_load_could_not_read_back) {
  // Verifies a plan whose name is not one word of [A-Za-z0-9._-] (a config gone wrong) is a
  // usage error naming it, and nothing is written: a space made keys.txt unreadable, a newline
  // let the name inject a line of its own.
  temp_dir d;
  test::add_key(d.path(), "acme", "free");
  const std::string before = read_text(d.path() + "/keys.txt");
  const std::string injected =
      "x 1 active\nkey key_0000000000000001 " + std::string(64, '0') + " evil big 1 active";
  for (const std::string& name : {std::string("bad name"), std::string(""), injected}) {
    plan_map plans = test::default_plans();
    plans[name] = test::make_plan(name, 10, 20, 1000, overage_policy::stop);
    key_store store(d.path());
    auto r = store.create_key("acme", name, plans, 1764633600);
    ASSERT_FALSE(r.has_value()) << name;
    EXPECT_TRUE(r.error().usage);
    EXPECT_NE(r.error().message.find("invalid plan name"), std::string::npos) << r.error().message;
  }
  plan_map plans = test::default_plans();
  plans["bad name"] = test::make_plan("bad name", 10, 20, 1000, overage_policy::stop);
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  int code = run_keys_command(
      std::vector<std::string_view>{"create", "--account", "acme", "--plan", "bad name"}, plans,
      d.path(), out, err);
  slurp(out);
  EXPECT_EQ(code, 2);
  EXPECT_NE(slurp(err).find("invalid plan name \"bad name\""), std::string::npos);
  EXPECT_EQ(read_text(d.path() + "/keys.txt"), before);
  key_store store(d.path());
  auto loaded = store.load();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded->keys.size(), 1u);
}

TEST(key_store_test, config_option_is_found_in_either_form) {
  // Verifies config_option() finds --config FILE and --config=FILE (the last one) exactly as
  // the commands parse their words, and an empty --config value is bad usage (exit 2).
  using args = std::vector<std::string_view>;
  EXPECT_EQ(config_option(args{"create", "--config", "a.toml", "--plan", "p"}), "a.toml");
  EXPECT_EQ(config_option(args{"create", "--config=b.toml"}), "b.toml");
  EXPECT_EQ(config_option(args{"list", "--config=a.toml", "--config", "c.toml"}), "c.toml");
  EXPECT_EQ(config_option(args{"list"}), "");
  EXPECT_EQ(config_option(args{"list", "--config"}), "");
  EXPECT_EQ(config_option(args{"list", "--bogus", "--config", "a.toml"}), "");
  // The word after --plan is its value, not an option.
  EXPECT_EQ(config_option(args{"create", "--plan", "--config", "a.toml"}), "");
  temp_dir d;
  auto r = run_keys({"list", "--config="}, d.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--config needs a value"), std::string::npos) << r.err;
  EXPECT_EQ(run_accounts({"suspend", "a", "--config", ""}, d.path()).code, 2);
}

TEST(key_store_test, malformed_file_is_an_error_naming_file_and_line) {
  // Verifies a damaged keys.txt is reported with its path and line number.
  temp_dir d;
  test::add_key(d.path(), "acme", "free");
  {
    std::ofstream f(d.path() + "/keys.txt", std::ios::app);
    f << "key garbage\n";
  }
  key_store s(d.path());
  auto r = s.load();
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("keys.txt:3"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tollgate::quota

namespace tollgate::quota {
namespace {

TEST(key_store_admin_test, account_customer_round_trips_and_is_unique) {
  // Verifies create_account stores the customer id as an optional field that load() reads
  // back, refuses an existing account or an already linked customer (exists), and that files
  // written before the field still load.
  test::temp_dir d;
  key_store s(d.path());
  ASSERT_TRUE(s.create_account("acme", "cus_123"));
  ASSERT_TRUE(s.create_account("bare", ""));
  auto again = s.create_account("acme", "");
  ASSERT_FALSE(again);
  EXPECT_TRUE(again.error().exists);
  auto taken = s.create_account("other", "cus_123");
  ASSERT_FALSE(taken);
  EXPECT_TRUE(taken.error().exists);
  EXPECT_FALSE(s.create_account("bad name", ""));
  EXPECT_FALSE(s.create_account("ok", "cus 1"));
  auto c = s.load();
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_EQ(c->accounts.size(), 2u);
  EXPECT_EQ(c->accounts[0].customer, "cus_123");
  EXPECT_EQ(c->accounts[1].customer, "");
  EXPECT_NE(test::read_text(s.accounts_path()).find("account acme active customer=cus_123\n"),
            std::string::npos);
  ASSERT_TRUE(s.suspend("acme"));  // the edit keeps the customer
  c = s.load();
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->accounts[0].suspended);
  EXPECT_EQ(c->accounts[0].customer, "cus_123");
  auto missing = s.suspend("ghost");
  ASSERT_FALSE(missing);
  EXPECT_TRUE(missing.error().not_found);
}

TEST(key_store_admin_test, rotate_keeps_the_old_key_until_its_expiry_and_set_plan_moves_it) {
  // Verifies rotate makes a new key on the same account and plan and stamps the old one with
  // expires=, that a second rotation never lengthens the grace, that set_plan changes only the
  // named key and refuses unknown plans and keys, and that revoked keys are not rotated.
  test::temp_dir d;
  key_store s(d.path());
  auto k = s.create_key("acme", "free", test::default_plans(), 1000);
  ASSERT_TRUE(k);
  auto r = s.rotate(k->key_id, 2000, 5000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(r->key_id, k->key_id);
  EXPECT_EQ(r->secret.rfind("tg_live_", 0), 0u);
  ASSERT_TRUE(s.rotate(k->key_id, 2100, 9000));
  auto c = s.load();
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_EQ(c->keys.size(), 3u);
  EXPECT_EQ(c->keys[0].expires_unix, 5000);
  EXPECT_EQ(c->keys[1].account, "acme");
  EXPECT_EQ(c->keys[1].plan, "free");
  EXPECT_EQ(c->keys[1].expires_unix, 0);
  EXPECT_FALSE(s.rotate(k->key_id, 6000, 9000)) << "an expired key is not rotated";
  ASSERT_TRUE(s.set_plan(r->key_id, "pro", test::default_plans()));
  EXPECT_FALSE(s.set_plan(r->key_id, "gold", test::default_plans()));
  auto nf = s.set_plan("key_00000000000000ff", "pro", test::default_plans());
  ASSERT_FALSE(nf);
  EXPECT_TRUE(nf.error().not_found);
  c = s.load();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->keys[0].plan, "free");
  EXPECT_EQ(c->keys[1].plan, "pro");
  ASSERT_TRUE(s.revoke(r->key_id));
  EXPECT_FALSE(s.rotate(r->key_id, 2200, 9000));
  // A malformed expiry is a malformed line, not a key without one.
  std::ofstream(s.keys_path(), std::ios::app)
      << "key key_0000000000000001 " << std::string(64, 'a') << " acme free 1 active expires=x\n";
  EXPECT_FALSE(s.load());
}

}  // namespace
}  // namespace tollgate::quota
