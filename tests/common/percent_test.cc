#include "tollgate/common/percent.h"

#include <gtest/gtest.h>

namespace tollgate {
namespace {

std::string decode(std::string_view s, bool plus_is_space, bool& ok) {
  out_buffer out;
  ok = percent_decode(s, out, plus_is_space);
  return std::string(out.view());
}

TEST(percent_test, decodes_escapes_and_plus_by_context) {
  // Verifies %XX in either case decodes, and '+' is a space only in query-string context.
  bool ok = false;
  EXPECT_EQ(decode("a%20b%2Fc%2fd+e", true, ok), "a b/c/d e");
  EXPECT_TRUE(ok);
  EXPECT_EQ(decode("a%20b+c%25", false, ok), "a b+c%");
  EXPECT_TRUE(ok);
  EXPECT_EQ(decode("", false, ok), "");
  EXPECT_TRUE(ok);
}

TEST(percent_test, malformed_escapes_fail) {
  // Verifies a truncated or non-hex escape is refused rather than passed through.
  bool ok = true;
  for (std::string_view bad : {"%", "%4", "a%zz", "%g1", "x%2"}) {
    decode(bad, false, ok);
    EXPECT_FALSE(ok) << bad;
  }
  EXPECT_EQ(hex_digit_value('F'), 15);
  EXPECT_EQ(hex_digit_value('g'), -1);
}

}  // namespace
}  // namespace tollgate
