// Client ID metadata documents: the pure pieces (oauth_cimd.h). The fetch is
// oauth_cimd_fetch.cc.
#include "oauth_cimd.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "oauth_util.h"
#include "tollgate/config/config.h"

namespace tollgate::app::oauth {
namespace {

bool in4(uint32_t a, uint32_t net, int bits) noexcept {
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (a & mask) == net;
}

constexpr uint32_t ip4(unsigned a, unsigned b, unsigned c, unsigned d) noexcept {
  return (uint32_t{a} << 24) | (uint32_t{b} << 16) | (uint32_t{c} << 8) | uint32_t{d};
}

// `a` in host byte order. The IANA special-purpose registry (RFC 6890 and its updates), with
// everything a fetch must not reach by default sorted into the kinds the errors name.
address_kind classify4(uint32_t a) noexcept {
  if (in4(a, ip4(0, 0, 0, 0), 8)) {
    return address_kind::unspecified;  // "this network"; 0.0.0.0 reaches the local host
  }
  if (in4(a, ip4(127, 0, 0, 0), 8)) {
    return address_kind::loopback;
  }
  if (in4(a, ip4(10, 0, 0, 0), 8) || in4(a, ip4(172, 16, 0, 0), 12) ||
      in4(a, ip4(192, 168, 0, 0), 16) || in4(a, ip4(100, 64, 0, 0), 10)) {
    return address_kind::private_net;  // RFC 1918, and RFC 6598's carrier-grade NAT
  }
  if (in4(a, ip4(169, 254, 0, 0), 16)) {
    return address_kind::link_local;  // also where cloud metadata services answer
  }
  if (in4(a, ip4(192, 0, 0, 0), 24) || in4(a, ip4(192, 0, 2, 0), 24) ||
      in4(a, ip4(198, 51, 100, 0), 24) || in4(a, ip4(203, 0, 113, 0), 24) ||
      in4(a, ip4(192, 88, 99, 0), 24) || in4(a, ip4(198, 18, 0, 0), 15) ||
      in4(a, ip4(224, 0, 0, 0), 4) || in4(a, ip4(240, 0, 0, 0), 4)) {
    return address_kind::special;  // protocol assignments, documentation, 6to4 relay,
                                   // benchmarking, multicast, reserved and broadcast
  }
  return address_kind::global;
}

address_kind classify6(const uint8_t* b) noexcept {
  static constexpr uint8_t kZero[16] = {};
  auto v4_at = [&](int i) {
    return (uint32_t{b[i]} << 24) | (uint32_t{b[i + 1]} << 16) | (uint32_t{b[i + 2]} << 8) |
           uint32_t{b[i + 3]};
  };
  if (std::memcmp(b, kZero, 16) == 0) {
    return address_kind::unspecified;
  }
  if (std::memcmp(b, kZero, 15) == 0 && b[15] == 1) {
    return address_kind::loopback;
  }
  // IPv4-mapped (::ffff:a.b.c.d) and the old IPv4-compatible (::a.b.c.d): the socket reaches
  // the IPv4 address, so that address decides. (::1 and :: were taken above.)
  if (std::memcmp(b, kZero, 10) == 0 &&
      ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0))) {
    return classify4(v4_at(12));
  }
  // NAT64's well-known prefix 64:ff9b::/96 (RFC 6052) reaches the IPv4 address it carries.
  static constexpr uint8_t kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(b, kNat64, 12) == 0) {
    return classify4(v4_at(12));
  }
  if ((b[0] & 0xfe) == 0xfc) {
    return address_kind::private_net;  // fc00::/7, unique local
  }
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) {
    return address_kind::link_local;  // fe80::/10
  }
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) {
    return address_kind::private_net;  // fec0::/10, the deprecated site-local
  }
  if ((b[0] & 0xe0) != 0x20) {
    return address_kind::special;  // outside 2000::/3 (multicast ff00::/8, discard 100::/64...)
  }
  if ((b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) ||  // 2001:db8::/32 docs
      (b[0] == 0x20 && b[1] == 0x01 && b[2] < 0x02) ||  // 2001::/23: Teredo, ORCHID, ...
      (b[0] == 0x20 && b[1] == 0x02)) {                 // 2002::/16: 6to4 (any IPv4 inside)
    return address_kind::special;
  }
  return address_kind::global;
}

bool host_char(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::string_view to_string(address_kind k) noexcept {
  switch (k) {
    case address_kind::global:
      return "public";
    case address_kind::loopback:
      return "loopback";
    case address_kind::private_net:
      return "private";
    case address_kind::link_local:
      return "link-local";
    case address_kind::unspecified:
      return "unspecified";
    case address_kind::special:
      return "special-purpose";
  }
  return "special-purpose";
}

address_kind classify(const sockaddr* sa) noexcept {
  if (sa == nullptr) {
    return address_kind::special;
  }
  if (sa->sa_family == AF_INET) {
    return classify4(ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr));
  }
  if (sa->sa_family == AF_INET6) {
    return classify6(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr.s6_addr);
  }
  return address_kind::special;
}

address_kind classify(std::string_view numeric) noexcept {
  char buf[INET6_ADDRSTRLEN + 1];
  if (numeric.size() >= sizeof buf) {
    return address_kind::special;
  }
  std::memcpy(buf, numeric.data(), numeric.size());
  buf[numeric.size()] = '\0';
  in_addr a4{};
  if (::inet_pton(AF_INET, buf, &a4) == 1) {
    return classify4(ntohl(a4.s_addr));
  }
  in6_addr a6{};
  if (::inet_pton(AF_INET6, buf, &a6) == 1) {
    return classify6(a6.s6_addr);
  }
  return address_kind::special;
}

bool is_url_client_id(std::string_view client_id) noexcept {
  return client_id.rfind("https://", 0) == 0 || client_id.rfind("http://", 0) == 0;
}

bool allow_listed(std::string_view host, const std::vector<std::string>& allow) noexcept {
  if (!host.empty() && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  for (const std::string& a : allow) {
    std::string_view e = a;
    if (!e.empty() && e.front() == '[' && e.back() == ']') {
      e = e.substr(1, e.size() - 2);
    }
    if (e.size() == host.size() && std::equal(e.begin(), e.end(), host.begin(), [](char x, char y) {
          return std::tolower(static_cast<unsigned char>(x)) ==
                 std::tolower(static_cast<unsigned char>(y));
        })) {
      return true;
    }
  }
  return false;
}

result<cimd_target, std::string> parse_client_id_url(std::string_view url,
                                                     const std::vector<std::string>& allow) {
  auto bad = [](std::string_view why) {
    return unexpected(
        fmt::format("This app's client_id is not a usable metadata document URL: {}.", why));
  };
  if (url.size() > kMaxUri) {
    return bad("it is longer than 512 bytes");
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '"' || c == '<' || c == '>' ||
        c == '\\' || c == '`') {
      return bad("it holds a space, a control byte or a character URLs may not hold");
    }
  }
  cimd_target t;
  t.https = url.rfind("https://", 0) == 0;
  if (!t.https && url.rfind("http://", 0) != 0) {
    return bad("it must start with https://");
  }
  if (url.find('#') != std::string_view::npos) {
    return bad("it must not have a fragment (#...)");
  }
  const std::string_view rest = url.substr(t.https ? 8 : 7);
  const size_t end = rest.find_first_of("/?");
  const std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos) {
    return bad("it must not hold a user name or password");
  }
  std::string_view host = authority;
  std::string_view port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) {
      return bad("its IPv6 address is not closed by ']'");
    }
    port = host.substr(close + 1);
    host = host.substr(1, close - 1);
    for (char c : host) {
      if (std::isxdigit(static_cast<unsigned char>(c)) == 0 && c != ':' && c != '.') {
        return bad("its host is not an IPv6 address");
      }
    }
  } else {
    const size_t colon = host.find(':');
    port = colon == std::string_view::npos ? std::string_view() : host.substr(colon);
    host = host.substr(0, colon);
    if (!std::all_of(host.begin(), host.end(), host_char)) {
      return bad("its host is not a host name or an address");
    }
  }
  if (host.empty()) {
    return bad("it has no host");
  }
  t.host = lower(host);
  t.port = t.https ? 443 : 80;
  if (!port.empty()) {
    unsigned p = 0;
    const std::string_view digits = port.substr(1);
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), p);
    if (port[0] != ':' || digits.empty() || r.ec != std::errc() ||
        r.ptr != digits.data() + digits.size() || p < 1 || p > 65535) {
      return bad("its port is not a number from 1 to 65535");
    }
    t.port = static_cast<uint16_t>(p);
  }
  const std::string_view path =
      end == std::string_view::npos ? std::string_view() : rest.substr(end);
  const std::string_view path_only = path.substr(0, path.find('?'));
  if (path_only.size() < 2 || path_only[0] != '/') {
    return bad("it must have a path (https://host/path), not only a host");
  }
  for (size_t i = 1; i <= path_only.size();) {
    const size_t slash = std::min(path_only.find('/', i), path_only.size());
    const std::string seg = lower(path_only.substr(i, slash - i));
    if (seg == "." || seg == ".." || seg == "%2e" || seg == "%2e%2e" || seg == ".%2e" ||
        seg == "%2e.") {
      return bad("its path must not hold a \".\" or \"..\" segment");
    }
    i = slash + 1;
  }
  if (!t.https && !(config::is_loopback_host(t.host) && allow_listed(t.host, allow))) {
    return bad(
        "it must start with https:// (http:// is accepted only for a loopback host in "
        "[oauth] cimd_allow, for tests)");
  }
  return t;
}

result<client, std::string> check_document(std::string_view url, std::string_view body) {
  auto bad = [](std::string_view why) {
    return unexpected(fmt::format("This app's metadata document cannot be used: {}.", why));
  };
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::object obj;
  const simdjson::padded_string padded(body);
  if (parser.parse(padded).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(obj) != simdjson::SUCCESS) {
    return bad("it is not a JSON object");
  }
  client c;
  bool have_id = false;
  bool have_uris = false;
  for (auto field : obj) {
    const std::string_view k = field.key;
    std::string_view sv;
    if (k == "client_id") {
      if (field.value.get_string().get(sv) != simdjson::SUCCESS || sv != url) {
        return bad(fmt::format("its client_id is not the URL it was fetched from ({})", url));
      }
      have_id = true;
    } else if (k == "redirect_uris") {
      simdjson::dom::array arr;
      if (field.value.get_array().get(arr) != simdjson::SUCCESS) {
        return bad("redirect_uris is not an array");
      }
      for (auto u : arr) {
        if (u.get_string().get(sv) != simdjson::SUCCESS || !valid_redirect_uri(sv)) {
          return bad(
              "each redirect URI must be an absolute https:// URI, or http:// on a "
              "loopback host, without a fragment, at most 512 bytes");
        }
        c.redirect_uris.emplace_back(sv);
      }
      have_uris = true;
    } else if (k == "client_name") {
      if (field.value.get_string().get(sv) != simdjson::SUCCESS || sv.size() > kMaxClientName ||
          std::any_of(sv.begin(), sv.end(), [](char ch) {
            return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
          })) {
        return bad(
            "client_name must be a string of at most 128 bytes without control "
            "characters");
      }
      c.name = sv;
    } else if (k == "token_endpoint_auth_method") {
      if (field.value.get_string().get(sv) != simdjson::SUCCESS || sv != "none") {
        return bad(
            "token_endpoint_auth_method must be \"none\" (a public client; PKCE protects "
            "the code)");
      }
    } else if (k == "client_secret" || k == "client_secret_expires_at") {
      return bad("it holds a client_secret, which a public document cannot keep secret");
    }
  }
  if (!have_id) {
    return bad("it has no client_id");
  }
  if (!have_uris || c.redirect_uris.empty() || c.redirect_uris.size() > kMaxRedirectUris) {
    return bad("it must list 1 to 10 redirect_uris");
  }
  c.id = std::string(url);
  return c;
}

int64_t cache_secs(std::string_view cc, int64_t default_secs, int64_t min_secs,
                   int64_t max_secs) noexcept {
  int64_t secs = default_secs;
  while (!cc.empty()) {
    const size_t comma = cc.find(',');
    std::string_view d = cc.substr(0, comma);
    cc = comma == std::string_view::npos ? std::string_view() : cc.substr(comma + 1);
    while (!d.empty() && (d.front() == ' ' || d.front() == '\t')) {
      d.remove_prefix(1);
    }
    while (!d.empty() && (d.back() == ' ' || d.back() == '\t')) {
      d.remove_suffix(1);
    }
    auto is = [&](std::string_view name) {
      return d.size() >= name.size() &&
             std::equal(name.begin(), name.end(), d.begin(), [](char x, char y) {
               return x == std::tolower(static_cast<unsigned char>(y));
             });
    };
    if ((is("no-store") && d.size() == 8) || (is("no-cache") && d.size() == 8)) {
      return min_secs;
    }
    if (is("max-age=")) {
      std::string_view v = d.substr(8);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
        v = v.substr(1, v.size() - 2);
      }
      int64_t n = 0;
      auto r = std::from_chars(v.data(), v.data() + v.size(), n);
      if (r.ec == std::errc::result_out_of_range) {
        n = max_secs;
      } else if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 0) {
        n = 0;  // a malformed max-age means stale (RFC 9111 §4.2.1): kept min_secs only
      }
      secs = n;
    }
  }
  return std::clamp(secs, min_secs, max_secs);
}

}  // namespace tollgate::app::oauth
