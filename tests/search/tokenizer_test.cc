#include "tollgate/search/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tollgate::search {
namespace {

std::vector<std::string> toks(std::string_view s) {
  std::vector<std::string> out;
  token_stream ts(s);
  std::string_view t;
  while (ts.next(t)) {
    out.emplace_back(t);
  }
  return out;
}

using v = std::vector<std::string>;

TEST(tokenizer_test, lowercases_and_splits_on_punctuation) {
  // Verifies ASCII letters are lower-cased and punctuation separates tokens.
  EXPECT_EQ(toks("Hello, World! It's C++/Rust."), (v{"hello", "world", "it", "s", "c", "rust"}));
}

TEST(tokenizer_test, keeps_numbers_and_mixed_alphanumerics) {
  // Verifies digits form tokens and stay attached to letters.
  EXPECT_EQ(toks("Released 2024: v8 in 3.14s"), (v{"released", "2024", "v8", "in", "3", "14s"}));
}

TEST(tokenizer_test, folds_latin1_and_latin_extended_letters) {
  // Verifies accented Latin letters fold to ASCII, including digraph folds.
  EXPECT_EQ(toks("Café NAÏVE Straße Œuvre Łódź Ærø þorn İstanbul"),
            (v{"cafe", "naive", "strasse", "oeuvre", "lodz", "aero", "thorn", "istanbul"}));
}

TEST(tokenizer_test, latin1_symbols_separate_tokens) {
  // Verifies ×, ÷, no-break space and other Latin-1 symbols act as separators.
  EXPECT_EQ(toks("2×3÷4\xC2\xA0"
                 "a\xC2\xA9"
                 "b"),
            (v{"2", "3", "4", "a", "b"}));
}

TEST(tokenizer_test, keeps_other_scripts_verbatim) {
  // Verifies non-Latin letters are copied whole and general punctuation splits.
  EXPECT_EQ(toks("Ελληνικά—русский 東京"), (v{"Ελληνικά", "русский", "東京"}));
}

TEST(tokenizer_test, invalid_utf8_separates_and_is_never_copied) {
  // Verifies bad lead bytes, lone continuations, overlongs, surrogates and truncation split
  // tokens without leaking invalid bytes into them.
  EXPECT_EQ(toks("ab\xFF"
                 "cd"),
            (v{"ab", "cd"}));
  EXPECT_EQ(toks("ab\x80"
                 "cd"),
            (v{"ab", "cd"}));
  EXPECT_EQ(toks("ab\xC0\xAF"
                 "cd"),
            (v{"ab", "cd"}));  // overlong '/'
  EXPECT_EQ(toks("ab\xED\xA0\x80"
                 "cd"),
            (v{"ab", "cd"}));  // surrogate U+D800
  EXPECT_EQ(toks("ab\xF4\x90\x80\x80"
                 "cd"),
            (v{"ab", "cd"}));                // > U+10FFFF
  EXPECT_EQ(toks("ab\xE6\x9D"), (v{"ab"}));  // truncated at the end
  EXPECT_EQ(toks("\xC3"), v{});
}

TEST(tokenizer_test, tokens_are_always_valid_utf8) {
  // Verifies every token of arbitrary byte soup is valid UTF-8.
  std::string soup;
  uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1103515245 + 12345;
    soup.push_back(static_cast<char>(x >> 16));
  }
  token_stream ts(soup);
  std::string_view t;
  int n = 0;
  while (ts.next(t)) {
    ASSERT_GE(utf8_length(t), 1) << n;
    ASSERT_LE(t.size(), max_token_bytes);
    ++n;
  }
  EXPECT_GT(n, 0);
}

TEST(tokenizer_test, long_words_are_cut_at_a_code_point_boundary) {
  // Verifies tokens stop at max_token_bytes without splitting a multi-byte character.
  std::string word(63, 'a');
  word += "東京";
  auto t = toks(word + " next");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], std::string(63, 'a'));
  EXPECT_EQ(t[1], "next");
}

TEST(tokenizer_test, utf8_length_counts_code_points_or_rejects) {
  // Verifies utf8_length counts characters and returns -1 on invalid input.
  EXPECT_EQ(utf8_length("abc"), 3);
  EXPECT_EQ(utf8_length("né東😀"), 4);
  EXPECT_EQ(utf8_length("a\xFF"), -1);
  EXPECT_EQ(utf8_length(""), 0);
}

std::vector<std::string> each_toks(std::string_view s) {
  out_buffer chars;
  chars.append("x", 1);  // offsets are from the buffer's start, not from what was appended
  std::vector<std::pair<size_t, size_t>> at;
  append_tokens(s, chars, [&at](size_t off, size_t len) { at.emplace_back(off, len); });
  EXPECT_LE(chars.size(), s.size() + 1);
  std::vector<std::string> out;
  for (const auto& [off, len] : at) {
    out.emplace_back(chars.data() + off, len);
  }
  return out;
}

TEST(tokenizer_test, append_tokens_equals_token_stream) {
  // Verifies append_tokens (the index build's fast path) gives exactly token_stream's tokens:
  // on fixed cases (upper case, digits, words longer than max_token_bytes in lower and mixed
  // case, non-ASCII letters, separators and invalid bytes at every place in a word) and on
  // random texts drawn from those pieces.
  const std::vector<std::string> pieces = {
      "a",
      "Z",
      "q9",
      " ",
      ",",
      "'",
      "\n",
      "ab-cd",
      "Ér",
      "é",
      "ß",
      "\xC3\x97",
      "\xE2\x80\x94",
      "\xFF",
      "\xC3",
      "\xF0\x9F\x98\x80",
      "Ω",
      "中文",
      "x\x80",
      std::string(70, 'k'),
      std::string(63, 'm') + "N",
      std::string(64, 'p') + "Q" + std::string(5, 'r'),
      std::string(66, 'S') + "é",
  };
  for (const std::string& p : pieces) {
    for (const std::string& q : pieces) {
      const std::string text = p + q + " " + q + p;
      EXPECT_EQ(each_toks(text), toks(text)) << text;
    }
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 12);
    for (int j = 0; j < n; ++j) {
      text += pieces[rng() % pieces.size()];
    }
    EXPECT_EQ(each_toks(text), toks(text)) << text;
  }
}

TEST(tokenizer_test, append_tokens_equals_token_stream_across_64_byte_blocks) {
  // Verifies append_tokens gives token_stream's tokens on long texts, whose words and
  // separators fall on every place relative to its 64-byte blocks: words of 1 to 80 ASCII
  // letters and digits (mixed case; some longer than max_token_bytes, some running into a
  // block's end or the text's end), runs of separators (control bytes, punctuation, '@', '[',
  // '`', '{', ':', '/'), and in some texts one non-ASCII piece at a random place (from where
  // the rest goes byte by byte).
  const std::string alnum = "abcxyzABCXYZ0189qQ";
  const std::string seps = " \t\n,.;:/@[`{\x01\x1f\x7f-'";
  const std::vector<std::string> high = {"\xC3\xA9", "\xC3\x97", "\xE2\x80\x94", "\xFF",
                                         "\xCE\xA9"};
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const size_t want = rng() % 700;
    const bool with_high = rng() % 3 == 0;
    const size_t high_at = want == 0 ? 0 : rng() % want;
    bool high_done = false;
    while (text.size() < want) {
      if (with_high && !high_done && text.size() >= high_at) {
        text += high[rng() % high.size()];
        high_done = true;
      }
      const size_t w = rng() % 4 == 0 ? 1 + rng() % 80 : 1 + rng() % 9;
      for (size_t k = 0; k < w; ++k) {
        text += alnum[rng() % alnum.size()];
      }
      const size_t g = rng() % 5 == 0 ? 0 : 1 + rng() % 3;  // 0: the word ends the text
      for (size_t k = 0; k < g && text.size() < want; ++k) {
        text += seps[rng() % seps.size()];
      }
      if (g == 0) {
        break;
      }
    }
    EXPECT_EQ(each_toks(text), toks(text)) << text;
  }
}

}  // namespace
}  // namespace tollgate::search
