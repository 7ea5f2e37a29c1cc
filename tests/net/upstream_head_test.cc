// The outbound client's response-head parser (net/upstream.h): framing, connection reuse and
// refusals, without a ring.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "net/upstream.h"

namespace tollgate::net::detail {
namespace {

head_status parse(std::string_view s, response_head& h) {
  size_t scan = 0;
  return parse_response_head(s, scan, h);
}

TEST(net_upstream_head_test, parses_status_length_and_keep_alive) {
  // Verifies a plain HTTP/1.1 head gives its status, Content-Length, head size and reuse.
  const std::string s =
      "HTTP/1.1 201 Created\r\nContent-Type: x\r\ncontent-length:  12 \r\n\r\nbody";
  response_head h;
  ASSERT_EQ(parse(s, h), head_status::complete);
  EXPECT_EQ(h.status, 201);
  EXPECT_TRUE(h.has_length);
  EXPECT_EQ(h.content_length, 12u);
  EXPECT_EQ(h.head_len, s.size() - 4);
  EXPECT_FALSE(h.close);
  EXPECT_FALSE(h.chunked);
}

TEST(net_upstream_head_test, every_prefix_is_incomplete_and_resumes_its_scan) {
  // Verifies each prefix of a head is incomplete, and feeding it growing with the same `scan`
  // finds the end exactly once.
  const std::string s = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
  size_t scan = 0;
  response_head h;
  for (size_t n = 0; n < s.size(); ++n) {
    ASSERT_EQ(parse_response_head(std::string_view(s.data(), n), scan, h), head_status::incomplete)
        << n;
  }
  ASSERT_EQ(parse_response_head(s, scan, h), head_status::complete);
  EXPECT_EQ(h.head_len, s.size());
}

TEST(net_upstream_head_test, reads_connection_close_and_http10_rules) {
  // Verifies Connection: close (also in a token list) and HTTP/1.0 without keep-alive end reuse.
  response_head h;
  ASSERT_EQ(parse("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\n\r\n", h),
            head_status::complete);
  EXPECT_TRUE(h.close);
  ASSERT_EQ(parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", h), head_status::complete);
  EXPECT_TRUE(h.close);
  ASSERT_EQ(parse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n", h), head_status::complete);
  EXPECT_FALSE(h.close);
}

TEST(net_upstream_head_test, flags_transfer_encoding) {
  // Verifies a chunked (any Transfer-Encoding) response is reported so the engine can refuse it.
  response_head h;
  ASSERT_EQ(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", h),
            head_status::complete);
  EXPECT_TRUE(h.chunked);
  EXPECT_FALSE(h.has_length);
}

TEST(net_upstream_head_test, refuses_malformed_heads) {
  // Verifies bad status lines (only HTTP/1.0 and 1.1), bad or conflicting lengths, lengths over
  // the cap, field lines without a colon and bare CR or LF inside a field line are refused.
  response_head h;
  for (const char* bad : {
           "HTTP/2 200 OK\r\n\r\n",
           "HTTP/1.1 20 OK\r\n\r\n",
           "HTTP/1.1 200OK\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
           "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
           "HTTP/1.2 200 OK\r\n\r\n",
           "HTTP/1.1 200 OK\r\nX-A: 1\nX-B: 2\r\n\r\n",
           "HTTP/1.1 200 OK\r\nX-A: 1\rX-B: 2\r\n\r\n",
       }) {
    EXPECT_EQ(parse(bad, h), head_status::bad) << bad;
  }
  const std::string over_cap =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kMaxUpstreamBody + 1) + "\r\n\r\n";
  EXPECT_EQ(parse(over_cap, h), head_status::bad);
  const std::string at_cap =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kMaxUpstreamBody) + "\r\n\r\n";
  EXPECT_EQ(parse(at_cap, h), head_status::complete);
}

TEST(net_upstream_head_test, refuses_a_head_over_the_cap_before_it_ends) {
  // Verifies an endless head is refused once it passes kMaxUpstreamHead, not buffered for ever.
  std::string s = "HTTP/1.1 200 OK\r\n";
  while (s.size() <= kMaxUpstreamHead) {
    s += "X-Pad: " + std::string(100, 'p') + "\r\n";
  }
  response_head h;
  EXPECT_EQ(parse(s, h), head_status::bad);
}

}  // namespace
}  // namespace tollgate::net::detail
