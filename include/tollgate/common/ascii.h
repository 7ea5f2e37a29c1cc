// ASCII text helpers for the protocol modules (http, net, mcp, search): case-insensitive
// comparison, trimming, and comma-separated lists. Nothing here allocates or reads outside the
// string it is given. The HTTP grammar's own byte tables and scans stay private to src/http.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tollgate::ascii {

constexpr char to_lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + ('a' - 'A')) : c;
}

/// Case-insensitive equality of two arbitrary byte strings (ASCII letters fold).
inline bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) {
      return false;
    }
  }
  return true;
}

/// Fast case-insensitive equality against `lower`, a literal made only of lowercase letters,
/// digits and '-', '.', '/', '*'. Valid when `s` holds no control byte other than HTAB (true of
/// validated names and values): then `c | 0x20` equals such a literal byte only for that byte
/// or its uppercase letter (the other byte that folds onto a digit or one of those four marks is
/// a control byte, and HTAB folds onto ')').
inline bool iequals_lower(std::string_view s, std::string_view lower) noexcept {
  if (s.size() != lower.size()) {
    return false;
  }
  if (s.size() >= 8) {
    // Eight bytes at a time (the last word overlaps the one before it): every byte of such a
    // literal has bit 0x20 set, so OR-ing 0x20 into each byte of `s` is the same fold.
    constexpr uint64_t kFold = 0x2020202020202020ull;
    const size_t n = s.size();
    uint64_t diff = 0;
    uint64_t a;
    uint64_t b;
    for (size_t i = 0; i + 8 < n; i += 8) {
      std::memcpy(&a, s.data() + i, 8);
      std::memcpy(&b, lower.data() + i, 8);
      diff |= (a | kFold) ^ b;
    }
    std::memcpy(&a, s.data() + n - 8, 8);
    std::memcpy(&b, lower.data() + n - 8, 8);
    diff |= (a | kFold) ^ b;
    return diff == 0;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (static_cast<char>(s[i] | 0x20) != lower[i]) {
      return false;
    }
  }
  return true;
}

inline bool is_ows(char c) noexcept { return c == ' ' || c == '\t'; }

/// `s` without the HTTP optional white space (SP, HTAB) at either end (RFC 9110 §5.6.3).
inline std::string_view trim_ows(std::string_view s) noexcept {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && is_ows(s[b])) {
    ++b;
  }
  while (e > b && is_ows(s[e - 1])) {
    --e;
  }
  return s.substr(b, e - b);
}

/// `s` without white space (SP, HTAB, CR, LF: JSON's white space, and the line ends of text)
/// at either end. Most inputs have none: one compare at each end then.
inline std::string_view trim(std::string_view s) noexcept {
  if (s.empty() ||
      (static_cast<unsigned char>(s.front()) > ' ' && static_cast<unsigned char>(s.back()) > ' ')) {
    return s;
  }
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && ws(s.back())) {
    s.remove_suffix(1);
  }
  while (!s.empty() && ws(s.front())) {
    s.remove_prefix(1);
  }
  return s;
}

/// Calls f(element) for each non-empty, OWS-trimmed element of a comma-separated list; stops
/// early and returns false when f returns false.
template <class F>
bool for_each_list_element(std::string_view v, F&& f) {
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    if (comma == std::string_view::npos) {
      comma = v.size();
    }
    const std::string_view el = trim_ows(v.substr(start, comma - start));
    if (!el.empty() && !f(el)) {
      return false;
    }
    start = comma + 1;
  }
  return true;
}

}  // namespace tollgate::ascii
