#include "tollgate/common/json_out.h"

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
constexpr escape_table kEscape{};

// Most bytes one input byte can become: level 1 "\u00XX" (6), level 2 "\\u00XX" (7).
constexpr size_t kWorst[3] = {1, 6, 7};

// Writes byte c escaped `Levels` times (1 or 2) at dst; returns the new end.
template <int Levels>
inline char* put_escaped(char* dst, unsigned char c) {
  static constexpr char hex[] = "0123456789abcdef";
  const char e = kEscape.e[c];
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

// The length of the well-formed UTF-8 sequence (RFC 3629 table 3.7: no overlong forms, no
// surrogates, nothing past U+10FFFF) that starts at p, or 0 when the bytes there are not one.
size_t utf8_sequence(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = p[0];
  size_t n;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    lo = c == 0xE0 ? 0xA0 : 0x80;
    hi = c == 0xED ? 0x9F : 0xBF;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    lo = c == 0xF0 ? 0x90 : 0x80;
    hi = c == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 0;
  }
  if (static_cast<size_t>(end - p) < n || p[1] < lo || p[1] > hi) {
    return 0;
  }
  for (size_t i = 2; i < n; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) {
      return 0;
    }
  }
  return n;
}

// U+FFFD as a JSON escape, escaped `Levels` times.
template <int Levels>
inline char* put_replacement(char* dst) {
  constexpr std::string_view once = "\\ufffd";
  constexpr std::string_view twice = "\\\\ufffd";
  const std::string_view r = Levels == 2 ? twice : once;
  std::memcpy(dst, r.data(), r.size());
  return dst + r.size();
}

// Writes s escaped `Levels` times (1 or 2) at dst (room for the worst case is the caller's) and
// returns the new end: plain 8-byte words are copied whole, the rest byte by byte. `Utf8`: bytes
// that are not part of well-formed UTF-8 become U+FFFD (each such byte one replacement), so the
// output is valid JSON whatever `s` holds; without it bytes >= 0x80 are copied as they are (the
// caller knows `s` is UTF-8).
template <int Levels, bool Utf8 = false>
char* escape_to(char* dst, std::string_view s) {
  constexpr uint64_t highs = 0x8080808080808080ULL;
  const char* p = s.data();
  const char* end = p + s.size();
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    if (!word_needs_escape(w) && !(Utf8 && (w & highs) != 0)) {
      std::memcpy(dst, &w, 8);
      dst += 8;
      p += 8;
      continue;
    }
    if constexpr (!Utf8) {
      for (int i = 0; i < 8; ++i) {
        dst = put_escaped<Levels>(dst, static_cast<unsigned char>(p[i]));
      }
      p += 8;
      continue;
    }
    break;  // Utf8: the byte loop below takes over (a sequence may cross the word's end)
  }
  while (p < end) {
    const auto c = static_cast<unsigned char>(*p);
    if (Utf8 && c >= 0x80) {
      const size_t n = utf8_sequence(reinterpret_cast<const unsigned char*>(p),
                                     reinterpret_cast<const unsigned char*>(end));
      if (n == 0) {
        dst = put_replacement<Levels>(dst);
        ++p;
      } else {
        std::memcpy(dst, p, n);
        dst += n;
        p += n;
      }
      continue;
    }
    dst = put_escaped<Levels>(dst, c);
    ++p;
  }
  return dst;
}

// Appends s escaped `Levels` times (1 or 2) in one pass straight into the buffer: space for the
// worst case is reserved once.
template <int Levels, bool Utf8 = false>
void append_escaped(out_buffer& out, std::string_view s) {
  char* const base = out.prepare(s.size() * kWorst[Levels]);
  out.commit(static_cast<size_t>(escape_to<Levels, Utf8>(base, s) - base));
}

}  // namespace

void append_json_escaped(out_buffer& out, std::string_view s) { append_escaped<1, true>(out, s); }

void json_out::raw(std::string_view s) {
  if (!nested_) {
    out_.append(s);
    return;
  }
  append_escaped<1>(out_, s);
}

void json_out::string(std::string_view s) {
  // One reservation for the quotes and the worst-case escaped text.
  if (!nested_) {
    char* const base = out_.prepare(s.size() * kWorst[1] + 2);
    char* p = base;
    *p++ = '"';
    p = escape_to<1>(p, s);
    *p++ = '"';
    out_.commit(static_cast<size_t>(p - base));
    return;
  }
  char* const base = out_.prepare(s.size() * kWorst[2] + 4);
  char* p = base;
  *p++ = '\\';
  *p++ = '"';
  p = escape_to<2>(p, s);
  *p++ = '\\';
  *p++ = '"';
  out_.commit(static_cast<size_t>(p - base));
}

void json_out::number(int64_t v) {
  char* const base = out_.prepare(number_bound);
  out_.commit(static_cast<size_t>(put_number(base, v) - base));
}

char* json_out::put_escaped(char* dst, std::string_view s) const noexcept {
  return nested_ ? escape_to<2>(dst, s) : escape_to<1>(dst, s);
}

char* json_out::put_number(char* dst, int64_t v) noexcept {
  static constexpr char kPairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  uint64_t u = static_cast<uint64_t>(v);
  if (v < 0) {
    *dst++ = '-';
    u = 0 - u;  // two's complement magnitude, exact for INT64_MIN too
  }
  // Count the digits (from the bit length: log10(2) ~ 1233/4096, corrected by one compare),
  // then write them backwards straight into place, four per division. (A scratch area copied
  // out with one wide move made that load wait for the narrow stores before it: a
  // store-forwarding stall on every number.)
  static constexpr uint64_t kPow10[20] = {1ull,
                                          10ull,
                                          100ull,
                                          1000ull,
                                          10000ull,
                                          100000ull,
                                          1000000ull,
                                          10000000ull,
                                          100000000ull,
                                          1000000000ull,
                                          10000000000ull,
                                          100000000000ull,
                                          1000000000000ull,
                                          10000000000000ull,
                                          100000000000000ull,
                                          1000000000000000ull,
                                          10000000000000000ull,
                                          100000000000000000ull,
                                          1000000000000000000ull,
                                          10000000000000000000ull};
  const unsigned bits = 64 - static_cast<unsigned>(__builtin_clzll(u | 1));
  size_t n = (bits * 1233) >> 12;  // floor(log10(2^bits)): digits - 1 or digits
  n += u >= kPow10[n] ? 1 : 0;     // now the digit count (n = 0 only for u = 0)
  n += n == 0 ? 1 : 0;
  char* p = dst + n;
  while (u >= 10000) {
    const unsigned r = static_cast<unsigned>(u % 10000);
    u /= 10000;
    p -= 4;
    std::memcpy(p, kPairs + 2 * (r / 100), 2);
    std::memcpy(p + 2, kPairs + 2 * (r % 100), 2);
  }
  unsigned w = static_cast<unsigned>(u);  // < 10000
  if (w >= 100) {
    const unsigned r = w % 100;
    w /= 100;
    p -= 2;
    std::memcpy(p, kPairs + 2 * r, 2);
  }
  if (w >= 10) {
    std::memcpy(p - 2, kPairs + 2 * w, 2);
  } else {
    p[-1] = static_cast<char>('0' + w);
  }
  return dst + n;
}

bool needs_escape(std::string_view s) noexcept {
  const char* p = s.data();
  const char* end = p + s.size();
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    if (word_needs_escape(w)) {
      return true;
    }
    p += 8;
  }
  for (; p < end; ++p) {
    if (kEscape.e[static_cast<unsigned char>(*p)] != 0) {
      return true;
    }
  }
  return false;
}

}  // namespace tollgate
