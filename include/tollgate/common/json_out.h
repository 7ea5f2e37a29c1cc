// json_out: writes JSON into an out_buffer either as-is (level 0: a REST body) or already escaped
// as the contents of a JSON string (level 1: the text of an MCP text block). Both come out of the
// same single pass, so a payload is never rendered twice and never re-escaped.
//
// Shard-local (wraps a caller-owned buffer). Strings are taken as UTF-8 and passed through;
// control characters, quotes and backslashes are escaped as JSON requires.
#pragma once

#include <cstdint>
#include <string_view>

#include "tollgate/common/buffer.h"

namespace tollgate {

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
  bool nested() const noexcept { return nested_; }
  out_buffer& buffer() noexcept { return out_; }

 private:
  out_buffer& out_;
  bool nested_;
};

/// Appends `s` escaped as the inside of a JSON string (no quotes added).
void append_json_escaped(out_buffer& out, std::string_view s);

}  // namespace tollgate
