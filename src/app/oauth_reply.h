// The OAuth endpoints' shared pieces (oauth_http.cc, oauth_token.cc): the answers every
// endpoint gives the same way, and the form helpers.
#pragma once

#include <string>
#include <string_view>

#include "oauth.h"
#include "oauth_util.h"
#include "tollgate/http/request.h"

namespace tollgate::app::oauth {

using oauth_reply = server::oauth_reply;

// CORS for browser-based clients (the Inspector): discovery, registration, token and revoke
// carry no cookie and no ambient authority, so any origin may call them.
inline constexpr std::string_view kCors =
    "Access-Control-Allow-Origin: *\r\n"
    "Access-Control-Allow-Headers: Content-Type, Authorization, MCP-Protocol-Version\r\n"
    "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n";
inline constexpr std::string_view kNoStore = "Cache-Control: no-store\r\nPragma: no-cache\r\n";

/// An RFC 6749 §5.2 JSON error (CORS, no-store).
oauth_reply json_error(int status, std::string_view error, std::string_view description);
/// An HTML page with the page headers (framing, caching, CSP).
oauth_reply page(int status, std::string body);
oauth_reply error_page_answer(int status, std::string_view title, std::string_view message);
/// A request waiting for a document or the worker: handle() writes nothing for it.
oauth_reply pending_answer();
oauth_reply redirect(std::string_view location);
/// Whether the body is application/x-www-form-urlencoded.
bool form_body(const http::request& req);
/// Parameter `name` of `p`, or empty.
std::string get(const params& p, std::string_view name);

}  // namespace tollgate::app::oauth
