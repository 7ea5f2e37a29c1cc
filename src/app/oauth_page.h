// The HTML tollgate's authorization server shows a person: the consent page (which client asks,
// where it will send them, a field for their API key) and the error page for a request that
// cannot be redirected. Server-rendered, no script, no asset from elsewhere; every value a client
// chose is HTML-escaped here.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tollgate::app::oauth {

/// What the consent page shows and carries.
struct consent_view {
  std::string_view client_name;    ///< as registered (escaped here)
  std::string_view redirect_host;  ///< where the browser goes next
  std::string_view message;        ///< a wrong key's sentence; empty on first show
  /// The authorization request, carried in hidden fields with its CSRF token.
  std::vector<std::pair<std::string_view, std::string_view>> hidden;
};

std::string consent_page(const consent_view& v);
std::string error_page(std::string_view title, std::string_view message);

/// The header lines every page carries: no framing (CSP frame-ancestors, X-Frame-Options), no
/// caching, no referrer, no sniffing.
inline constexpr std::string_view kPageHeaders =
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'\r\n"
    "X-Frame-Options: DENY\r\n"
    "Cache-Control: no-store\r\n"
    "Pragma: no-cache\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "X-Content-Type-Options: nosniff\r\n";

}  // namespace tollgate::app::oauth
