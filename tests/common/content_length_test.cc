#include "tollgate/common/content_length.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace tollgate {
namespace {

// Writes a head with a reserved field, then `body`, then patches the length in.
std::string framed(size_t width, std::string_view body) {
  out_buffer out;
  out.append("HTTP/1.1 200 OK\r\n");
  const content_length_field f = reserve_content_length(out, width);
  out.append("\r\n\r\n");
  const size_t body_at = out.size();
  out.append(body);
  patch_content_length(out, f, out.size() - body_at);
  return std::string(out.view());
}

TEST(content_length_test, length_is_right_aligned_after_spaces) {
  // Verifies the digits end at the field's end with spaces (OWS) before them, body unmoved.
  EXPECT_EQ(framed(8, "hello"), "HTTP/1.1 200 OK\r\nContent-Length:       5\r\n\r\nhello");
  EXPECT_EQ(framed(4, ""), "HTTP/1.1 200 OK\r\nContent-Length:   0\r\n\r\n");
}

TEST(content_length_test, a_length_as_wide_as_the_field_widens_it_and_moves_the_body) {
  // Verifies a length of `width` digits or more keeps one space before the digits and moves
  // what follows the field right, intact.
  const std::string body(12345, 'x');
  const std::string got = framed(4, body);
  EXPECT_EQ(got, "HTTP/1.1 200 OK\r\nContent-Length: 12345\r\n\r\n" + body);
  EXPECT_EQ(framed(4, "abc"), "HTTP/1.1 200 OK\r\nContent-Length:   3\r\n\r\nabc");
  const std::string three(100, 'y');
  EXPECT_EQ(framed(3, three), "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + three);
}

}  // namespace
}  // namespace tollgate
