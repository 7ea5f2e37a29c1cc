// Names an operator gives things (plans, for now): 1-64 letters, digits, '.', '_' or '-', so
// they print bare in logs, metrics labels and file names. Thread-safe: pure functions.
#pragma once

#include <string_view>

namespace tollgate {

constexpr bool is_plain_name(std::string_view s) noexcept {
  if (s.empty() || s.size() > 64) {
    return false;
  }
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

}  // namespace tollgate
