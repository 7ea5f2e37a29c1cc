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

#include <cstddef>
#include <cstdint>
#include <string_view>

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

/// Counts the code points of valid UTF-8 text, or returns -1 when `s` is not valid UTF-8.
int64_t utf8_length(std::string_view s) noexcept;

}  // namespace tollgate::search
