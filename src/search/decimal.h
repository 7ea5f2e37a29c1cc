// Private: the one unsigned decimal reader of the search library (REST arguments, the corpus
// generator's flags).
#pragma once

#include <cstdint>
#include <string_view>

namespace tollgate::search {

/// `s` as an unsigned decimal of at most `max`: 1..20 ASCII digits, nothing else (no sign, no
/// space), no overflow. Leaves `out` untouched when false.
inline bool parse_decimal(std::string_view s, uint64_t max, uint64_t& out) noexcept {
  if (s.empty() || s.size() > 20) {
    return false;
  }
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return false;
    }
    const auto d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) {
      return false;
    }
    v = v * 10 + d;
  }
  if (v > max) {
    return false;
  }
  out = v;
  return true;
}

}  // namespace tollgate::search
