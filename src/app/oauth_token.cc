// The token and revocation endpoints (oauth.h): POST /token (authorization_code, refresh_token
// with rotation) and POST /revoke (RFC 7009). The request is checked on the core; the store's
// part (a code redeemed, tokens minted or revoked: an fdatasync, or Redis) runs on the worker.
#include <fmt/format.h>

#include "admin_util.h"
#include "oauth.h"
#include "oauth_cimd.h"
#include "oauth_reply.h"
#include "oauth_store.h"
#include "oauth_util.h"

namespace tollgate::app::oauth {

oauth_reply server::token(const http::request& req, int64_t now, call& cl) {
  if (!form_body(req)) {
    return json_error(400, "invalid_request",
                      "The token request is sent as application/x-www-form-urlencoded.");
  }
  auto p = parse_form(req.body);
  if (!p) {
    return json_error(400, "invalid_request", p.error());
  }
  const std::string client_id = get(*p, "client_id");
  client c;
  std::string why;
  const found f = client_id.empty() ? found::no : find_client(client_id, now, cl, c, why);
  if (f == found::pending) {
    return pending_answer();
  }
  if (f == found::no) {
    oauth_reply a = json_error(401, "invalid_client",
                               client_id.empty() ? "client_id is missing." : std::string_view(why));
    a.headers += "WWW-Authenticate: Basic realm=\"tollgate\"\r\n";
    return a;
  }
  const std::string grant_type = get(*p, "grant_type");
  if (grant_type != "authorization_code" && grant_type != "refresh_token") {
    return json_error(400, "unsupported_grant_type",
                      "grant_type must be authorization_code or refresh_token.");
  }
  // The code or refresh token is the store's (a file with fdatasync, or Redis): the rest is
  // done on the worker.
  return off_core(cl, [this, p = std::move(*p), client_id, grant_type, b = base(req), now] {
    return redeem(p, client_id, grant_type, b, now);
  });
}

oauth_reply server::redeem(const params& p_, const std::string& client_id,
                           const std::string& grant_type, const std::string& b, int64_t now) {
  const params* p = &p_;
  result<issued, std::string> t = unexpected(std::string());
  if (grant_type == "authorization_code") {
    auto d = store_->take_code(get(*p, "code"), now);  // gone now, whatever follows
    if (!d || d->client_id != client_id) {
      return json_error(400, "invalid_grant",
                        "The code is unknown, used, expired or issued to another client.");
    }
    if (get(*p, "redirect_uri") != d->redirect_uri) {
      return json_error(400, "invalid_grant", "redirect_uri differs from the authorization's.");
    }
    const std::string verifier = get(*p, "code_verifier");
    if (!valid_verifier(verifier) || !equal_ct(s256(verifier), d->challenge)) {
      return json_error(400, "invalid_grant", "code_verifier does not match code_challenge.");
    }
    const std::string resource = get(*p, "resource");
    if (!resource.empty() && resource != (d->resource.empty() ? b + "/mcp" : d->resource)) {
      return json_error(400, "invalid_target", "resource must be this server's " + b + "/mcp");
    }
    if (!key_live(d->key_id)) {
      return json_error(400, "invalid_grant", "The API key behind this code has been revoked.");
    }
    t = store_->new_grant(d->key_id, client_id, d->scope, now);
    if (!t) {
      return json_error(503, "temporarily_unavailable", "The grant could not be stored.");
    }
  } else {
    const std::string resource = get(*p, "resource");
    if (!resource.empty() && resource != b + "/mcp") {
      return json_error(400, "invalid_target", "resource must be this server's " + b + "/mcp");
    }
    auto r = store_->refresh(get(*p, "refresh_token"), client_id, now,
                             [this](uint64_t id) { return key_live(id); });
    if (!r) {
      if (r.error() == store::refresh_error::io) {
        return json_error(503, "temporarily_unavailable", "The new tokens could not be stored.");
      }
      return json_error(400, "invalid_grant",
                        r.error() == store::refresh_error::reused
                            ? "This refresh token was already used: the grant is revoked. "
                              "Authorize again."
                            : "The refresh token is unknown, expired, revoked or another "
                              "client's.");
    }
    t = std::move(*r);
  }
  oauth_reply a;
  a.headers = std::string(kCors) + std::string(kNoStore);
  a.body =
      fmt::format(R"({{"access_token":{},"token_type":"Bearer","expires_in":{},"refresh_token":{})",
                  admin::js(t->access), t->expires_in, admin::js(t->refresh));
  // What is granted, whatever was asked (RFC 6749 §3.3: the server may ignore a requested
  // scope, and then says what it issued): the one scope there is, all of the key's tools.
  a.body += R"(,"scope":"mcp"})";
  return a;
}

oauth_reply server::revoke(const http::request& req, int64_t now, call& cl) {
  if (!form_body(req)) {
    return json_error(400, "invalid_request", "The request is sent form-encoded.");
  }
  auto p = parse_form(req.body);
  if (!p) {
    return json_error(400, "invalid_request", p.error());
  }
  // A metadata document's client is not fetched to revoke its own tokens: a token revokes
  // only the grant of the client_id it was issued to.
  const std::string client_id = get(*p, "client_id");
  const bool url_client =
      cimd_ && is_url_client_id(client_id) && parse_client_id_url(client_id, s_.oauth_cimd_allow);
  if (!url_client && !client_id.empty()) {
    client c;
    std::string why;
    if (find_client(client_id, now, cl, c, why) == found::pending) {
      return pending_answer();
    }
    if (c.id.empty()) {
      return json_error(401, "invalid_client", "client_id is missing or not registered.");
    }
  }
  if (client_id.empty()) {
    return json_error(401, "invalid_client", "client_id is missing or not registered.");
  }
  return off_core(cl, [this, token = get(*p, "token"), client_id, now] {
    if (!store_->revoke_token(token, client_id, now)) {
      return json_error(503, "temporarily_unavailable", "The revocation could not be stored.");
    }
    oauth_reply a;
    a.headers = std::string(kCors) + std::string(kNoStore);
    a.body = "{}";
    return a;
  });
}

}  // namespace tollgate::app::oauth
