// json_out: writes JSON into an out_buffer either as-is (level 0: a REST body) or already escaped
// as the contents of a JSON string (level 1: the text of an MCP text block). Both come out of the
// same single pass, so a payload is never rendered twice and never re-escaped.
//
// Core-local (wraps a caller-owned buffer). Strings are taken as UTF-8 and passed through;
// control characters, quotes and backslashes are escaped as JSON requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "tollgate/common/buffer.h"

namespace tollgate {

/// A structural JSON fragment (e.g. `","title":"`) with its nested form (quotes and backslashes
/// escaped once) computed at compile time, so writing it costs one copy in either mode.
/// Like json_out::raw()'s argument it must hold no control characters.
template <size_t N>
struct json_literal {
  char raw[N] = {};
  char nested[2 * N] = {};
  uint32_t raw_size = 0;
  uint32_t nested_size = 0;
  consteval json_literal(const char (&s)[N]) {  // NOLINT: implicit from a string literal
    for (size_t i = 0; i + 1 < N; ++i) {
      raw[raw_size++] = s[i];
      if (s[i] == '"' || s[i] == '\\') {
        nested[nested_size++] = '\\';
      }
      nested[nested_size++] = s[i];
    }
  }
};

class json_out {
 public:
  json_out(out_buffer& out, bool nested) noexcept : out_(out), nested_(nested) {}

  /// Structural JSON text (e.g. `{"total":`). Must itself be valid JSON fragments with no
  /// control characters; quotes and backslashes in it are escaped when nested.
  void raw(std::string_view s);
  /// A JSON string value: adds the quotes and escapes `s` (twice over when nested).
  void string(std::string_view s);
  void number(int64_t v);
  void boolean(bool v) { raw(v ? std::string_view("true") : std::string_view("false")); }
  /// A pre-escaped structural fragment: copied as is (no run-time escaping).
  template <size_t N>
  void literal(const json_literal<N>& l) {
    if (nested_) {
      out_.append(l.nested, l.nested_size);
    } else {
      out_.append(l.raw, l.raw_size);
    }
  }
  bool nested() const noexcept { return nested_; }
  out_buffer& buffer() noexcept { return out_; }

  // Direct writing, for renderers that emit many small pieces: reserve an upper bound once with
  // begin_write(), write pieces through the put_* functions (no bounds checks: the caller's
  // bound must cover them), then end_write() with the final cursor.

  /// Most bytes put_escaped() writes for n input bytes in this mode.
  size_t escaped_bound(size_t n) const noexcept { return n * (nested_ ? 7 : 6); }
  /// Room put_literal() needs for `l`: it copies a fixed 2N bytes (one inlined move whatever
  /// the mode) and advances by the form's size, so the bytes past that are scratch.
  template <size_t N>
  static constexpr size_t literal_bound(const json_literal<N>&) noexcept {
    return 2 * N;
  }
  /// Room put_number() needs (it writes at most 20 digits and a sign; callers reserve this).
  static constexpr size_t number_bound = 24;

  char* begin_write(size_t bound) { return out_.prepare(bound); }
  void end_write(const char* begin, const char* end) noexcept {
    out_.commit(static_cast<size_t>(end - begin));
  }
  template <size_t N>
  char* put_literal(char* dst, const json_literal<N>& l) const noexcept {
    if (nested_) {
      std::memcpy(dst, l.nested, 2 * N);
      return dst + l.nested_size;
    }
    std::memcpy(dst, l.raw, N);
    return dst + l.raw_size;
  }
  /// The inside of a string value (no quotes): `s` escaped once, twice when nested.
  char* put_escaped(char* dst, std::string_view s) const noexcept;
  /// The inside of a string value known to need no escaping (see needs_escape): copied as is.
  static char* put_plain(char* dst, std::string_view s) noexcept {
    // Short fields dominate: overlapping word moves instead of a library call.
    const char* src = s.data();
    const size_t n = s.size();
    if (n >= 8) {
      uint64_t w;
      for (size_t i = 0; i + 8 < n; i += 8) {
        std::memcpy(&w, src + i, 8);
        std::memcpy(dst + i, &w, 8);
      }
      std::memcpy(&w, src + n - 8, 8);
      std::memcpy(dst + n - 8, &w, 8);
    } else if (n >= 4) {
      uint32_t a, b;
      std::memcpy(&a, src, 4);
      std::memcpy(&b, src + n - 4, 4);
      std::memcpy(dst, &a, 4);
      std::memcpy(dst + n - 4, &b, 4);
    } else {
      for (size_t i = 0; i < n; ++i) {
        dst[i] = src[i];
      }
    }
    return dst + n;
  }
  static char* put_number(char* dst, int64_t v) noexcept;

 private:
  out_buffer& out_;
  bool nested_;
};

/// Appends `s` escaped as the inside of a JSON string (no quotes added).
void append_json_escaped(out_buffer& out, std::string_view s);

/// True when `s` holds a byte JSON escapes (a control character, a quote or a backslash): a
/// string without one is written the same at every nesting level.
bool needs_escape(std::string_view s) noexcept;

}  // namespace tollgate
