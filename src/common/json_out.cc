#include "tollgate/common/json_out.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace tollgate {
namespace {

// 1 where a byte needs escaping inside a JSON string.
constexpr bool needs_escape(unsigned char c) { return c < 0x20 || c == '"' || c == '\\'; }

// True when any byte of the 8 in `w` is < 0x20, '"' or '\\' (SWAR: the classic "has a zero
// byte" test applied to w, w ^ '"' and w ^ '\\', and a "less than" test for control bytes).
inline bool word_needs_escape(uint64_t w) {
  constexpr uint64_t ones = 0x0101010101010101ULL;
  constexpr uint64_t highs = 0x8080808080808080ULL;
  const uint64_t quote = w ^ (ones * '"');
  const uint64_t slash = w ^ (ones * '\\');
  const uint64_t ctrl = (w - ones * 0x20) & ~w;  // high bit set where byte < 0x20 (and < 0x80)
  const uint64_t zq = (quote - ones) & ~quote;
  const uint64_t zs = (slash - ones) & ~slash;
  return ((ctrl | zq | zs) & highs) != 0;
}

// The first byte in [p, end) that needs escaping, or end. Eight bytes at a time, then bytewise.
const char* skip_plain(const char* p, const char* end) {
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    if (word_needs_escape(w)) {
      for (int i = 0; i < 8; ++i) {
        if (needs_escape(static_cast<unsigned char>(p[i]))) {
          return p + i;
        }
      }
    }
    p += 8;  // all plain (the word test can flag a plain word after a borrow; rescanned above)
  }
  while (p < end && !needs_escape(static_cast<unsigned char>(*p))) {
    ++p;
  }
  return p;
}

// Escape of byte c at level 0 (inside one JSON string). Returns the length written to dst.
size_t escape_one(unsigned char c, char* dst) {
  static constexpr char hex[] = "0123456789abcdef";
  switch (c) {
    case '"': dst[0] = '\\'; dst[1] = '"'; return 2;
    case '\\': dst[0] = '\\'; dst[1] = '\\'; return 2;
    case '\n': dst[0] = '\\'; dst[1] = 'n'; return 2;
    case '\r': dst[0] = '\\'; dst[1] = 'r'; return 2;
    case '\t': dst[0] = '\\'; dst[1] = 't'; return 2;
    case '\b': dst[0] = '\\'; dst[1] = 'b'; return 2;
    case '\f': dst[0] = '\\'; dst[1] = 'f'; return 2;
    default:
      dst[0] = '\\'; dst[1] = 'u'; dst[2] = '0'; dst[3] = '0';
      dst[4] = hex[c >> 4]; dst[5] = hex[c & 15];
      return 6;
  }
}

// Appends s escaped `levels` times (1 or 2) in one pass: runs of plain bytes are copied whole.
void append_escaped_levels(out_buffer& out, std::string_view s, int levels) {
  const char* p = s.data();
  const char* end = p + s.size();
  while (p < end) {
    const char* run = p;
    p = skip_plain(p, end);
    out.append(run, static_cast<size_t>(p - run));
    if (p == end) {
      break;
    }
    char once[6];
    size_t n = escape_one(static_cast<unsigned char>(*p), once);
    if (levels == 1) {
      out.append(once, n);
    } else {
      // Every byte of the first escape is '\\', '"', or plain; escape it again.
      char* dst = out.prepare(n * 2);
      size_t w = 0;
      for (size_t i = 0; i < n; ++i) {
        char ch = once[i];
        if (ch == '\\' || ch == '"') {
          dst[w++] = '\\';
        }
        dst[w++] = ch;
      }
      out.commit(w);
    }
    ++p;
  }
}

}  // namespace

void append_json_escaped(out_buffer& out, std::string_view s) { append_escaped_levels(out, s, 1); }

void json_out::raw(std::string_view s) {
  if (!nested_) {
    out_.append(s);
    return;
  }
  append_escaped_levels(out_, s, 1);
}

void json_out::string(std::string_view s) {
  if (!nested_) {
    out_.push_back('"');
    append_escaped_levels(out_, s, 1);
    out_.push_back('"');
    return;
  }
  out_.append("\\\"", 2);
  append_escaped_levels(out_, s, 2);
  out_.append("\\\"", 2);
}

void json_out::number(int64_t v) {
  fmt::format_int f(v);
  out_.append(f.data(), f.size());
}

}  // namespace tollgate
