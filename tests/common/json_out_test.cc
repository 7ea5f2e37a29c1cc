#include "tollgate/common/json_out.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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
  for (std::string_view s :
       {"plain", "q\"uote", "back\\slash", "nl\nx\ttab\x1f", "ünïcødé \"x\""}) {
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
  // alignment, and never escapes a plain byte (compared with a bytewise reference); a lone byte
  // >= 0x80 is not UTF-8 and becomes U+FFFD.
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
              case '\n':
                want += "\\n";
                break;
              case '\r':
                want += "\\r";
                break;
              case '\t':
                want += "\\t";
                break;
              case '\b':
                want += "\\b";
                break;
              case '\f':
                want += "\\f";
                break;
              default:
                want += "\\u00";
                want += hex[c >> 4];
                want += hex[c & 15];
            }
          } else if (c >= 0x80) {
            want += "\\ufffd";
          } else {
            want += static_cast<char>(c);
          }
        }
        ASSERT_EQ(std::string(got.view()), want)
            << "special=" << special << " len=" << len << " pos=" << pos;
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
      case '"':
        r += "\\\"";
        break;
      case '\\':
        r += "\\\\";
        break;
      case '\n':
        r += "\\n";
        break;
      case '\r':
        r += "\\r";
        break;
      case '\t':
        r += "\\t";
        break;
      case '\b':
        r += "\\b";
        break;
      case '\f':
        r += "\\f";
        break;
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
    for (std::string s :
         {std::string(1, ch), "abc" + std::string(1, ch) + "defghijk", std::string(17, ch)}) {
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

namespace tollgate {
namespace {

TEST(json_out_test, literals_copy_their_precomputed_nested_form) {
  // Verifies a json_literal writes its raw text at level 0 and that text escaped once when nested,
  // through literal() and through the direct put_literal() path alike.
  static constexpr json_literal kLit{"\",\"a\\b\":["};
  for (bool nested : {false, true}) {
    out_buffer via_raw, via_lit, via_put;
    json_out r(via_raw, nested), l(via_lit, nested), p(via_put, nested);
    r.raw("\",\"a\\b\":[");
    l.literal(kLit);
    char* base = p.begin_write(json_out::literal_bound(kLit));
    p.end_write(base, p.put_literal(base, kLit));
    EXPECT_EQ(via_lit.view(), via_raw.view()) << nested;
    EXPECT_EQ(via_put.view(), via_raw.view()) << nested;
  }
}

TEST(json_out_test, direct_writes_equal_the_checked_calls) {
  // Verifies put_escaped/put_plain/put_number write the same bytes as string()/number() at both
  // levels, for every length up to 40 (plain), escapes anywhere, and the integer edge cases.
  std::string plain;
  for (size_t len = 0; len <= 40; ++len) {
    for (std::string s : {plain, plain + "\"", "\\" + plain + "\x01", plain + "é\n"}) {
      for (bool nested : {false, true}) {
        out_buffer want, got;
        json_out w(want, nested), g(got, nested);
        w.string(s);
        const std::string_view q = nested ? "\\\"" : "\"";
        char* base = g.begin_write(g.escaped_bound(s.size()) + 8);
        char* p = json_out::put_plain(base, q);
        p = needs_escape(s) ? g.put_escaped(p, s) : json_out::put_plain(p, s);
        p = json_out::put_plain(p, q);
        g.end_write(base, p);
        EXPECT_EQ(got.view(), want.view()) << s << " " << nested;
      }
    }
    plain.push_back(static_cast<char>('a' + len % 26));
  }
  EXPECT_FALSE(needs_escape(plain));
  EXPECT_TRUE(needs_escape(plain + "\x1f"));
  for (int64_t v : {int64_t{0}, int64_t{7}, int64_t{10}, int64_t{99}, int64_t{100}, int64_t{-1},
                    int64_t{1700000000}, INT64_MAX, INT64_MIN}) {
    out_buffer b;
    json_out j(b, false);
    char* base = j.begin_write(json_out::number_bound);
    j.end_write(base, json_out::put_number(base, v));
    EXPECT_EQ(b.view(), std::to_string(v));
  }
}

TEST(json_out_test, put_number_writes_exactly_its_digits_at_every_length) {
  // Verifies put_number against std::to_string at every digit-count boundary (9, 10, 99, 100,
  // ... and the int64 extremes, both signs), and that it writes nothing past its last digit.
  std::vector<int64_t> values = {0, 1, 9, 10, INT64_MAX, INT64_MIN, INT64_MIN + 1};
  int64_t p = 1;
  for (int digits = 1; digits <= 18; ++digits) {
    p *= 10;  // up to 10^18; 10^19 would overflow int64
    values.push_back(p - 1);
    values.push_back(p);
    values.push_back(p + 1);
  }
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i) {
    if (values[i] != INT64_MIN) {  // its negation does not exist in int64
      values.push_back(-values[i]);
    }
  }
  for (int64_t v : values) {
    char buf[64];
    std::memset(buf, '#', sizeof buf);
    char* end = json_out::put_number(buf, v);
    const std::string want = std::to_string(v);
    EXPECT_EQ(std::string(buf, static_cast<size_t>(end - buf)), want) << v;
    for (char* q = end; q < buf + sizeof buf; ++q) {
      ASSERT_EQ(*q, '#') << "wrote past the number " << v;
    }
  }
}

}  // namespace
}  // namespace tollgate

namespace tollgate {
namespace {

TEST(json_out_test, escaping_replaces_bytes_that_are_not_utf8) {
  // Verifies append_json_escaped (the writer of every client-supplied detail in an error body)
  // keeps well-formed UTF-8 and turns each byte of an ill-formed sequence (stray continuation,
  // truncated, overlong, surrogate, past U+10FFFF) into U+FFFD, at every alignment.
  struct c {
    std::string in;
    std::string want;
  };
  const c cases[] = {
      {"\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9"},                          // é: kept
      {"\xe2\x82\xac \xf0\x9f\x98\x80", "\xe2\x82\xac \xf0\x9f\x98\x80"},  // €, emoji: kept
      {"\xff", "\\ufffd"},
      {"a\x80"
       "b",
       "a\\ufffdb"},
      {"\xc3", "\\ufffd"},                                   // truncated at the end
      {"\xc0\xaf", "\\ufffd\\ufffd"},                        // overlong '/'
      {"\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd"},             // a surrogate
      {"\xf4\x90\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd"},  // past U+10FFFF
      {"\xe2\x82\"", "\\ufffd\\ufffd\\\""},                  // cut by a quote
  };
  for (const auto& k : cases) {
    for (size_t pad = 0; pad < 9; ++pad) {
      out_buffer got;
      append_json_escaped(got, std::string(pad, 'x') + k.in);
      EXPECT_EQ(std::string(got.view()), std::string(pad, 'x') + k.want) << pad;
    }
  }
}

}  // namespace
}  // namespace tollgate
