#include "tollgate/common/json_out.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace tollgate {
namespace {

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

// How byte c is escaped inside one JSON string: 0 when it is copied as is, else the letter
// after the backslash ('u' for the \u00XX form).
struct escape_table {
  char e[256] = {};
  constexpr escape_table() {
    for (int c = 0; c < 0x20; ++c) {
      e[c] = 'u';
    }
    e[static_cast<unsigned char>('"')] = '"';
    e[static_cast<unsigned char>('\\')] = '\\';
    e[static_cast<unsigned char>('\n')] = 'n';
    e[static_cast<unsigned char>('\r')] = 'r';
    e[static_cast<unsigned char>('\t')] = 't';
    e[static_cast<unsigned char>('\b')] = 'b';
    e[static_cast<unsigned char>('\f')] = 'f';
  }
};
constexpr escape_table k_escape{};

// Most bytes one input byte can become: level 1 "\u00XX" (6), level 2 "\\u00XX" (7).
constexpr size_t k_worst[3] = {1, 6, 7};

// Writes byte c escaped `Levels` times (1 or 2) at dst; returns the new end.
template <int Levels>
inline char* put_escaped(char* dst, unsigned char c) {
  static constexpr char hex[] = "0123456789abcdef";
  const char e = k_escape.e[c];
  if (e == 0) {
    *dst++ = static_cast<char>(c);
    return dst;
  }
  *dst++ = '\\';
  if constexpr (Levels == 2) {
    // The level-1 escape is a backslash, then e (or "u00XX"); escaping it again doubles that
    // backslash and puts one before e when e is a quote or a backslash.
    *dst++ = '\\';
    if (e == '"' || e == '\\') {
      *dst++ = '\\';
    }
  }
  *dst++ = e;
  if (e == 'u') {
    *dst++ = '0';
    *dst++ = '0';
    *dst++ = hex[c >> 4];
    *dst++ = hex[c & 15];
  }
  return dst;
}

// Appends s escaped `Levels` times (1 or 2) in one pass straight into the buffer: space for the
// worst case is reserved once, plain 8-byte words are copied whole, the rest byte by byte.
template <int Levels>
void append_escaped(out_buffer& out, std::string_view s) {
  const char* p = s.data();
  const char* end = p + s.size();
  char* const base = out.prepare(s.size() * k_worst[Levels]);
  char* dst = base;
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    if (!word_needs_escape(w)) {
      std::memcpy(dst, &w, 8);
      dst += 8;
    } else {
      for (int i = 0; i < 8; ++i) {
        dst = put_escaped<Levels>(dst, static_cast<unsigned char>(p[i]));
      }
    }
    p += 8;
  }
  while (p < end) {
    dst = put_escaped<Levels>(dst, static_cast<unsigned char>(*p++));
  }
  out.commit(static_cast<size_t>(dst - base));
}

}  // namespace

void append_json_escaped(out_buffer& out, std::string_view s) { append_escaped<1>(out, s); }

void json_out::raw(std::string_view s) {
  if (!nested_) {
    out_.append(s);
    return;
  }
  append_escaped<1>(out_, s);
}

void json_out::string(std::string_view s) {
  if (!nested_) {
    out_.push_back('"');
    append_escaped<1>(out_, s);
    out_.push_back('"');
    return;
  }
  out_.append("\\\"", 2);
  append_escaped<2>(out_, s);
  out_.append("\\\"", 2);
}

void json_out::number(int64_t v) {
  fmt::format_int f(v);
  out_.append(f.data(), f.size());
}

}  // namespace tollgate
