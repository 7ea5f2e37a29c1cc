#include "oauth_util.h"

#include <openssl/crypto.h>

#include "tollgate/common/buffer.h"
#include "tollgate/common/percent.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::app::oauth {
namespace {

bool unreserved(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

}  // namespace

result<params, std::string> parse_form(std::string_view s) {
  params out;
  size_t i = 0;
  while (i < s.size()) {
    size_t amp = s.find('&', i);
    if (amp == std::string_view::npos) {
      amp = s.size();
    }
    const std::string_view part = s.substr(i, amp - i);
    i = amp + 1;
    if (part.empty()) {
      continue;
    }
    const size_t eq = part.find('=');
    const std::string_view rn = part.substr(0, eq);
    const std::string_view rv =
        eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1);
    if (rv.size() > kMaxParam * 3 || rn.size() > 64) {
      return unexpected(std::string("a parameter is too long"));
    }
    out_buffer n, v;
    if (!percent_decode(rn, n, true) || !percent_decode(rv, v, true)) {
      return unexpected(std::string("a parameter has a malformed %-escape"));
    }
    if (v.size() > kMaxParam) {
      return unexpected(std::string(n.view()) + " is too long");
    }
    if (out.size() >= 32) {
      return unexpected(std::string("too many parameters"));
    }
    if (!out.emplace(std::string(n.view()), std::string(v.view())).second) {
      return unexpected(std::string(n.view()) + " is given more than once");
    }
  }
  return out;
}

std::string pct(std::string_view s) { return percent_encode(s); }

std::string html(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string base64url(const uint8_t* p, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  if (n - i == 1) {
    const uint32_t v = uint32_t{p[i]} << 16;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
  } else if (n - i == 2) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
  }
  return out;
}

bool valid_verifier(std::string_view v) noexcept {
  if (v.size() < 43 || v.size() > 128) {
    return false;
  }
  for (char c : v) {
    if (!unreserved(c)) {
      return false;
    }
  }
  return true;
}

std::string s256(std::string_view verifier) {
  const quota::digest d = quota::sha256(verifier);
  return base64url(d.data(), d.size());
}

std::string_view uri_host(std::string_view uri) noexcept {
  const size_t scheme = uri.find("://");
  if (scheme == std::string_view::npos) {
    return {};
  }
  std::string_view rest = uri.substr(scheme + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  const size_t at = rest.rfind('@');
  return at == std::string_view::npos ? rest : rest.substr(at + 1);
}

bool valid_redirect_uri(std::string_view uri) noexcept {
  if (uri.empty() || uri.size() > kMaxUri || uri.find('#') != std::string_view::npos) {
    return false;
  }
  for (char c : uri) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '"' || c == '<' || c == '>' ||
        c == '\\' || c == '`') {
      return false;
    }
  }
  const bool https = uri.rfind("https://", 0) == 0;
  const bool http = uri.rfind("http://", 0) == 0;
  if (!https && !http) {
    return false;
  }
  const std::string_view authority =
      uri.substr(https ? 8 : 7).substr(0, uri.substr(https ? 8 : 7).find_first_of("/?"));
  if (authority.empty() || authority.find('@') != std::string_view::npos) {
    return false;  // no userinfo: the host shown on the consent page is the one redirected to
  }
  if (https) {
    return true;
  }
  // Loopback only (RFC 8252 §7.3); the port may be any.
  std::string_view host = authority;
  if (host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  return host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

std::string with_query(std::string_view uri, std::string_view query) {
  std::string out(uri);
  out.push_back(uri.find('?') == std::string_view::npos ? '?' : '&');
  out.append(query);
  return out;
}

std::string new_secret(std::string_view prefix) {
  uint8_t b[32];
  if (!quota::fs::random_bytes(b, sizeof b)) {
    return {};
  }
  std::string s(prefix);
  s += quota::fs::to_hex(b, sizeof b);
  OPENSSL_cleanse(b, sizeof b);
  return s;
}

std::string hash_hex(std::string_view s) {
  const quota::digest d = quota::sha256(s);
  return quota::fs::to_hex(d.data(), d.size());
}

bool equal_ct(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tollgate::app::oauth
