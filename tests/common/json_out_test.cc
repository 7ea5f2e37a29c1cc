#include "tollgate/common/json_out.h"

#include <gtest/gtest.h>

#include <string>

namespace tollgate {
namespace {

std::string render(bool nested, std::string_view s) {
  out_buffer b;
  json_out j(b, nested);
  j.raw("{\"t\":");
  j.string(s);
  j.raw("}");
  return std::string(b.view());
}

TEST(json_out_test, plain_string_unchanged_at_level0) {
  // Verifies a string with nothing to escape is copied verbatim between quotes.
  EXPECT_EQ(render(false, "hello world"), R"({"t":"hello world"})");
}

TEST(json_out_test, escapes_quotes_backslashes_and_controls_at_level0) {
  // Verifies the JSON escapes for quote, backslash, newline and other control bytes.
  EXPECT_EQ(render(false, "a\"b\\c\nd\x01"), R"({"t":"a\"b\\c\nd\u0001"})");
}

TEST(json_out_test, nested_equals_escaping_the_level0_output) {
  // Verifies level 1 is exactly level 0 escaped once more, in one pass.
  for (std::string_view s : {"plain", "q\"uote", "back\\slash", "nl\nx\ttab\x1f", "ünïcødé \"x\""}) {
    std::string flat = render(false, s);
    out_buffer twice;
    append_json_escaped(twice, flat);
    EXPECT_EQ(render(true, s), std::string(twice.view())) << s;
  }
}

TEST(json_out_test, numbers_render_in_decimal) {
  // Verifies number() writes the decimal form including negatives.
  out_buffer b;
  json_out j(b, true);
  j.number(-42);
  j.raw(",");
  j.number(9007199254740993);
  EXPECT_EQ(b.view(), "-42,9007199254740993");
}

}  // namespace
}  // namespace tollgate

namespace tollgate {
namespace {

TEST(json_out_test, word_scan_agrees_with_bytewise_escaping) {
  // Verifies the 8-bytes-at-a-time scan finds every byte needing escape at every position and
  // alignment, and never escapes a plain byte (compared with a bytewise reference).
  for (int special : {0x00, 0x01, 0x1f, 0x22, 0x5c, 0x20, 0x21, 0x7f, 0x80, 0xff, 0x5b, 0x5d}) {
    for (size_t len = 1; len <= 40; ++len) {
      for (size_t pos = 0; pos < len; ++pos) {
        std::string s(len, 'a');
        s[pos] = static_cast<char>(special);
        out_buffer got;
        append_json_escaped(got, s);
        std::string want;
        for (unsigned char c : s) {
          if (c == '"') {
            want += "\\\"";
          } else if (c == '\\') {
            want += "\\\\";
          } else if (c < 0x20) {
            static const char* hex = "0123456789abcdef";
            switch (c) {
              case '\n': want += "\\n"; break;
              case '\r': want += "\\r"; break;
              case '\t': want += "\\t"; break;
              case '\b': want += "\\b"; break;
              case '\f': want += "\\f"; break;
              default: want += "\\u00"; want += hex[c >> 4]; want += hex[c & 15];
            }
          } else {
            want += static_cast<char>(c);
          }
        }
        ASSERT_EQ(std::string(got.view()), want) << "special=" << special << " len=" << len
                                                 << " pos=" << pos;
      }
    }
  }
}

}  // namespace
}  // namespace tollgate

namespace tollgate {
namespace {

// Escapes s once, bytewise (the reference the fast writer must match).
std::string escape_once(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string r;
  for (unsigned char c : s) {
    switch (c) {
      case '"': r += "\\\""; break;
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\r': r += "\\r"; break;
      case '\t': r += "\\t"; break;
      case '\b': r += "\\b"; break;
      case '\f': r += "\\f"; break;
      default:
        if (c < 0x20) {
          r += "\\u00";
          r += hex[c >> 4];
          r += hex[c & 15];
        } else {
          r += static_cast<char>(c);
        }
    }
  }
  return r;
}

TEST(json_out_test, every_byte_escapes_like_the_reference_at_both_levels) {
  // Verifies string() at level 0 and level 1 and raw() when nested equal a bytewise reference
  // for every byte value, alone, inside a plain word and in a run of escapes.
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    for (std::string s : {std::string(1, ch), "abc" + std::string(1, ch) + "defghijk",
                          std::string(17, ch)}) {
      out_buffer flat;
      json_out(flat, false).string(s);
      EXPECT_EQ(flat.view(), "\"" + escape_once(s) + "\"") << c;
      out_buffer nested;
      json_out(nested, true).string(s);
      EXPECT_EQ(nested.view(), escape_once("\"" + escape_once(s) + "\"")) << c;
      out_buffer raw;
      json_out(raw, true).raw(s);
      EXPECT_EQ(raw.view(), escape_once(s)) << c;
    }
  }
}

}  // namespace
}  // namespace tollgate
