// The HTTP grammar's byte classes, private to the parser and request lookups: character class
// tables (RFC 9110 tchar, request-target bytes), an SSE2 skip over field-name bytes and an SSE2
// scan for the first control byte of a field value. Nothing here allocates or reads outside the
// ranges it is given. Case-insensitive comparison and trimming are tollgate/common/ascii.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "tollgate/common/ascii.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tollgate::http::detail {

/// RFC 9110 §5.6.2 tchar: the bytes of a method or a field name.
constexpr bool tchar_slow(unsigned char c) noexcept {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
    return true;
  }
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

/// Bytes accepted inside a request-target: visible ASCII except '#' (a fragment is never sent).
constexpr bool target_slow(unsigned char c) noexcept { return c > 0x20 && c < 0x7f && c != '#'; }

template <bool (*F)(unsigned char)>
constexpr std::array<bool, 256> make_table() noexcept {
  std::array<bool, 256> t{};
  for (int i = 0; i < 256; ++i) {
    t[static_cast<size_t>(i)] = F(static_cast<unsigned char>(i));
  }
  return t;
}

inline constexpr std::array<bool, 256> tchar_table = make_table<tchar_slow>();
inline constexpr std::array<bool, 256> target_table = make_table<target_slow>();

inline bool is_tchar(char c) noexcept { return tchar_table[static_cast<unsigned char>(c)]; }
inline bool is_target(char c) noexcept { return target_table[static_cast<unsigned char>(c)]; }

/// First byte in [p, end) that is not an ASCII letter, digit or '-' (the bytes of nearly every
/// real field name; all are tchars), else a position at most 15 bytes before end: the caller
/// goes on from there with its exact byte-by-byte scan, which ends where it would have ended
/// from p. Reads only inside [p, end).
inline const char* skip_name_bytes(const char* p, const char* end) noexcept {
#if defined(__SSE2__)
  const __m128i k20 = _mm_set1_epi8(0x20);
  const __m128i ka = _mm_set1_epi8('a' - 1);
  const __m128i kz = _mm_set1_epi8('z' + 1);
  const __m128i k0 = _mm_set1_epi8('0' - 1);
  const __m128i k9 = _mm_set1_epi8('9' + 1);
  const __m128i kdash = _mm_set1_epi8('-');
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // Signed compares: bytes >= 0x80 are negative and fall outside every range. Folding with
    // 0x20 maps only 'A'-'Z' (and 'a'-'z' themselves) into 'a'-'z'.
    const __m128i low = _mm_or_si128(v, k20);
    const __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(low, ka), _mm_cmplt_epi8(low, kz));
    const __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(v, k0), _mm_cmplt_epi8(v, k9));
    const __m128i ok = _mm_or_si128(_mm_or_si128(letter, digit), _mm_cmpeq_epi8(v, kdash));
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(ok)) ^ 0xffffu;
    if (mask != 0) {
      return p + __builtin_ctz(mask);
    }
    p += 16;
  }
#else
  (void)end;
#endif
  return p;
}

/// First byte in [p, end) that is a control byte (< 0x20, including HTAB) or DEL, else end.
/// Reads only inside [p, end).
inline const char* find_ctl(const char* p, const char* end) noexcept {
#if defined(__SSE2__)
  const __m128i k1f = _mm_set1_epi8(0x1f);
  const __m128i k7f = _mm_set1_epi8(0x7f);
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // unsigned v <= 0x1f  <=>  min(v, 0x1f) == v
    const __m128i ctl = _mm_cmpeq_epi8(_mm_min_epu8(v, k1f), v);
    const __m128i del = _mm_cmpeq_epi8(v, k7f);
    const int mask = _mm_movemask_epi8(_mm_or_si128(ctl, del));
    if (mask != 0) {
      return p + __builtin_ctz(static_cast<unsigned>(mask));
    }
    p += 16;
  }
#endif
  while (p < end) {
    const auto c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c == 0x7f) {
      return p;
    }
    ++p;
  }
  return end;
}

}  // namespace tollgate::http::detail
