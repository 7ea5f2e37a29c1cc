// Tests for the HTTP response writer: status lines, headers, exact and patched Content-Length,
// bodiless statuses, the Date cache, and zero allocations once the buffer is warm.
#include "tollgate/http/response.h"

#include <gtest/gtest.h>

#include <string>

#include "support/alloc_counter.h"
#include "tollgate/http/parser.h"

namespace tollgate::http {
namespace {

TEST(http_response_test, writes_status_line_with_reason) {
  // Verifies the status line format for HTTP/1.1 and HTTP/1.0 and a status without a phrase.
  out_buffer b;
  write_status_line(b, 404);
  write_status_line(b, 431, 0);
  write_status_line(b, 299);
  EXPECT_EQ(b.view(),
            "HTTP/1.1 404 Not Found\r\nHTTP/1.0 431 Request Header Fields Too Large\r\n"
            "HTTP/1.1 299 \r\n");
}

TEST(http_response_test, reason_phrases_follow_rfc9110) {
  // Verifies the phrases clients and logs show for the statuses tollgate sends.
  EXPECT_EQ(reason_phrase(200), "OK");
  EXPECT_EQ(reason_phrase(202), "Accepted");
  EXPECT_EQ(reason_phrase(401), "Unauthorized");
  EXPECT_EQ(reason_phrase(405), "Method Not Allowed");
  EXPECT_EQ(reason_phrase(413), "Content Too Large");
  EXPECT_EQ(reason_phrase(429), "Too Many Requests");
  EXPECT_EQ(reason_phrase(503), "Service Unavailable");
  EXPECT_EQ(reason_phrase(505), "HTTP Version Not Supported");
  EXPECT_EQ(reason_phrase(799), "");
}

TEST(http_response_test, simple_response_has_exact_length_and_close) {
  // Verifies write_simple_response's exact bytes with extra headers and Connection: close.
  out_buffer b;
  write_simple_response(b, 405, "application/json", "{}", "Allow: POST\r\n", true);
  EXPECT_EQ(b.view(),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\nAllow: POST\r\n"
            "Connection: close\r\nContent-Length: 2\r\n\r\n{}");
}

TEST(http_response_test, empty_body_gets_zero_length_but_204_gets_none) {
  // Verifies 202 with no body says Content-Length: 0 while 204/304/1xx carry no length.
  out_buffer b;
  write_simple_response(b, 202, {}, {});
  EXPECT_EQ(b.view(), "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n");
  b.clear();
  write_simple_response(b, 204, {}, "ignored");
  EXPECT_EQ(b.view(), "HTTP/1.1 204 No Content\r\n\r\n");
}

TEST(http_response_test, http10_keep_alive_is_announced) {
  // Verifies head_for() tells an HTTP/1.0 keep-alive client the connection stays open and a
  // closing client that it closes.
  char wire[] = "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  request req;
  ASSERT_EQ(parse_request(wire, sizeof wire - 1, limits{}, req).status, parse_status::complete);
  out_buffer b;
  write_response(b, head_for(req, 200), "x");
  EXPECT_EQ(b.view(), "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx");
  req.keep_alive = false;
  b.clear();
  write_response(b, head_for(req, 200), "x");
  EXPECT_EQ(b.view(), "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx");
}

TEST(http_response_test, patched_length_matches_body_written_afterwards) {
  // Verifies begin/end_response frame a body appended later, and our own parser (as a client
  // would) reads the padded Content-Length as the body size.
  out_buffer b;
  b.append("previous response bytes");
  const size_t start = b.size();
  response_head h;
  h.status = 200;
  h.content_type = "application/json";
  const pending_response p = begin_response(b, h);
  std::string body(1234, 'j');
  b.append(body);
  end_response(b, p);
  const std::string_view resp = b.view().substr(start);
  EXPECT_NE(resp.find("Content-Length:      1234\r\n"), std::string_view::npos) << resp;
  EXPECT_EQ(resp.substr(resp.size() - body.size()), body);
  // Reparse the head as a request-shaped message to check the length field is well-formed.
  std::string as_request =
      "POST / HTTP/1.1\r\nHost: h\r\n" + std::string(resp.substr(resp.find("\r\n") + 2));
  request req;
  const parse_result r = parse_request(as_request.data(), as_request.size(), limits{}, req);
  ASSERT_EQ(r.status, parse_status::complete);
  EXPECT_EQ(req.content_length, 1234u);
  EXPECT_EQ(req.body, body);
}

TEST(http_response_test, head_request_gets_length_but_no_body) {
  // Verifies a HEAD answer keeps the GET body's Content-Length and sends no body bytes, for
  // both the exact and the patched framing.
  char wire[] = "HEAD /healthz HTTP/1.1\r\nHost: h\r\n\r\n";
  request req;
  ASSERT_EQ(parse_request(wire, sizeof wire - 1, limits{}, req).status, parse_status::complete);
  out_buffer b;
  write_response(b, head_for(req, 200), "ok\n");
  EXPECT_EQ(b.view(), "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n");
  b.clear();
  const pending_response p = begin_response(b, head_for(req, 200));
  b.append("ok\n");
  end_response(b, p);
  EXPECT_EQ(b.view(), "HTTP/1.1 200 OK\r\nContent-Length:         3\r\n\r\n");
}

TEST(http_response_test, patch_survives_buffer_growth) {
  // Verifies the reserved slot is an offset, so growing the buffer while writing the body
  // does not invalidate it.
  out_buffer b(16);
  const pending_response p = begin_response(b, response_head{});
  b.append(std::string(100000, 'z'));
  end_response(b, p);
  EXPECT_NE(b.view().find("Content-Length:    100000\r\n"), std::string_view::npos);
}

TEST(http_response_test, error_response_names_reason_and_closes) {
  // Verifies parse errors answer their status with a text body and Connection: close.
  out_buffer b;
  write_error_response(b, errc::header_too_large);
  const std::string_view v = b.view();
  EXPECT_EQ(v.substr(0, 46), "HTTP/1.1 431 Request Header Fields Too Large\r\n");
  EXPECT_NE(v.find("Connection: close\r\n"), std::string_view::npos);
  EXPECT_NE(v.find("\r\n\r\nrequest header section too large\n"), std::string_view::npos);
  EXPECT_NE(v.find("Content-Length:        33\r\n"), std::string_view::npos) << v;
}

TEST(http_response_test, continue_response_is_literal) {
  // Verifies the interim 100 Continue bytes.
  EXPECT_EQ(continue_response, "HTTP/1.1 100 Continue\r\n\r\n");
}

TEST(http_response_test, numeric_header_and_decimal) {
  // Verifies integer header values including zero and the largest uint64.
  out_buffer b;
  write_header(b, "Retry-After", uint64_t{0});
  write_header(b, "X-Big", UINT64_MAX);
  append_decimal(b, 42);
  EXPECT_EQ(b.view(), "Retry-After: 0\r\nX-Big: 18446744073709551615\r\n42");
}

TEST(http_response_test, imf_date_format) {
  // Verifies RFC 9110's own example date and the epoch.
  char d[29];
  format_imf_date(784111777, d);
  EXPECT_EQ(std::string_view(d, 29), "Sun, 06 Nov 1994 08:49:37 GMT");
  format_imf_date(0, d);
  EXPECT_EQ(std::string_view(d, 29), "Thu, 01 Jan 1970 00:00:00 GMT");
}

TEST(http_response_test, date_cache_updates_once_per_second) {
  // Verifies the cache reformats only when the second changes and builds a full header line.
  date_cache c;
  EXPECT_TRUE(c.update(784111777'000000000));
  EXPECT_FALSE(c.update(784111777'999999999));
  EXPECT_EQ(c.header_line(), "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
  EXPECT_TRUE(c.update(784111778'000000000));
  EXPECT_EQ(c.value(), "Sun, 06 Nov 1994 08:49:38 GMT");
}

TEST(http_response_test, writing_allocates_nothing_once_warm) {
  // Verifies steady-state response writing (simple and patched) does not allocate.
  out_buffer b;
  date_cache date;
  response_head h;
  h.status = 200;
  h.content_type = "application/json";
  h.extra_headers = "X-RateLimit-Limit: 10\r\nX-RateLimit-Remaining: 9\r\n";
  auto write_all = [&](int64_t now) {
    b.clear();
    date.update(now);
    h.date_line = date.header_line();
    write_response(b, h, R"({"ok":true})");
    const pending_response p = begin_response(b, h);
    b.append(R"({"jsonrpc":"2.0","id":1,"result":{}})");
    append_decimal(b, 12345);
    end_response(b, p);
    write_simple_response(b, 404, "text/plain", "not found\n", {}, false);
    write_error_response(b, errc::bad_header);
  };
  write_all(1);  // warm-up: the buffer grows to its working size
  test::alloc_scope scope;
  for (int i = 0; i < 1000; ++i) {
    write_all(int64_t{i} * 1'000'000'000);
  }
  EXPECT_EQ(scope.count(), 0u);
}

}  // namespace
}  // namespace tollgate::http
