// OAuth access tokens in the lookup table (service::set_token_aliases): a token is its key under
// another secret, found by the same authenticate() call; expired tokens and tokens of a revoked
// key are left out; a core that has not switched tables yet finds a new token through
// authenticate_newest().
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "quota/service_fixture.h"
#include "quota/state.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {
namespace {

using test::fixture;
using test::small_plans;

token_alias alias_of(std::string_view secret, const created_key& k, int64_t expires) {
  token_alias a;
  a.hash = sha256(secret);
  a.key_id = *parse_key_id(k.key_id);
  a.expires_unix = expires;
  return a;
}

const int64_t kLater = static_cast<int64_t>(std::time(nullptr)) + 3600;

TEST(token_alias_test, a_token_is_its_keys_record_under_another_secret) {
  // Verifies a token authenticates to a record with its key's id, state and plan, and that the
  // key count (what reloads log and report) does not count tokens.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const std::string token = "tgat_" + std::string(64, 'a');
  EXPECT_EQ(s.authenticate(token), nullptr);
  f.svc->set_token_aliases({alias_of(token, k, kLater)});
  s.before_send(f.now);
  const key_record* key = s.authenticate(k.secret);
  const key_record* tok = s.authenticate(token);
  ASSERT_NE(key, nullptr);
  ASSERT_NE(tok, nullptr);
  EXPECT_NE(key, tok);
  EXPECT_EQ(tok->key_id, key->key_id);
  EXPECT_EQ(tok->state, key->state);
  EXPECT_EQ(tok->plan, "tiny");
  EXPECT_EQ(f.svc->key_count(), 1u);
  f.svc->set_token_aliases({});
  s.before_send(f.now);
  EXPECT_EQ(s.authenticate(token), nullptr);
}

TEST(token_alias_test, expired_tokens_and_tokens_of_revoked_keys_are_left_out) {
  // Verifies the table holds no expired token, and a revoked key takes its tokens with it.
  fixture f(small_plans());
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const std::string live = "tgat_" + std::string(64, 'b');
  const std::string old = "tgat_" + std::string(64, 'c');
  f.svc->set_token_aliases({alias_of(live, k, kLater), alias_of(old, k, 1)});
  s.before_send(f.now);
  EXPECT_NE(s.authenticate(live), nullptr);
  EXPECT_EQ(s.authenticate(old), nullptr);
  key_store store(f.dir.path());
  ASSERT_TRUE(store.revoke(k.key_id).has_value());
  f.svc->request_reload();
  s.on_tick(f.now);
  EXPECT_EQ(s.authenticate(live), nullptr);
}

TEST(token_alias_test, a_core_finds_a_token_issued_after_its_last_switch) {
  // Verifies authenticate_newest() finds a token this core's table predates, while records
  // handed out earlier in the pass stay valid (the old table is not reclaimed before the core's
  // next quiescent point).
  fixture f(small_plans(), 2);
  auto k = f.key("acme", "tiny");
  f.open();
  core_ledger& a = f.svc->ledger(0);
  core_ledger& b = f.svc->ledger(1);
  const key_record* before = a.authenticate(k.secret);
  ASSERT_NE(before, nullptr);
  const std::string token = "tgat_" + std::string(64, 'd');
  f.svc->set_token_aliases({alias_of(token, k, kLater)});
  b.before_send(f.now);  // the other core moves on; this one is mid-pass
  EXPECT_EQ(a.authenticate(token), nullptr);
  const key_record* tok = a.authenticate_newest(token);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->key_id, before->key_id);
  f.svc->reload_if_changed(true);          // a reclamation pass while `a` is mid-pass
  EXPECT_EQ(before->key_id, tok->key_id);  // still readable (ASan would say otherwise)
  a.before_send(f.now);
  EXPECT_NE(a.authenticate(token), nullptr);
}

}  // namespace
}  // namespace tollgate::quota
