#include "oauth_page.h"

#include "oauth_util.h"

namespace tollgate::app::oauth {
namespace {

constexpr std::string_view kHead = R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>)";

constexpr std::string_view kStyle = R"(</title>
<style>
body{font:16px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:#f4f5f7;
color:#1d2330;margin:0;display:flex;min-height:100vh;align-items:center;justify-content:center}
main{background:#fff;max-width:28rem;width:100%;margin:1rem;padding:2rem;border-radius:12px;
box-shadow:0 2px 12px rgba(0,0,0,.08)}
h1{font-size:1.3rem;margin:0 0 1rem}
.who{background:#f4f5f7;border-radius:8px;padding:.75rem 1rem;margin:0 0 1rem}
.host{font-family:ui-monospace,monospace;word-break:break-all}
label{display:block;font-weight:600;margin:1rem 0 .3rem}
input[type=password]{width:100%;box-sizing:border-box;padding:.6rem;font:inherit;
border:1px solid #b8bfcc;border-radius:6px}
.err{color:#a61b1b;background:#fdecec;border-radius:6px;padding:.5rem .75rem}
.row{display:flex;gap:.75rem;margin-top:1.25rem}
button{font:inherit;padding:.6rem 1.2rem;border-radius:6px;border:1px solid #2456d6;cursor:pointer}
.allow{background:#2456d6;color:#fff}.deny{background:#fff;color:#2456d6}
small{color:#5b6475}
</style></head><body><main>
)";

}  // namespace

std::string consent_page(const consent_view& v) {
  std::string p;
  p.reserve(4096);
  p += kHead;
  p += "Connect to tollgate";
  p += kStyle;
  p += "<h1>Connect an app to your tollgate key</h1>\n<div class=\"who\"><strong>";
  p += html(v.client_name.empty() ? std::string_view("An unnamed app") : v.client_name);
  p += "</strong> wants to call tollgate with your API key.<br>\nYou will be sent back to "
       "<span class=\"host\">";
  p += html(v.redirect_host);
  p += "</span>.</div>\n";
  if (!v.message.empty()) {
    p += "<p class=\"err\" role=\"alert\">";
    p += html(v.message);
    p += "</p>\n";
  }
  p += "<form method=\"post\" action=\"/authorize\">\n";
  for (const auto& [name, value] : v.hidden) {
    p += "<input type=\"hidden\" name=\"";
    p += html(name);
    p += "\" value=\"";
    p += html(value);
    p += "\">\n";
  }
  p += "<label for=\"api_key\">Your tollgate API key</label>\n"
       "<input type=\"password\" id=\"api_key\" name=\"api_key\" autocomplete=\"off\" "
       "required autofocus placeholder=\"tg_live_...\">\n"
       "<small>The app never sees your key: it gets a token that acts as this key (its plan, "
       "rate limit and monthly quota) until you revoke it.</small>\n"
       "<div class=\"row\"><button class=\"allow\" type=\"submit\" name=\"action\" "
       "value=\"allow\">Allow</button>\n<button class=\"deny\" type=\"submit\" name=\"action\" "
       "value=\"deny\" formnovalidate>Deny</button></div>\n</form>\n</main></body></html>\n";
  return p;
}

std::string error_page(std::string_view title, std::string_view message) {
  std::string p;
  p.reserve(2048);
  p += kHead;
  p += html(title);
  p += kStyle;
  p += "<h1>";
  p += html(title);
  p += "</h1>\n<p class=\"err\">";
  p += html(message);
  p += "</p>\n<p><small>Start the connection again from the app you were using.</small></p>\n"
       "</main></body></html>\n";
  return p;
}

}  // namespace tollgate::app::oauth
