// Tokenizer shared by indexing and querying: lower-case, ASCII folding of Latin-1 and Latin
// Extended-A letters, numbers kept, UTF-8 safe.
//
// A token is a maximal run of word characters: ASCII letters and digits, the foldable Latin
// letters (U+00C0..U+017F, folded to ASCII: "É" -> "e", "ß" -> "ss", "Œ" -> "oe"), and any other
// valid non-ASCII code point that is not punctuation or a symbol (Greek, Cyrillic, CJK, ... are
// copied verbatim, unfolded). Invalid UTF-8 (bad lead or continuation bytes, truncated, overlong,
// surrogates, > U+10FFFF) acts as a separator and is never copied into a token, so every token is
// valid UTF-8. Tokens longer than max_token_bytes are cut at a code-point boundary.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tollgate/common/buffer.h"

namespace tollgate::search {

inline constexpr size_t max_token_bytes = 64;

/// Splits text into tokens, one at a time. Core-local: holds a pointer into `text`, which must
/// outlive the stream, and a small buffer for the current token. Allocation-free.
class token_stream {
 public:
  explicit token_stream(std::string_view text) noexcept
      : p_(reinterpret_cast<const unsigned char*>(text.data())), end_(p_ + text.size()) {}

  /// Stores the next token in `token` (valid until the next call) and returns true, or returns
  /// false at the end of the text.
  bool next(std::string_view& token) noexcept;

 private:
  const unsigned char* p_;
  const unsigned char* end_;
  char buf_[max_token_bytes + 4];
};

namespace detail {
// Per byte: its lower-case form for an ASCII letter or digit, 0 for an ASCII separator, 0x80
// for a byte of a multi-byte sequence (append_tokens leaves those to token_stream).
struct ascii_classes {
  unsigned char v[256];
  constexpr ascii_classes() : v{} {
    for (int c = 0; c < 256; ++c) {
      v[c] = c >= 0x80              ? 0x80
             : c >= 'a' && c <= 'z' ? static_cast<unsigned char>(c)
             : c >= '0' && c <= '9' ? static_cast<unsigned char>(c)
             : c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c - 'A' + 'a')
                                    : 0;
    }
  }
};
inline constexpr ascii_classes ascii_class{};
}  // namespace detail

namespace detail {
// append_tokens' byte-at-a-time path, from `p` (the start of a word or of a separator run) to
// the end of the text; tokens are written at o + n. Returns the new n.
template <class OnToken>
size_t append_tokens_scalar(const unsigned char* p, const unsigned char* const end, char* const o,
                            size_t n, const size_t base, OnToken& on_token) {
  while (p < end) {
    unsigned char m = ascii_class.v[*p];
    if (m == 0) {
      ++p;
      continue;
    }
    const unsigned char* const start = p;
    const size_t at = n;
    while (m != 0 && m != 0x80) {
      if (n - at < max_token_bytes) {
        o[n++] = static_cast<char>(m);
      }
      if (++p == end) {
        break;
      }
      m = ascii_class.v[*p];
    }
    if (p < end && m == 0x80) {  // the word goes on past ASCII: token_stream from its start
      n = at;
      token_stream ts(
          std::string_view(reinterpret_cast<const char*>(start), static_cast<size_t>(end - start)));
      std::string_view tok;
      while (ts.next(tok)) {
        std::memcpy(o + n, tok.data(), tok.size());
        on_token(base + n, tok.size());
        n += tok.size();
      }
      break;
    }
    on_token(base + at, n - at);
  }
  return n;
}

#if defined(__SSE2__)
// Per byte of the 64 at p: bit i of `word` is set when p[i] is an ASCII letter or digit, bit i
// of `high` when p[i] >= 0x80.
inline void classify64(const unsigned char* p, uint64_t& word, uint64_t& high) noexcept {
  word = 0;
  high = 0;
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    // Letters: (c | 0x20) in 'a'..'z'; digits: c in '0'..'9' (signed compares after a shift
    // of the range to the bottom of int8).
    const __m128i lc = _mm_or_si128(v, _mm_set1_epi8(0x20));
    const __m128i alpha =
        _mm_cmplt_epi8(_mm_add_epi8(lc, _mm_set1_epi8(static_cast<char>(128 - 'a'))),
                       _mm_set1_epi8(static_cast<char>(-128 + 26)));
    const __m128i digit =
        _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8(static_cast<char>(128 - '0'))),
                       _mm_set1_epi8(static_cast<char>(-128 + 10)));
    const uint64_t h = static_cast<uint32_t>(_mm_movemask_epi8(v));
    const uint64_t w = static_cast<uint32_t>(_mm_movemask_epi8(_mm_or_si128(alpha, digit)));
    word |= (w & ~h) << (16 * k);
    high |= h << (16 * k);
  }
}
#endif
}  // namespace detail

/// Appends the tokens of `text`, exactly as token_stream gives them, to `out` back to back,
/// and calls on_token(offset, length) for each (its bytes at out.data() + offset). Faster on
/// ASCII: 64 bytes are classified at a time (SSE2) and a token's bytes are lowered 16 at a
/// time (a letter or digit lowered is itself | 0x20). From the first 64-byte block that holds a
/// non-ASCII byte on, the rest goes byte by byte from the word then being read (and from its
/// first non-ASCII word on, through token_stream). A token is never longer than the bytes it
/// comes from, so `out` grows by at most text.size().
template <class OnToken>
void append_tokens(std::string_view text, out_buffer& out, OnToken&& on_token) {
  const auto* const begin = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = begin + text.size();
  const size_t base = out.size();
  char* const o = out.prepare(text.size() + 16);  // 16-byte stores may pass a token's end
  size_t n = 0;                                   // bytes written at o
#if defined(__SSE2__)
  const size_t size = text.size();
  size_t tok = SIZE_MAX;  // the start of the token running into the current block, if any
  size_t b = 0;
  unsigned char pad[64];
  // Writes the token [s, e): its first max_token_bytes bytes, lowered.
  auto emit = [&](size_t s, size_t e) {
    const size_t len = std::min(e - s, max_token_bytes);
    const __m128i bit5 = _mm_set1_epi8(0x20);
    for (size_t k = 0; k < len; k += 16) {
      if (s + k + 16 <= size) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(begin + s + k));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + n + k), _mm_or_si128(v, bit5));
      } else {
        for (size_t i = k; i < len; ++i) {
          o[n + i] = static_cast<char>(begin[s + i] | 0x20);
        }
      }
    }
    on_token(base + n, len);
    n += len;
  };
  for (; b < size; b += 64) {
    const unsigned char* blk = begin + b;
    if (size - b < 64) {
      std::memset(pad, 0, sizeof pad);  // zero bytes are separators
      std::memcpy(pad, blk, size - b);
      blk = pad;
    }
    uint64_t word, high;
    detail::classify64(blk, word, high);
    if (high != 0) {  // from the word being read (or this block) on, byte by byte
      n = detail::append_tokens_scalar(begin + (tok != SIZE_MAX ? tok : b), end, o, n, base,
                                       on_token);
      out.commit(n);
      return;
    }
    uint32_t at = 0;  // bits below `at` are done
    while (at < 64) {
      if (tok == SIZE_MAX) {
        const uint64_t starts = word >> at;
        if (starts == 0) {
          break;
        }
        at += static_cast<uint32_t>(__builtin_ctzll(starts));
        tok = b + at;
      }
      const uint64_t ends = ~word >> at;  // at < 64
      if (ends == 0) {
        break;  // the token runs into the next block
      }
      at += static_cast<uint32_t>(__builtin_ctzll(ends));
      emit(tok, b + at);
      tok = SIZE_MAX;
    }
  }
  if (tok != SIZE_MAX) {
    emit(tok, size);
  }
#else
  n = detail::append_tokens_scalar(begin, end, o, n, base, on_token);
#endif
  out.commit(n);
}

/// Counts the code points of valid UTF-8 text, or returns -1 when `s` is not valid UTF-8.
int64_t utf8_length(std::string_view s) noexcept;

}  // namespace tollgate::search
