// The authorization server's pure parts and its durable store (app/oauth_util.h,
// app/oauth_store.h): form parsing, PKCE S256, redirect URIs, escaping, codes used once, refresh
// rotation with reuse revoking the grant, revocation, and what survives a reopen (a restart).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "app/gate.h"
#include "app/oauth_page.h"
#include "app/oauth_store.h"
#include "app/oauth_util.h"
#include "tollgate/quota/fs.h"

namespace tollgate::app::oauth {
namespace {

std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "tollgate-oauth-XXXXXX").string();
  EXPECT_NE(::mkdtemp(t.data()), nullptr);
  return t;
}

TEST(oauth_util_test, s256_matches_rfc7636_appendix_b) {
  // Verifies the PKCE transform against RFC 7636's worked example.
  EXPECT_EQ(s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
}

TEST(oauth_util_test, verifier_length_and_alphabet_are_checked) {
  // Verifies RFC 7636 §4.1's 43-128 unreserved characters.
  EXPECT_TRUE(valid_verifier(std::string(43, 'a')));
  EXPECT_TRUE(valid_verifier(std::string(128, '~')));
  EXPECT_FALSE(valid_verifier(std::string(42, 'a')));
  EXPECT_FALSE(valid_verifier(std::string(129, 'a')));
  EXPECT_FALSE(valid_verifier(std::string(42, 'a') + "+"));
}

TEST(oauth_util_test, base64url_has_no_padding) {
  // Verifies base64url of 1, 2 and 3 bytes (RFC 4648 §10 vectors, url alphabet, no '=').
  const uint8_t f[] = {'f', 'o', 'o'};
  EXPECT_EQ(base64url(f, 1), "Zg");
  EXPECT_EQ(base64url(f, 2), "Zm8");
  EXPECT_EQ(base64url(f, 3), "Zm9v");
  const uint8_t hi[] = {0xfb, 0xff};
  EXPECT_EQ(base64url(hi, 2), "-_8");
}

TEST(oauth_util_test, form_parses_and_refuses_repeats) {
  // Verifies form decoding ('+' is a space, %XX decoded) and RFC 6749 §3.1's no-repeat rule.
  auto p = parse_form("a=1+2&b=%3Cx%3E&c=");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->at("a"), "1 2");
  EXPECT_EQ(p->at("b"), "<x>");
  EXPECT_EQ(p->at("c"), "");
  EXPECT_FALSE(parse_form("a=1&a=2"));
  EXPECT_FALSE(parse_form("a=%zz"));
  EXPECT_FALSE(parse_form("a=" + std::string(5000, 'x')));
}

TEST(oauth_util_test, redirect_uris_are_https_or_loopback_http) {
  // Verifies RFC 8252 §7.3: http only on loopback; no fragment, no userinfo, bounded length.
  EXPECT_TRUE(valid_redirect_uri("https://claude.ai/api/mcp/auth_callback"));
  EXPECT_TRUE(valid_redirect_uri("http://127.0.0.1:33418/callback"));
  EXPECT_TRUE(valid_redirect_uri("http://localhost:6274/oauth/callback"));
  EXPECT_TRUE(valid_redirect_uri("http://[::1]:8080/cb"));
  EXPECT_FALSE(valid_redirect_uri("http://example.com/cb"));
  EXPECT_FALSE(valid_redirect_uri("http://localhost.evil.com/cb"));
  EXPECT_FALSE(valid_redirect_uri("https://a.example/cb#frag"));
  EXPECT_FALSE(valid_redirect_uri("https://user@evil.example/cb"));
  EXPECT_FALSE(valid_redirect_uri("javascript:alert(1)"));
  EXPECT_FALSE(valid_redirect_uri("https://a.example/" + std::string(600, 'x')));
  EXPECT_FALSE(valid_redirect_uri("https://a.example/a b"));
  EXPECT_EQ(uri_host("https://claude.ai:443/api?x=1"), "claude.ai:443");
}

TEST(oauth_util_test, html_escapes_markup) {
  // Verifies a client_name cannot inject markup into the consent page.
  EXPECT_EQ(html("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;");
  consent_view v;
  v.client_name = "<script>alert(1)</script>";
  v.redirect_host = "evil.example";
  const std::string page = consent_page(v);
  EXPECT_EQ(page.find("<script>"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
}

TEST(oauth_util_test, secrets_are_256_bit_and_prefixed) {
  // Verifies a token is its prefix and 64 hex digits, and two are never the same.
  const std::string a = new_secret(kAccessPrefix);
  const std::string b = new_secret(kAccessPrefix);
  EXPECT_EQ(a.size(), kAccessPrefix.size() + 64);
  EXPECT_EQ(a.rfind(kAccessPrefix, 0), 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(hash_hex(a).size(), 64u);
  EXPECT_TRUE(equal_ct(a, a));
  EXPECT_FALSE(equal_ct(a, b));
}

TEST(oauth_gate_test, a_token_in_the_query_is_found_anywhere_in_it) {
  // Verifies the gate's check for RFC 6750 §2.3's URI form, which MCP forbids.
  EXPECT_TRUE(app::token_in_query("access_token=x"));
  EXPECT_TRUE(app::token_in_query("q=a&access_token="));
  EXPECT_FALSE(app::token_in_query("my_access_token=x"));
  EXPECT_FALSE(app::token_in_query("q=access_token%3Dx"));
  EXPECT_FALSE(app::token_in_query(""));
}

TEST(oauth_gate_test, the_base_url_is_the_issuer_or_a_plain_host) {
  // Verifies the base URL: the configured issuer, else http:// + a plain Host, else localhost
  // (a Host that could break out of the challenge's quotes is never used).
  std::string buf;
  buf.reserve(300);
  http::request req;
  ASSERT_TRUE(req.add_header("Host", "127.0.0.1:8080"));
  EXPECT_EQ(app::oauth_base(req, "https://mcp.example.com", buf), "https://mcp.example.com");
  EXPECT_EQ(app::oauth_base(req, "", buf), "http://127.0.0.1:8080");
  http::request evil;
  ASSERT_TRUE(evil.add_header("Host", "a\", resource_metadata=\"https://evil"));
  EXPECT_EQ(app::oauth_base(evil, "", buf), "http://localhost");
}

TEST(oauth_store_test, code_is_single_use_and_expires) {
  // Verifies an authorization code works once and not after its expiry.
  store st(temp_dir(), nullptr, 3600, 86400);
  ASSERT_TRUE(st.open(1000, true));
  code_data d;
  d.client_id = "c";
  d.expires = 1060;
  const std::string code = st.issue_code(d);
  EXPECT_TRUE(st.take_code(code, 1001));
  EXPECT_FALSE(st.take_code(code, 1001));
  const std::string late = st.issue_code(d);
  EXPECT_FALSE(st.take_code(late, 1060));
}

TEST(oauth_store_test, refresh_rotates_and_reuse_revokes_the_grant) {
  // Verifies refresh rotation, that a spent token's reuse revokes the grant (the rotated token
  // with it), and that this holds after a reopen (a restart).
  const std::string dir = temp_dir();
  auto live = [](uint64_t) { return true; };
  std::string first, second;
  {
    store st(dir, nullptr, 3600, 86400);
    ASSERT_TRUE(st.open(1000, true));
    auto c = st.register_client("app", {"https://a.example/cb"}, 1000);
    ASSERT_TRUE(c);
    auto t = st.new_grant(7, c->id, "mcp", 1000);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->access.rfind(kAccessPrefix, 0), 0u);
    first = t->refresh;
    EXPECT_FALSE(st.refresh(first, "another-client", 1001, live));
    auto r = st.refresh(first, c->id, 1001, live);
    ASSERT_TRUE(r);
    second = r->refresh;
    EXPECT_NE(second, first);
  }
  store st(dir, nullptr, 3600, 86400);
  ASSERT_TRUE(st.open(1002, true));  // the restart: compacted, spent marks kept
  const std::string cid = st.list(0, 1002).at(0).g.client_id;
  auto reuse = st.refresh(first, cid, 1003, live);
  ASSERT_FALSE(reuse);
  EXPECT_EQ(reuse.error(), store::refresh_error::reused);
  EXPECT_FALSE(st.refresh(second, cid, 1004, live));  // the grant is gone
  EXPECT_TRUE(st.list(0, 1004).at(0).g.revoked);
}

TEST(oauth_store_test, revoked_key_ends_refresh_and_revoke_by_key_is_durable) {
  // Verifies a refresh for a revoked key is refused, and `oauth revoke --key` survives a reopen.
  const std::string dir = temp_dir();
  {
    store st(dir, nullptr, 3600, 86400);
    ASSERT_TRUE(st.open(1000, true));
    auto c = st.register_client("app", {"https://a.example/cb"}, 1000);
    auto t = st.new_grant(9, c->id, "", 1000);
    ASSERT_TRUE(t);
    EXPECT_FALSE(st.refresh(t->refresh, c->id, 1001, [](uint64_t) { return false; }));
    auto t2 = st.new_grant(9, c->id, "", 1002);
    ASSERT_TRUE(t2);
    auto n = st.revoke({}, 9, {}, 1003);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 1u);  // the first grant was already revoked by the refused refresh
  }
  store st(dir, nullptr, 3600, 86400);
  ASSERT_TRUE(st.open(1004, false));
  for (const grant_view& v : st.list(9, 1004)) {
    EXPECT_TRUE(v.g.revoked);
  }
}

TEST(oauth_store_test, torn_last_line_is_ignored_and_bad_lines_named) {
  // Verifies a kill -9 mid-append (a line without its newline) loses only that line, and a
  // damaged line is an error naming file and line.
  const std::string dir = temp_dir();
  ASSERT_TRUE(quota::fs::write_file_atomic(dir + "/oauth.log",
                                           "client tgc_x 1 =app =https%3A%2F%2Fa\nrevo"));
  store st(dir, nullptr, 3600, 86400);
  EXPECT_TRUE(st.open(10, false));
  EXPECT_TRUE(st.find_client("tgc_x"));
  ASSERT_TRUE(quota::fs::write_file_atomic(dir + "/oauth.log", "bogus line\n"));
  auto bad = st.open(10, false);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("oauth.log:1"), std::string::npos);
}

TEST(oauth_store_test, poll_reads_another_writers_lines_and_a_damaged_log_changes_nothing) {
  // Verifies the worker's poll puts in force what another process (the CLI) appended, and that
  // a log that no longer reads leaves the grants in memory as they were.
  const std::string dir = temp_dir();
  store st(dir, nullptr, 3600, 86400);
  ASSERT_TRUE(st.open(1000, true));
  auto mine = st.register_client("app", {"https://a.example/cb"}, 1000);
  ASSERT_TRUE(mine);
  store cli(dir, nullptr, 3600, 86400);
  ASSERT_TRUE(cli.open(1000, false));
  auto theirs = cli.register_client("cli", {"https://b.example/cb"}, 1001);
  ASSERT_TRUE(theirs);
  EXPECT_FALSE(st.find_client(theirs->id));
  EXPECT_TRUE(st.poll(1002));
  EXPECT_TRUE(st.find_client(theirs->id));
  bool missing = false;
  auto text = quota::fs::read_file(dir + "/oauth.log", &missing);
  ASSERT_TRUE(text);
  ASSERT_TRUE(quota::fs::write_file_atomic(dir + "/oauth.log", "bogus line\n" + *text));
  EXPECT_TRUE(st.poll(1003));  // logged, not fatal
  EXPECT_TRUE(st.find_client(mine->id));
  EXPECT_TRUE(st.find_client(theirs->id));
}

}  // namespace
}  // namespace tollgate::app::oauth
