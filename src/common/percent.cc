#include "tollgate/common/percent.h"

namespace tollgate {

int hex_digit_value(char c) noexcept {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

bool percent_decode(std::string_view s, out_buffer& out, bool plus_is_space) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else if (c == '%') {
      if (i + 2 >= s.size()) {
        return false;
      }
      const int hi = hex_digit_value(s[i + 1]);
      const int lo = hex_digit_value(s[i + 2]);
      if (hi < 0 || lo < 0) {
        return false;
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return true;
}

void percent_encode(std::string_view s, out_buffer& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
}

std::string percent_encode(std::string_view s) {
  out_buffer b;
  percent_encode(s, b);
  return std::string(b.view());
}

}  // namespace tollgate
