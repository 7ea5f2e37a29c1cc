// Client ID metadata documents' pure parts (app/oauth_cimd.h): the SSRF guard's address
// classifier (IPv4, IPv6, IPv4 carried in IPv6), the client_id URL rules, the document's checks
// and the cache lifetime from Cache-Control. The fetch itself is driven end to end by
// tests/integration/clients/oauth.test.mjs.
#include "app/oauth_cimd.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <string>

namespace tollgate::app::oauth {
namespace {

TEST(oauth_cimd_test, ipv4_ranges_are_classified) {
  // Verifies each non-public IPv4 range the guard refuses, and public neighbours of them.
  EXPECT_EQ(classify("127.0.0.1"), address_kind::loopback);
  EXPECT_EQ(classify("127.255.255.254"), address_kind::loopback);
  EXPECT_EQ(classify("10.1.2.3"), address_kind::private_net);
  EXPECT_EQ(classify("172.16.0.1"), address_kind::private_net);
  EXPECT_EQ(classify("172.31.255.255"), address_kind::private_net);
  EXPECT_EQ(classify("172.32.0.1"), address_kind::global);
  EXPECT_EQ(classify("192.168.1.1"), address_kind::private_net);
  EXPECT_EQ(classify("100.64.0.1"), address_kind::private_net);  // carrier-grade NAT
  EXPECT_EQ(classify("100.128.0.1"), address_kind::global);
  EXPECT_EQ(classify("169.254.169.254"), address_kind::link_local);  // cloud metadata
  EXPECT_EQ(classify("0.0.0.0"), address_kind::unspecified);
  EXPECT_EQ(classify("0.1.2.3"), address_kind::unspecified);
  EXPECT_EQ(classify("224.0.0.1"), address_kind::special);
  EXPECT_EQ(classify("255.255.255.255"), address_kind::special);
  EXPECT_EQ(classify("192.0.2.1"), address_kind::special);
  EXPECT_EQ(classify("198.18.0.1"), address_kind::special);
  EXPECT_EQ(classify("8.8.8.8"), address_kind::global);
  EXPECT_EQ(classify("1.1.1.1"), address_kind::global);
  EXPECT_EQ(classify("not an address"), address_kind::special);
}

TEST(oauth_cimd_test, ipv6_ranges_are_classified) {
  // Verifies IPv6 loopback, unspecified, ULA, link-local, site-local, multicast, documentation,
  // 6to4 and Teredo, and that global unicast passes.
  EXPECT_EQ(classify("::1"), address_kind::loopback);
  EXPECT_EQ(classify("::"), address_kind::unspecified);
  EXPECT_EQ(classify("fc00::1"), address_kind::private_net);
  EXPECT_EQ(classify("fd12:3456::1"), address_kind::private_net);
  EXPECT_EQ(classify("fe80::1"), address_kind::link_local);
  EXPECT_EQ(classify("febf::1"), address_kind::link_local);
  EXPECT_EQ(classify("fec0::1"), address_kind::private_net);
  EXPECT_EQ(classify("ff02::1"), address_kind::special);
  EXPECT_EQ(classify("2001:db8::1"), address_kind::special);
  EXPECT_EQ(classify("2002:7f00:1::1"), address_kind::special);
  EXPECT_EQ(classify("2001::1"), address_kind::special);
  EXPECT_EQ(classify("100::1"), address_kind::special);
  EXPECT_EQ(classify("2606:4700:4700::1111"), address_kind::global);
  EXPECT_EQ(classify("2a00:1450:4001::1"), address_kind::global);
}

TEST(oauth_cimd_test, ipv4_inside_ipv6_is_classified_as_the_ipv4_address) {
  // Verifies that v4-mapped, v4-compatible and NAT64 addresses are judged by the IPv4 address
  // they reach, so ::ffff:127.0.0.1 is no way around the loopback rule.
  EXPECT_EQ(classify("::ffff:127.0.0.1"), address_kind::loopback);
  EXPECT_EQ(classify("::ffff:10.0.0.1"), address_kind::private_net);
  EXPECT_EQ(classify("::ffff:169.254.169.254"), address_kind::link_local);
  EXPECT_EQ(classify("::ffff:0.0.0.0"), address_kind::unspecified);
  EXPECT_EQ(classify("::ffff:8.8.8.8"), address_kind::global);
  EXPECT_EQ(classify("::127.0.0.1"), address_kind::loopback);
  EXPECT_EQ(classify("64:ff9b::192.168.0.1"), address_kind::private_net);
  EXPECT_EQ(classify("64:ff9b::8.8.8.8"), address_kind::global);
}

TEST(oauth_cimd_test, sockaddr_form_matches_the_text_form) {
  // Verifies classify(sockaddr*) (what the socket callback sees) for both families.
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  ASSERT_EQ(::inet_pton(AF_INET, "192.168.0.7", &a4.sin_addr), 1);
  EXPECT_EQ(classify(reinterpret_cast<const sockaddr*>(&a4)), address_kind::private_net);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  ASSERT_EQ(::inet_pton(AF_INET6, "::ffff:127.0.0.2", &a6.sin6_addr), 1);
  EXPECT_EQ(classify(reinterpret_cast<const sockaddr*>(&a6)), address_kind::loopback);
  sockaddr other{};
  other.sa_family = AF_UNIX;
  EXPECT_EQ(classify(&other), address_kind::special);
}

TEST(oauth_cimd_test, client_id_urls_follow_the_rules) {
  // Verifies the URL rules: https with a path, no fragment, no userinfo, no dot segments, a
  // valid port; http only for an allow-listed loopback host.
  const std::vector<std::string> none;
  auto t = parse_client_id_url("https://App.Example.com:8443/oauth/client.json?v=1", none);
  ASSERT_TRUE(t) << t.error();
  EXPECT_TRUE(t->https);
  EXPECT_EQ(t->host, "app.example.com");
  EXPECT_EQ(t->port, 8443);
  t = parse_client_id_url("https://[::1]/c", none);
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, 443);
  EXPECT_FALSE(parse_client_id_url("https://app.example.com", none));
  EXPECT_FALSE(parse_client_id_url("https://app.example.com/", none));
  EXPECT_FALSE(parse_client_id_url("https://app.example.com/c#x", none));
  EXPECT_FALSE(parse_client_id_url("https://u:p@app.example.com/c", none));
  EXPECT_FALSE(parse_client_id_url("https://app.example.com/a/../c", none));
  EXPECT_FALSE(parse_client_id_url("https://app.example.com/a/%2E%2E/c", none));
  EXPECT_FALSE(parse_client_id_url("https://app.example.com:0/c", none));
  EXPECT_FALSE(parse_client_id_url("https://app.example.com:99999/c", none));
  EXPECT_FALSE(parse_client_id_url("https://app.exa mple.com/c", none));
  EXPECT_FALSE(parse_client_id_url("ftp://app.example.com/c", none));
  EXPECT_FALSE(parse_client_id_url("http://app.example.com/c", none));
  EXPECT_FALSE(parse_client_id_url("http://127.0.0.1:8/c", none));
  const std::vector<std::string> loop = {"127.0.0.1", "app.example.com"};
  EXPECT_TRUE(parse_client_id_url("http://127.0.0.1:8/c", loop));
  EXPECT_FALSE(parse_client_id_url("http://app.example.com/c", loop));  // not loopback
  EXPECT_TRUE(is_url_client_id("https://a/b"));
  EXPECT_FALSE(is_url_client_id("tgc_0123"));
}

TEST(oauth_cimd_test, allow_list_matches_names_and_addresses) {
  // Verifies case-insensitive names and bracketed or bare IPv6 entries.
  const std::vector<std::string> allow = {"Docs.Internal", "::1", "[fd00::1]"};
  EXPECT_TRUE(allow_listed("docs.internal", allow));
  EXPECT_TRUE(allow_listed("[::1]", allow));
  EXPECT_TRUE(allow_listed("fd00::1", allow));
  EXPECT_FALSE(allow_listed("docs.internal.evil", allow));
  EXPECT_FALSE(allow_listed("127.0.0.1", allow));
}

constexpr std::string_view kUrl = "https://app.example.com/client.json";

TEST(oauth_cimd_test, document_is_accepted_and_read) {
  // Verifies a well-formed document gives the client its name and redirect URIs, id = URL.
  auto c = check_document(kUrl, R"({"client_id":"https://app.example.com/client.json",
      "client_name":"Example <b>App</b>","redirect_uris":["http://127.0.0.1:3000/cb",
      "https://app.example.com/cb"],"token_endpoint_auth_method":"none","logo_uri":"x"})");
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->id, kUrl);
  EXPECT_EQ(c->name, "Example <b>App</b>");  // escaped where shown (the consent page)
  ASSERT_EQ(c->redirect_uris.size(), 2u);
  EXPECT_EQ(c->redirect_uris[1], "https://app.example.com/cb");
}

TEST(oauth_cimd_test, document_checks_refuse_each_fault) {
  // Verifies each refusal: not JSON, not an object, client_id differing (even by a slash or
  // case), missing, no or bad redirect_uris, a long or control-laden name, a secret, and an
  // auth method other than none.
  const std::string uris = R"("redirect_uris":["https://app.example.com/cb"])";
  auto doc = [&](std::string_view rest) {
    return std::string(R"({"client_id":"https://app.example.com/client.json",)") +
           std::string(rest) + "}";
  };
  EXPECT_FALSE(check_document(kUrl, "not json"));
  EXPECT_FALSE(check_document(kUrl, "[]"));
  EXPECT_FALSE(
      check_document(kUrl, R"({"client_id":"https://app.example.com/client.json/",)" + uris + "}"));
  EXPECT_FALSE(
      check_document(kUrl, R"({"client_id":"https://APP.example.com/client.json",)" + uris + "}"));
  EXPECT_FALSE(check_document(kUrl, "{" + uris + "}"));
  EXPECT_FALSE(check_document(kUrl, doc(R"("client_name":"x")")));
  EXPECT_FALSE(check_document(kUrl, doc(R"("redirect_uris":[])")));
  EXPECT_FALSE(check_document(kUrl, doc(R"("redirect_uris":["http://evil.example/cb"])")));
  EXPECT_FALSE(check_document(kUrl, doc(R"("redirect_uris":"https://app.example.com/cb")")));
  EXPECT_FALSE(
      check_document(kUrl, doc(uris + R"(,"client_name":")" + std::string(129, 'n') + "\"")));
  EXPECT_FALSE(check_document(kUrl, doc(uris + R"(,"client_name":"a\nb")")));
  EXPECT_FALSE(check_document(kUrl, doc(uris + R"(,"client_secret":"s")")));
  EXPECT_FALSE(
      check_document(kUrl, doc(uris + R"(,"token_endpoint_auth_method":"client_secret_basic")")));
  auto e = check_document(kUrl, R"({"client_id":"https://other.example/c",)" + uris + "}");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("client_id"), std::string::npos) << e.error();
}

TEST(oauth_cimd_test, cache_lifetime_honours_max_age_within_bounds) {
  // Verifies max-age within [min, max], no-store/no-cache and a malformed max-age as the
  // minimum, and the default without one.
  EXPECT_EQ(cache_secs("", 300, 10, 86400), 300);
  EXPECT_EQ(cache_secs("public, max-age=3600", 300, 10, 86400), 3600);
  EXPECT_EQ(cache_secs("Max-Age=\"120\"", 300, 10, 86400), 120);
  EXPECT_EQ(cache_secs("max-age=5", 300, 10, 86400), 10);
  EXPECT_EQ(cache_secs("max-age=999999999", 300, 10, 86400), 86400);
  EXPECT_EQ(cache_secs("max-age=99999999999999999999999", 300, 10, 86400), 86400);
  EXPECT_EQ(cache_secs("no-store", 300, 10, 86400), 10);
  EXPECT_EQ(cache_secs("max-age=600, no-cache", 300, 10, 86400), 10);
  EXPECT_EQ(cache_secs("max-age=abc", 300, 10, 86400), 10);
  EXPECT_EQ(cache_secs("private", 300, 10, 86400), 300);
}

}  // namespace
}  // namespace tollgate::app::oauth
