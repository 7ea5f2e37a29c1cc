// A story's head (src/search/story_head.h): what put_head() writes, read_head() and
// check_head() read back field for field, at the edges of each varint's width and of the
// 64-bit numbers; check_head() refuses every truncation, a trailing byte, an overlong varint
// and a length past the end, so that a damaged index file fails its load instead of sending a
// query out of bounds.
#include "search/story_head.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tollgate::search::detail {
namespace {

struct fields {
  std::string id, title, url, by;
  uint32_t escape;
  int64_t score, comments;
};

std::string encode(const fields& f) {
  std::string out(head_size(f.id, f.title, f.url, f.by, f.score, f.comments), '\0');
  char* end = put_head(out.data(), f.id, f.title, f.url, f.by, f.escape, f.score, f.comments);
  EXPECT_EQ(end, out.data() + out.size()) << "head_size() and put_head() disagree";
  return out;
}

void expect_fields(const story_head& h, const fields& f, size_t size) {
  EXPECT_EQ(h.id, f.id);
  EXPECT_EQ(h.title, f.title);
  EXPECT_EQ(h.url, f.url);
  EXPECT_EQ(h.by, f.by);
  EXPECT_EQ(h.escape, f.escape);
  EXPECT_EQ(h.score, f.score);
  EXPECT_EQ(h.comments, f.comments);
  EXPECT_EQ(h.size, size);
}

std::vector<fields> samples() {
  constexpr int64_t lo = std::numeric_limits<int64_t>::min();
  constexpr int64_t hi = std::numeric_limits<int64_t>::max();
  return {
      {"1", "A title", "https://example.com/1", "alice", 0, 42, 7},
      {"", "", "", "", 31, 0, 0},
      {std::string(127, 'a'), std::string(128, 'b'), std::string(16383, 'c'),
       std::string(16384, 'd'), 1, -1, 1},
      {std::string(300, 'i'), "t", "", "by", 16, lo, hi},
      {"x", std::string(70000, 'T'), "u", "", 5, hi, lo},
      {"y", "", "", "", 2, -64, 63},  // zigzag's one-byte edges
      {"z", "", "", "", 2, -65, 64},  // and the first two-byte ones
  };
}

TEST(story_head_test, what_put_head_writes_reads_back_field_for_field) {
  for (const fields& f : samples()) {
    const std::string head = encode(f);
    expect_fields(read_head(head.data()), f, head.size());
    story_head h;
    ASSERT_TRUE(check_head(head.data(), head.data() + head.size(), h)) << f.id.size();
    expect_fields(h, f, head.size());
    EXPECT_EQ(head_id(head.data()), f.id);
    EXPECT_EQ(static_cast<uint8_t>(head[h.escape_at]), f.escape);
  }
}

TEST(story_head_test, check_head_refuses_every_truncation_and_a_trailing_byte) {
  for (const fields& f : samples()) {
    const std::string head = encode(f);
    story_head h;
    for (size_t cut = 0; cut < head.size(); ++cut) {
      ASSERT_FALSE(check_head(head.data(), head.data() + cut, h)) << "cut at " << cut;
    }
    const std::string longer = head + "!";
    EXPECT_FALSE(check_head(longer.data(), longer.data() + longer.size(), h));
  }
}

TEST(story_head_test, check_head_refuses_overlong_varints_and_lengths_past_the_end) {
  story_head h;
  // an id length of six varint bytes (at most five are allowed)
  const std::string overlong = std::string("\x81\x80\x80\x80\x80\x00", 6) + "a";
  EXPECT_FALSE(check_head(overlong.data(), overlong.data() + overlong.size(), h));
  // an id length above 32 bits (five bytes, the last with high bits set)
  const std::string wide = std::string("\xff\xff\xff\xff\x7f", 5) + std::string(64, 'a');
  EXPECT_FALSE(check_head(wide.data(), wide.data() + wide.size(), h));
  // a title length that claims more than the head holds
  std::string head = encode({"id", "title", "", "", 0, 1, 2});
  const size_t title_len_at = 1 + 2 + 1;  // id length, id, escape byte
  ASSERT_EQ(head[title_len_at], 5);
  head[title_len_at] = 6;
  EXPECT_FALSE(check_head(head.data(), head.data() + head.size(), h));
  head[title_len_at] = 4;  // fewer: a byte left over
  EXPECT_FALSE(check_head(head.data(), head.data() + head.size(), h));
}

}  // namespace
}  // namespace tollgate::search::detail
