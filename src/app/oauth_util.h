// OAuth 2.1's small pure pieces (no I/O, no state), shared by the endpoints, the store and the
// CLI and tested on their own (tests/app/oauth_util_test.cc): form bodies, PKCE, redirect URIs,
// percent-encoding, HTML escaping and the secrets' formats.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "tollgate/common/result.h"

namespace tollgate::app::oauth {

/// Prefixes of the secrets tollgate issues, so a leaked one is recognised (and never mistaken
/// for an API key, "tg_live_").
inline constexpr std::string_view kAccessPrefix = "tgat_";
inline constexpr std::string_view kRefreshPrefix = "tgrt_";
inline constexpr std::string_view kCodePrefix = "tgac_";
inline constexpr std::string_view kClientPrefix = "tgc_";

/// Limits on what a client may send.
inline constexpr size_t kMaxUri = 512;
inline constexpr size_t kMaxRedirectUris = 10;
inline constexpr size_t kMaxClientName = 128;
inline constexpr size_t kMaxParam = 1024;
inline constexpr size_t kMaxState = 512;

using params = std::map<std::string, std::string, std::less<>>;

/// An application/x-www-form-urlencoded body or query string as name → value. A parameter sent
/// twice, a malformed escape, a value over kMaxParam bytes or more than 32 parameters is an error
/// (RFC 6749 §3.1: parameters must not be repeated).
result<params, std::string> parse_form(std::string_view s);
/// `s` percent-encoded for a query string or a form value (unreserved bytes kept).
std::string pct(std::string_view s);
/// `s` escaped for HTML text and attribute values (& < > " ').
std::string html(std::string_view s);
/// base64url without padding (RFC 4648 §5).
std::string base64url(const uint8_t* p, size_t n);
/// RFC 7636 §4.1: 43-128 characters of [A-Za-z0-9-._~].
bool valid_verifier(std::string_view v) noexcept;
/// RFC 7636 §4.2: BASE64URL(SHA256(verifier)).
std::string s256(std::string_view verifier);
/// A redirect URI a public client may register: https://HOST..., or http:// on a loopback host
/// (RFC 8252 §7.3); absolute, no fragment, at most kMaxUri bytes, no control bytes or spaces.
bool valid_redirect_uri(std::string_view uri) noexcept;
/// The host (with its port) of an absolute URI, for the consent page.
std::string_view uri_host(std::string_view uri) noexcept;
/// `uri` with `query` (already encoded, no leading '?' or '&') appended.
std::string with_query(std::string_view uri, std::string_view query);
/// A fresh secret: `prefix` + 64 hex digits (256 bits from getrandom); empty if none could be
/// read.
std::string new_secret(std::string_view prefix);
/// SHA-256 of `s` as 64 hex digits (how tokens are stored: never the secret itself).
std::string hash_hex(std::string_view s);
/// Constant-time equality (lengths are not secret).
bool equal_ct(std::string_view a, std::string_view b) noexcept;

}  // namespace tollgate::app::oauth
