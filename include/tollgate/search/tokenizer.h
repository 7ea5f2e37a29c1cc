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

/// Appends the tokens of `text`, exactly as token_stream gives them, to `out` back to back,
/// and calls on_token(offset, length) for each (its bytes at out.data() + offset). Faster on
/// ASCII: one table look-up per byte, written straight to `out`. From the first token that
/// holds a non-ASCII byte on, the rest of the text goes through token_stream. A token is never
/// longer than the bytes it comes from, so `out` grows by at most text.size().
template <class OnToken>
void append_tokens(std::string_view text, out_buffer& out, OnToken&& on_token) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = p + text.size();
  const size_t base = out.size();
  char* const o = out.prepare(text.size());
  size_t n = 0;  // bytes written at o
  while (p < end) {
    unsigned char m = detail::ascii_class.v[*p];
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
      m = detail::ascii_class.v[*p];
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
  out.commit(n);
}

/// Counts the code points of valid UTF-8 text, or returns -1 when `s` is not valid UTF-8.
int64_t utf8_length(std::string_view s) noexcept;

}  // namespace tollgate::search
