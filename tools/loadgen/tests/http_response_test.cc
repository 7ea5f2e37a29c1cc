// Response framing (http_response.cc): Content-Length, chunked, 100-continue, until-close and
// malformed responses, fed whole and byte by byte.
#include "http_response.h"

#include <gtest/gtest.h>

#include <string>

namespace tollgate::loadgen {
namespace {

struct framed {
  frame_result r;
  response_head head;        ///< its content_type points into a buffer that is gone
  std::string content_type;  ///< a copy of head.content_type
  std::string body;
  std::size_t consumed = 0;
  frame_errc err = frame_errc::none;
};

framed frame_whole(const std::string& in, bool eof = false) {
  response_parser p;
  framed f;
  f.r = p.parse(in.data(), in.size(), eof);
  f.head = p.head();
  f.content_type = std::string(p.head().content_type);
  f.body = std::string(p.body());
  f.consumed = p.consumed();
  f.err = p.error();
  return f;
}

/// Feeds `in` one byte at a time (growing the same buffer) and returns the final result.
framed frame_bytewise(const std::string& in) {
  response_parser p;
  framed f;
  std::string buf;
  for (std::size_t i = 0; i < in.size(); i++) {
    buf.push_back(in[i]);
    f.r = p.parse(buf.data(), buf.size(), false);
    if (f.r != frame_result::incomplete) {
      break;
    }
  }
  f.head = p.head();
  f.content_type = std::string(p.head().content_type);
  f.body = std::string(p.body());
  f.consumed = p.consumed();
  f.err = p.error();
  return f;
}

TEST(loadgen_framing_test, content_length_whole_and_bytewise) {
  // Verifies a Content-Length response frames to its exact body, whole and byte by byte,
  // and stops before the next pipelined response.
  std::string one =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello";
  for (const framed& f : {frame_whole(one + "HTTP/1.1 200"), frame_bytewise(one)}) {
    ASSERT_EQ(f.r, frame_result::complete);
    EXPECT_EQ(f.head.status, 200);
    EXPECT_EQ(f.body, "hello");
    EXPECT_EQ(f.consumed, one.size());
    EXPECT_EQ(f.content_type, "application/json");
    EXPECT_FALSE(f.head.close);
  }
}

TEST(loadgen_framing_test, header_names_match_case_insensitively_and_exactly) {
  // Verifies the headers the checks need are found in any case and after other fields, and
  // that a field whose name only has the same length as one of them is ignored.
  std::string in =
      "HTTP/1.1 429 Too Many\r\nServer: x\r\ncontent-TYPE:  text/plain \r\n"
      "Content-Lengtx: 99\r\nCONTENT-LENGTH: 2\r\nretry-after: 1\r\n"
      "Connection: keep-alive, Close\r\n\r\nokNEXT";
  for (const framed& f : {frame_whole(in), frame_bytewise(in.substr(0, in.size() - 4))}) {
    ASSERT_EQ(f.r, frame_result::complete);
    EXPECT_EQ(f.head.status, 429);
    EXPECT_EQ(f.content_type, "text/plain");
    EXPECT_EQ(f.body, "ok");
    EXPECT_EQ(f.consumed, in.size() - 4);
    EXPECT_TRUE(f.head.has_retry_after);
    EXPECT_TRUE(f.head.close);
  }
}

TEST(loadgen_framing_test, chunked_body_is_decoded) {
  // Verifies chunked bodies (with an extension and a trailer) decode, whole and byte by byte.
  std::string in =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
  for (const framed& f : {frame_whole(in), frame_bytewise(in)}) {
    ASSERT_EQ(f.r, frame_result::complete);
    EXPECT_EQ(f.body, "hello world");
    EXPECT_EQ(f.consumed, in.size());
  }
}

TEST(loadgen_framing_test, interim_100_continue_is_skipped) {
  // Verifies a 100 Continue before the final response is consumed and not reported.
  std::string in =
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
  framed f = frame_whole(in);
  ASSERT_EQ(f.r, frame_result::complete);
  EXPECT_EQ(f.head.status, 201);
  EXPECT_EQ(f.consumed, in.size());
}

TEST(loadgen_framing_test, body_until_close_needs_eof) {
  // Verifies a response without length is incomplete until EOF, then complete and closing.
  std::string in = "HTTP/1.0 200 OK\r\n\r\npartial";
  EXPECT_EQ(frame_whole(in).r, frame_result::incomplete);
  framed f = frame_whole(in, true);
  ASSERT_EQ(f.r, frame_result::complete);
  EXPECT_EQ(f.body, "partial");
  EXPECT_TRUE(f.head.close);
}

TEST(loadgen_framing_test, rejects_malformed_responses) {
  // Verifies each malformed framing is an error with the right reason, never a success.
  const std::vector<std::pair<std::string, frame_errc>> cases = {
      {"HTTX/1.1 200 OK\r\n\r\n", frame_errc::bad_status_line},
      {"HTTP/1.1 2x0 OK\r\n\r\n", frame_errc::bad_status_line},
      {"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", frame_errc::bad_header},
      {"HTTP/1.1 200 OK\r\n: empty-name\r\n\r\n", frame_errc::bad_header},
      {"HTTP/1.1 200 OK\r\nX-A: bare\nLF\r\n\r\n", frame_errc::bad_header},
      {"HTTP/1.1 200 OK\r\nX-A: bare\rCR\r\n\r\n", frame_errc::bad_header},
      {"HTTP/1.1 200 OK\r\nX-A: cr-before-crlf\r\r\n\r\n", frame_errc::bad_header},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
       frame_errc::bad_content_length},
      {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", frame_errc::bad_content_length},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
       frame_errc::conflicting_framing},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", frame_errc::bad_chunk},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", frame_errc::bad_chunk},
  };
  for (const auto& [in, want] : cases) {
    framed f = frame_whole(in);
    EXPECT_EQ(f.r, frame_result::error) << in;
    EXPECT_EQ(f.err, want) << in;
  }
}

TEST(loadgen_framing_test, eof_mid_body_is_truncated) {
  // Verifies a peer closing before Content-Length bytes arrived is a truncation error.
  framed f = frame_whole("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true);
  EXPECT_EQ(f.r, frame_result::error);
  EXPECT_EQ(f.err, frame_errc::truncated);
}

}  // namespace
}  // namespace tollgate::loadgen
