// Tests for http::parse_request: a table of valid and invalid requests, each fed whole and byte
// by byte (every proper prefix must answer incomplete or the whole input's error, never a
// different answer), pipelining, chunked decoding, a guard-page read-past-end check, and zero
// allocations.
#include "tollgate/http/parser.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/ascii.h"
#include "support/alloc_counter.h"

namespace tollgate::http {
namespace {

struct parse_case {
  const char* name;
  std::string input;
  parse_status status;
  errc error = errc::ok;
  // Checked on complete:
  std::string_view method = {};
  std::string_view path = {};
  std::string_view query = {};
  std::string_view body = {};
  bool keep_alive = true;
  int version_minor = 1;
  bool head_complete = false;  // checked on incomplete
};

limits small_limits() {
  limits l;
  l.max_header_bytes = 256;
  l.max_body_bytes = 64;
  l.max_header_count = 8;
  return l;
}

// Valid requests: request-line forms, targets, versions and keep-alive.
std::vector<parse_case> accepted_request_lines() {
  using ps = parse_status;
  const std::string host = "Host: x\r\n";
  return {
      {"simple_get", "GET /healthz HTTP/1.1\r\n" + host + "\r\n", ps::complete, errc::ok, "GET",
       "/healthz"},
      {"query_split", "GET /v1/stories?q=rust&limit=5 HTTP/1.1\r\n" + host + "\r\n", ps::complete,
       errc::ok, "GET", "/v1/stories", "q=rust&limit=5"},
      {"empty_query", "GET /a? HTTP/1.1\r\n" + host + "\r\n", ps::complete, errc::ok, "GET", "/a",
       ""},
      {"post_with_body",
       "POST /mcp HTTP/1.1\r\n" + host +
           "Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
       ps::complete, errc::ok, "POST", "/mcp", "", "{\"a\":1}"},
      {"http10_closes", "GET / HTTP/1.0\r\n\r\n", ps::complete, errc::ok, "GET", "/", "", "", false,
       0},
      {"http10_keep_alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", ps::complete,
       errc::ok, "GET", "/", "", "", true, 0},
      {"http11_close_token_list",
       "GET / HTTP/1.1\r\n" + host + "Connection: upgrade, CLOSE\r\n\r\n", ps::complete, errc::ok,
       "GET", "/", "", "", false},
      {"http12_is_11", "GET / HTTP/1.2\r\n" + host + "\r\n", ps::complete, errc::ok, "GET", "/"},
      {"leading_empty_lines", "\r\n\r\nGET / HTTP/1.1\r\n" + host + "\r\n", ps::complete, errc::ok,
       "GET", "/"},
      {"options_asterisk", "OPTIONS * HTTP/1.1\r\n" + host + "\r\n", ps::complete, errc::ok,
       "OPTIONS", "*"},
      // RFC 9112 §3.2.2: a server MUST accept the absolute-form; the path and query follow the
      // authority.
      {"absolute_form", "GET http://a.example:8080/v1/usage?x=1 HTTP/1.1\r\n" + host + "\r\n",
       ps::complete, errc::ok, "GET", "/v1/usage", "x=1"},
      {"absolute_form_https_upper", "GET HTTPS://a/mcp HTTP/1.1\r\n" + host + "\r\n", ps::complete,
       errc::ok, "GET", "/mcp", ""},
  };
}

// Valid requests: field values, Content-Length and chunked bodies, 100-continue.
std::vector<parse_case> accepted_fields_and_bodies() {
  using ps = parse_status;
  const std::string host = "Host: x\r\n";
  return {
      {"ows_and_tab_in_value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: \t a\tb \t\r\n\r\n", ps::complete,
       errc::ok, "GET", "/"},
      {"empty_value", "GET / HTTP/1.1\r\nHost: x\r\nX-Empty:\r\n\r\n", ps::complete, errc::ok,
       "GET", "/"},
      {"obs_text_in_value", "GET / HTTP/1.1\r\nHost: x\r\nX-U: caf\xc3\xa9\r\n\r\n", ps::complete,
       errc::ok, "GET", "/"},
      {"equal_duplicate_cl",
       "POST /p HTTP/1.1\r\n" + host + "Content-Length: 3\r\ncontent-length: 003\r\n\r\nabc",
       ps::complete, errc::ok, "POST", "/p", "", "abc"},
      {"padded_cl", "POST /p HTTP/1.1\r\n" + host + "Content-Length:         3 \t\r\n\r\nabc",
       ps::complete, errc::ok, "POST", "/p", "", "abc"},
      {"chunked_simple",
       "POST /c HTTP/1.1\r\n" + host +
           "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
       ps::complete, errc::ok, "POST", "/c", "", "abcde"},
      {"chunked_ext_trailer",
       "POST /c HTTP/1.1\r\n" + host +
           "Transfer-Encoding: Chunked\r\n\r\nA;name=val;x\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n",
       ps::complete, errc::ok, "POST", "/c", "", "0123456789"},
      {"chunked_empty",
       "POST /c HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ps::complete,
       errc::ok, "POST", "/c", "", ""},
      {"expect_continue_waits_for_body",
       "POST /mcp HTTP/1.1\r\n" + host + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n",
       ps::incomplete,
       errc::ok,
       {},
       {},
       {},
       {},
       true,
       1,
       true},
  };
}

// Refused request lines: method, target, version.
std::vector<parse_case> request_line_errors() {
  using ps = parse_status;
  return {
      {"bad_method_char", "G(T / HTTP/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"empty_method", " / HTTP/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"absolute_form_bad_scheme", "GET ftp://a/ HTTP/1.1\r\n\r\n", ps::error,
       errc::bad_request_line},
      {"absolute_form_no_authority", "GET http:///x HTTP/1.1\r\n\r\n", ps::error,
       errc::bad_request_line},
      {"absolute_form_no_scheme_end", "GET http:/x HTTP/1.1\r\n\r\n", ps::error,
       errc::bad_request_line},
      {"not_a_target", "GET hello HTTP/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"absolute_form_no_path", "GET http://a HTTP/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"absolute_form_query_no_path", "GET http://a?q=1 HTTP/1.1\r\n\r\n", ps::error,
       errc::bad_request_line},
      {"two_spaces", "GET  / HTTP/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"asterisk_not_options", "GET * HTTP/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"fragment", "GET /a#b HTTP/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"lowercase_version", "GET / http/1.1\r\n\r\n", ps::error, errc::bad_request_line},
      {"bare_lf_request_line", "GET / HTTP/1.1\nHost: x\n\n", ps::error, errc::bad_request_line},
      {"version_garbage", "GET / HTTP/1.1x\r\n\r\n", ps::error, errc::bad_request_line},
      {"http2_preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ps::error, errc::unsupported_version},
      {"http2_get", "GET / HTTP/2.0\r\n\r\n", ps::error, errc::unsupported_version},
      {"http09", "GET / HTTP/0.9\r\n\r\n", ps::error, errc::unsupported_version},
  };
}

// Refused header fields and ends of head.
std::vector<parse_case> field_errors() {
  using ps = parse_status;
  return {
      {"space_before_colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", ps::error, errc::bad_header},
      {"obs_fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", ps::error,
       errc::bad_header},
      {"nul_in_value", std::string("GET / HTTP/1.1\r\nHost: x\0y\r\n\r\n", 29), ps::error,
       errc::bad_header},
      {"nul_in_name", std::string("GET / HTTP/1.1\r\nHo\0st: x\r\n\r\n", 29), ps::error,
       errc::bad_header},
      {"bare_cr_in_value", "GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n", ps::error, errc::bad_header},
      {"bare_lf_after_header", "GET / HTTP/1.1\r\nHost: x\n\r\n", ps::error, errc::bad_header},
      {"del_in_value", "GET / HTTP/1.1\r\nHost: x\x7fy\r\n\r\n", ps::error, errc::bad_header},
      {"no_colon", "GET / HTTP/1.1\r\nHost x\r\n\r\n", ps::error, errc::bad_header},
      {"empty_name", "GET / HTTP/1.1\r\n: x\r\n\r\n", ps::error, errc::bad_header},
      {"missing_host", "GET / HTTP/1.1\r\n\r\n", ps::error, errc::bad_header},
      {"two_hosts", "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", ps::error, errc::bad_header},
      {"bad_end_of_head", "GET / HTTP/1.1\r\nHost: a\r\n\rX", ps::error, errc::bad_header},
  };
}

// Refused body framing: Content-Length, Transfer-Encoding, chunks, trailers.
std::vector<parse_case> framing_errors() {
  using ps = parse_status;
  const std::string host = "Host: x\r\n";
  return {
      {"cl_not_digits", "POST / HTTP/1.1\r\n" + host + "Content-Length: 1a\r\n\r\n", ps::error,
       errc::bad_content_length},
      {"cl_signed", "POST / HTTP/1.1\r\n" + host + "Content-Length: +1\r\n\r\n", ps::error,
       errc::bad_content_length},
      {"cl_empty", "POST / HTTP/1.1\r\n" + host + "Content-Length: \r\n\r\n", ps::error,
       errc::bad_content_length},
      {"cl_list", "POST / HTTP/1.1\r\n" + host + "Content-Length: 1, 1\r\n\r\n", ps::error,
       errc::bad_content_length},
      {"cl_huge_overflow",
       "POST / HTTP/1.1\r\n" + host + "Content-Length: 99999999999999999999999999999\r\n\r\n",
       ps::error, errc::body_too_large},
      {"cl_over_limit_before_body", "POST / HTTP/1.1\r\n" + host + "Content-Length: 65\r\n\r\n",
       ps::error, errc::body_too_large},
      {"cl_differing",
       "POST / HTTP/1.1\r\n" + host + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", ps::error,
       errc::conflicting_length},
      {"cl_and_te",
       "POST / HTTP/1.1\r\n" + host + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
       ps::error, errc::conflicting_length},
      {"te_and_cl",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
       ps::error, errc::conflicting_length},
      {"te_gzip", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip, chunked\r\n\r\n",
       ps::error, errc::unsupported_encoding},
      {"te_empty", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: ,\r\n\r\n", ps::error,
       errc::bad_header},
      {"te_chunked_twice",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked, chunked\r\n\r\n", ps::error,
       errc::bad_header},
      {"te_http10", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ps::error,
       errc::bad_header},
      {"chunk_no_size", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n\r\n",
       ps::error, errc::bad_chunk},
      {"chunk_bad_size", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\nx\r\n",
       ps::error, errc::bad_chunk},
      {"chunk_missing_crlf",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
       ps::error, errc::bad_chunk},
      {"chunk_bare_lf",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n", ps::error,
       errc::bad_chunk},
      {"chunk_too_large", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n41\r\n",
       ps::error, errc::body_too_large},
      {"chunk_huge_size",
       "POST / HTTP/1.1\r\n" + host +
           "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffffff\r\n",
       ps::error, errc::body_too_large},
      {"chunks_sum_too_large",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n20\r\n" +
           std::string(32, 'a') + "\r\n21\r\n",
       ps::error, errc::body_too_large},
      {"bad_trailer",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n0\r\nX T: 1\r\n\r\n",
       ps::error, errc::bad_header},
  };
}

// Past the limits (small_limits()): header count, head size.
std::vector<parse_case> limit_errors() {
  using ps = parse_status;
  return {
      {"too_many_headers",
       "GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\nf: 1\r\ng: 1\r\nh: "
       "1\r\n\r\n",
       ps::error, errc::too_many_headers},
      {"head_too_large_without_end",
       "GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(300, 'a'), ps::error,
       errc::header_too_large},
      {"request_line_too_large", "GET /" + std::string(300, 'a'), ps::error,
       errc::header_too_large},
  };
}

// The table: each group in the order above.
std::vector<parse_case> cases() {
  std::vector<parse_case> all;
  for (auto group : {accepted_request_lines, accepted_fields_and_bodies, request_line_errors,
                     field_errors, framing_errors, limit_errors}) {
    std::vector<parse_case> part = group();
    all.insert(all.end(), std::make_move_iterator(part.begin()),
               std::make_move_iterator(part.end()));
  }
  return all;
}

// Parses a private copy of s (exactly sized, so ASan sees any overread).
parse_result parse_copy(std::string_view s, const limits& lim, request& req,
                        std::vector<char>& storage) {
  storage.assign(s.begin(), s.end());
  return parse_request(storage.data(), storage.size(), lim, req);
}

void check_whole(const parse_case& c, const limits& lim) {
  SCOPED_TRACE(c.name);
  request req;
  std::vector<char> storage;
  const parse_result r = parse_copy(c.input, lim, req, storage);
  ASSERT_EQ(r.status, c.status) << "error=" << message(r.error);
  if (c.status == parse_status::error) {
    EXPECT_EQ(r.error, c.error) << message(r.error);
    return;
  }
  if (c.status == parse_status::incomplete) {
    EXPECT_EQ(r.head_complete, c.head_complete);
    return;
  }
  EXPECT_EQ(r.consumed, c.input.size());
  EXPECT_EQ(req.method, c.method);
  EXPECT_EQ(req.path, c.path);
  EXPECT_EQ(req.query, c.query);
  EXPECT_EQ(req.body, c.body);
  EXPECT_EQ(req.keep_alive, c.keep_alive);
  EXPECT_EQ(req.version_minor, c.version_minor);
}

TEST(http_parser_test, table_fed_whole) {
  // Verifies each table input parses to the expected status, error and fields.
  for (const auto& c : cases()) {
    check_whole(c, small_limits());
  }
}

TEST(http_parser_test, table_fed_byte_by_byte) {
  // Verifies every proper prefix answers incomplete or the whole input's own error, never
  // complete and never a different error, under the small test limits and the defaults.
  for (const auto& c : cases()) {
    for (const limits& lim : {small_limits(), limits{}}) {
      SCOPED_TRACE(c.name);
      request whole_req;
      std::vector<char> storage;
      const parse_result whole = parse_copy(c.input, lim, whole_req, storage);
      bool saw_error = false;
      for (size_t n = 0; n < c.input.size(); ++n) {
        request req;
        const parse_result r =
            parse_copy(std::string_view(c.input).substr(0, n), lim, req, storage);
        ASSERT_NE(r.status, parse_status::complete) << "prefix " << n;
        if (r.status == parse_status::error) {
          ASSERT_EQ(whole.status, parse_status::error) << "prefix " << n;
          ASSERT_EQ(r.error, whole.error) << "prefix " << n;
          saw_error = true;
        } else {
          ASSERT_FALSE(saw_error) << "an error prefix was followed by an incomplete one at " << n;
        }
      }
    }
  }
}

TEST(http_parser_test, header_lookup_is_case_insensitive_and_trims_ows) {
  // Verifies header_value/has_header ignore case and values lose surrounding whitespace.
  std::vector<char> storage;
  request req;
  const parse_result r =
      parse_copy("GET / HTTP/1.1\r\nHost: example\r\nX-API-Key:   k1 \t\r\nAccept: a/b\r\n\r\n",
                 limits{}, req, storage);
  ASSERT_EQ(r.status, parse_status::complete);
  EXPECT_EQ(req.num_headers, 3u);
  EXPECT_EQ(req.header_value("x-api-key"), "k1");
  EXPECT_EQ(req.header_value("HOST"), "example");
  EXPECT_TRUE(req.has_header("accept"));
  EXPECT_FALSE(req.has_header("accep"));
  EXPECT_EQ(req.header_value("missing"), "");
}

// Every indexed field with its name as written on the wire in mixed case.
const std::pair<field, std::string_view> kIndexed[] = {
    {field::host, "HoSt"},
    {field::expect, "EXPECT"},
    {field::connection, "Connection"},
    {field::content_length, "Content-Length"},
    {field::transfer_encoding, "transfer-ENCODING"},
    {field::authorization, "Authorization"},
    {field::x_api_key, "X-Api-Key"},
    {field::origin, "Origin"},
    {field::accept, "ACCEPT"},
    {field::content_type, "content-Type"},
    {field::mcp_session_id, "Mcp-Session-Id"},
    {field::mcp_protocol_version, "MCP-Protocol-Version"},
    {field::mcp_method, "Mcp-Method"},
    {field::mcp_name, "mcp-NAME"},
    {field::tollgate_deadline, "Tollgate-DEADLINE"},
};

TEST(http_parser_test, classify_names_each_indexed_field_and_nothing_else) {
  // Verifies every indexed name (any case) is classified as its field, and that names one byte
  // away from one (same length, so the length switch cannot tell them apart) are not.
  static_assert(std::size(kIndexed) == indexed_fields);
  for (const auto& [f, name] : kIndexed) {
    EXPECT_EQ(classify(name), f) << name;
    for (size_t i = 0; i < name.size(); ++i) {
      std::string near(name);
      near[i] = near[i] == 'x' || near[i] == 'X' ? 'y' : 'x';
      EXPECT_EQ(classify(near), field::other) << near;
    }
    EXPECT_EQ(classify(std::string(name) + "s"), field::other) << name;
  }
  EXPECT_EQ(classify("User-Agent"), field::other);  // the length of connection and mcp-method
  EXPECT_EQ(classify(""), field::other);
}

TEST(http_parser_test, field_line_answers_like_header_value_for_each_indexed_field) {
  // Verifies the parser's index gives, for each indexed field, what a scan by name gives: the
  // first of repeated lines, any case, an empty value still found, an absent field null.
  std::vector<char> storage;
  request req;
  const parse_result r = parse_copy(
      "POST /mcp HTTP/1.1\r\nHost: h\r\nmcp-NAME: first\r\nAccept: a/b\r\nOrigin:\r\n"
      "MCP-Name: second\r\nCONTENT-type: application/json\r\nX-Other: o\r\n"
      "Content-Length: 0\r\n\r\n",
      limits{}, req, storage);
  ASSERT_EQ(r.status, parse_status::complete);
  for (const auto& [f, name] : kIndexed) {
    const header* h = req.field_line(f);
    EXPECT_EQ(h != nullptr, req.has_header(name)) << name;
    EXPECT_EQ(req.field_value(f), req.header_value(name)) << name;
  }
  ASSERT_NE(req.field_line(field::mcp_name), nullptr);
  EXPECT_EQ(req.field_value(field::mcp_name), "first");
  EXPECT_EQ(req.field_line(field::mcp_name), &req.headers[1]);
  ASSERT_NE(req.field_line(field::origin), nullptr);
  EXPECT_EQ(req.field_value(field::origin), "");
  EXPECT_EQ(req.field_line(field::mcp_method), nullptr);
  EXPECT_EQ(req.field_line(field::authorization), nullptr);
}

TEST(http_parser_test, field_index_is_reset_by_each_parse) {
  // Verifies a request object reused for a second parse forgets the first request's fields.
  std::vector<char> storage;
  request req;
  ASSERT_EQ(parse_copy("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\r\n\r\n", limits{},
                       req, storage)
                .status,
            parse_status::complete);
  ASSERT_EQ(req.field_value(field::authorization), "Bearer k");
  ASSERT_EQ(parse_copy("GET / HTTP/1.1\r\nHost: h\r\n\r\n", limits{}, req, storage).status,
            parse_status::complete);
  EXPECT_EQ(req.field_line(field::authorization), nullptr);
  EXPECT_EQ(req.field_value(field::host), "h");
}

TEST(http_parser_test, add_header_indexes_like_the_parser_and_refuses_past_the_limit) {
  // Verifies a hand-built request answers field look-ups as the parsed one does, and that
  // add_header stops at max_headers without writing past the array.
  std::vector<char> storage;
  request parsed;
  ASSERT_EQ(parse_copy("POST /mcp HTTP/1.1\r\nHost: h\r\nX-API-KEY: k1\r\nx-api-key: k2\r\n"
                       "Mcp-Method: tools/call\r\nContent-Length: 0\r\n\r\n",
                       limits{}, parsed, storage)
                .status,
            parse_status::complete);
  request built;
  for (size_t i = 0; i < parsed.num_headers; ++i) {
    ASSERT_TRUE(built.add_header(parsed.headers[i].name, parsed.headers[i].value));
  }
  for (const auto& [f, name] : kIndexed) {
    EXPECT_EQ(built.field_value(f), parsed.field_value(f)) << name;
    EXPECT_EQ(built.field_line(f) != nullptr, parsed.field_line(f) != nullptr) << name;
  }
  EXPECT_EQ(built.field_value(field::x_api_key), "k1");
  request full;
  for (size_t i = 0; i < max_headers; ++i) {
    ASSERT_TRUE(full.add_header("X-Filler", "v"));
  }
  EXPECT_FALSE(full.add_header("Authorization", "Bearer late"));
  EXPECT_EQ(full.num_headers, max_headers);
  EXPECT_EQ(full.field_line(field::authorization), nullptr);
}

TEST(http_parser_test, expect_continue_reports_head_complete_before_body) {
  // Verifies a 100-continue request with a complete head but no body is incomplete with
  // head_complete and expect_continue set, then completes when the body arrives.
  const std::string head =
      "POST /mcp HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 4\r\n\r\n";
  std::vector<char> storage;
  request req;
  parse_result r = parse_copy(head, limits{}, req, storage);
  ASSERT_EQ(r.status, parse_status::incomplete);
  EXPECT_TRUE(r.head_complete);
  EXPECT_TRUE(req.expect_continue);
  EXPECT_EQ(req.content_length, 4u);
  r = parse_copy(head + "abcd", limits{}, req, storage);
  ASSERT_EQ(r.status, parse_status::complete);
  EXPECT_EQ(req.body, "abcd");
  EXPECT_TRUE(req.expect_continue);
}

TEST(http_parser_test, head_bytes_tells_the_size_still_needed) {
  // Verifies head_bytes on a partial body lets the engine size its buffer for the whole request,
  // and matches the head on completion, including skipped leading empty lines.
  const std::string head = "\r\nPOST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n";
  std::vector<char> storage;
  request req;
  parse_result r = parse_copy(head + "abc", limits{}, req, storage);
  ASSERT_EQ(r.status, parse_status::incomplete);
  EXPECT_TRUE(r.head_complete);
  EXPECT_EQ(r.head_bytes, head.size());
  EXPECT_EQ(r.head_bytes + req.content_length, head.size() + 10);
  r = parse_copy(head + "0123456789", limits{}, req, storage);
  ASSERT_EQ(r.status, parse_status::complete);
  EXPECT_EQ(r.head_bytes, head.size());
  r = parse_copy("GET / HTTP/1.1\r\nHo", limits{}, req, storage);
  EXPECT_EQ(r.head_bytes, 0u);
}

TEST(http_parser_test, expect_continue_ignored_for_http10) {
  // Verifies RFC 9110 §10.1.1: a server ignores 100-continue from an HTTP/1.0 client.
  std::vector<char> storage;
  request req;
  const parse_result r =
      parse_copy("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", limits{},
                 req, storage);
  ASSERT_EQ(r.status, parse_status::incomplete);
  EXPECT_FALSE(req.expect_continue);
}

TEST(http_parser_test, pipelined_requests_parse_one_after_another) {
  // Verifies consumed covers exactly one request so the next parse starts at the following one.
  std::string wire;
  for (int i = 0; i < 5; ++i) {
    wire += "POST /r" + std::to_string(i) + " HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n";
    wire += std::to_string(10 + i);
  }
  wire += "GET /last HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n";
  wire += "GET /partial HTTP/1.1\r\nHo";
  std::vector<char> buf(wire.begin(), wire.end());
  size_t off = 0;
  request req;
  for (int i = 0; i < 5; ++i) {
    const parse_result r = parse_request(buf.data() + off, buf.size() - off, limits{}, req);
    ASSERT_EQ(r.status, parse_status::complete);
    EXPECT_EQ(req.path, "/r" + std::to_string(i));
    EXPECT_EQ(req.body, std::to_string(10 + i));
    off += r.consumed;
  }
  parse_result r = parse_request(buf.data() + off, buf.size() - off, limits{}, req);
  ASSERT_EQ(r.status, parse_status::complete);
  EXPECT_EQ(req.path, "/last");
  EXPECT_EQ(req.body, "z");
  off += r.consumed;
  r = parse_request(buf.data() + off, buf.size() - off, limits{}, req);
  EXPECT_EQ(r.status, parse_status::incomplete);
  EXPECT_FALSE(r.head_complete);
}

TEST(http_parser_test, chunked_body_is_decoded_in_place_after_head) {
  // Verifies chunk data is compacted to directly follow the head and consumed covers the
  // framing, with many chunks, extensions and uppercase hex.
  std::string body_wire;
  std::string expected;
  for (int i = 1; i <= 20; ++i) {
    const std::string data(static_cast<size_t>(i), static_cast<char>('a' + i % 26));
    char size[8];
    std::snprintf(size, sizeof size, "%X", i);
    body_wire += std::string(size) + (i % 3 == 0 ? " ;ext=\"q\"" : "") + "\r\n" + data + "\r\n";
    expected += data;
  }
  body_wire += "0\r\nTrailer-A: x\r\n\r\n";
  const std::string head = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string wire = head + body_wire + "NEXT";
  std::vector<char> buf(wire.begin(), wire.end());
  request req;
  const parse_result r = parse_request(buf.data(), buf.size(), limits{}, req);
  ASSERT_EQ(r.status, parse_status::complete);
  EXPECT_EQ(r.consumed, head.size() + body_wire.size());
  EXPECT_TRUE(req.chunked);
  EXPECT_EQ(req.body, expected);
  EXPECT_EQ(req.body.data(), buf.data() + head.size());
  EXPECT_EQ(req.content_length, expected.size());
  EXPECT_EQ(std::string_view(buf.data() + r.consumed, 4), "NEXT");
}

TEST(http_parser_test, chunked_wire_size_is_bounded) {
  // Verifies a chunked body whose framing alone exceeds max_body + max_header bytes is refused
  // with 413 instead of growing the receive buffer without bound.
  limits lim;
  lim.max_header_bytes = 128;
  lim.max_body_bytes = 64;
  std::string wire = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 100; ++i) {
    wire += "1;padding-padding\r\nx\r\n";
  }
  std::vector<char> storage;
  request req;
  const parse_result r = parse_copy(wire, lim, req, storage);
  ASSERT_EQ(r.status, parse_status::error);
  EXPECT_EQ(r.error, errc::body_too_large);
  EXPECT_EQ(status_of(r.error), 413);
}

TEST(http_parser_test, head_at_exact_limit_is_accepted) {
  // Verifies a head of exactly max_header_bytes parses and one byte more is 431.
  limits lim;
  const std::string start = "GET / HTTP/1.1\r\nHost: h\r\nX-Pad: ";
  lim.max_header_bytes = 200;
  const std::string ok = start + std::string(200 - start.size() - 4, 'p') + "\r\n\r\n";
  ASSERT_EQ(ok.size(), 200u);
  std::vector<char> storage;
  request req;
  EXPECT_EQ(parse_copy(ok, lim, req, storage).status, parse_status::complete);
  const std::string over = start + std::string(200 - start.size() - 3, 'p') + "\r\n\r\n";
  const parse_result r = parse_copy(over, lim, req, storage);
  ASSERT_EQ(r.status, parse_status::error);
  EXPECT_EQ(r.error, errc::header_too_large);
  EXPECT_EQ(status_of(r.error), 431);
}

TEST(http_parser_test, sixty_four_headers_fit_the_default_limit) {
  // Verifies the default limit accepts max_headers fields and refuses one more with 431.
  std::string wire = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (size_t i = 1; i < max_headers; ++i) {
    wire += "X-" + std::to_string(i) + ": v\r\n";
  }
  std::vector<char> storage;
  request req;
  EXPECT_EQ(parse_copy(wire + "\r\n", limits{}, req, storage).status, parse_status::complete);
  EXPECT_EQ(req.num_headers, max_headers);
  const parse_result r = parse_copy(wire + "X-Last: v\r\n\r\n", limits{}, req, storage);
  ASSERT_EQ(r.status, parse_status::error);
  EXPECT_EQ(r.error, errc::too_many_headers);
}

TEST(http_parser_test, long_values_scan_correctly_across_simd_blocks) {
  // Verifies a control byte at every offset of a long value is found (SIMD and scalar tails).
  const std::string head = "GET / HTTP/1.1\r\nHost: h\r\nX-V: ";
  for (size_t pos = 0; pos < 70; ++pos) {
    std::string value(70, 'v');
    value[pos] = '\x01';
    std::vector<char> storage;
    request req;
    const parse_result r = parse_copy(head + value + "\r\n\r\n", limits{}, req, storage);
    ASSERT_EQ(r.status, parse_status::error) << pos;
    EXPECT_EQ(r.error, errc::bad_header);
  }
}

TEST(http_parser_test, name_skip_then_byte_scan_ends_where_the_byte_scan_ends) {
  // Verifies the 16-at-a-time skip of common name bytes followed by the exact tchar scan stops
  // at the same byte as the tchar scan alone: every byte value at every position of names
  // 0-40 bytes long (crossing the 16-byte blocks), with the buffer ending at every point after
  // it, and never returning past the buffer's end.
  auto scalar = [](const char* p, const char* end) {
    while (p < end && detail::is_tchar(*p)) {
      ++p;
    }
    return p;
  };
  auto fast = [&](const char* p, const char* end) {
    const char* q = detail::skip_name_bytes(p, end);
    EXPECT_LE(q, end);
    return scalar(q, end);
  };
  const std::string alphabet = "Content-Length0123456789-xyzXYZ";
  size_t checked = 0;
  for (size_t len = 0; len <= 40; ++len) {
    for (size_t pos = 0; pos <= len; ++pos) {
      for (int b = 0; b < 256; ++b) {
        std::string buf;
        for (size_t i = 0; i < len + 20; ++i) {
          buf.push_back(alphabet[(i * 7 + len) % alphabet.size()]);
        }
        buf[pos] = static_cast<char>(b);
        buf[len + 1 < buf.size() ? len + 1 : len] = ':';
        for (size_t cut : {pos + 1, len + 1, len + 2, buf.size()}) {
          cut = cut < buf.size() ? cut : buf.size();
          const char* end = buf.data() + cut;
          ASSERT_EQ(fast(buf.data(), end), scalar(buf.data(), end))
              << "len " << len << " pos " << pos << " byte " << b << " cut " << cut;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100000u);
}

TEST(http_parser_test, input_ending_at_guard_page_is_not_overread) {
  // Verifies nothing reads past len: each input ends exactly at a PROT_NONE page, so one byte
  // of overread faults.
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, static_cast<size_t>(page) * 2, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  char* base = static_cast<char*>(mem);
  ASSERT_EQ(mprotect(base + page, static_cast<size_t>(page), PROT_NONE), 0);
  const limits lim = small_limits();
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    for (size_t n = 0; n <= c.input.size(); ++n) {
      char* start = base + page - n;
      std::memcpy(start, c.input.data(), n);
      request req;
      (void)parse_request(start, n, lim, req);
    }
  }
  // A large complete request with a chunked body ending flush against the guard.
  const std::string big = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" +
                          std::string("10\r\n") + std::string(16, 'q') + "\r\n0\r\n\r\n";
  char* start = base + page - big.size();
  std::memcpy(start, big.data(), big.size());
  request req;
  EXPECT_EQ(parse_request(start, big.size(), limits{}, req).status, parse_status::complete);
  munmap(mem, static_cast<size_t>(page) * 2);
}

TEST(http_parser_test, parse_allocates_nothing) {
  // Verifies parsing (including chunked decoding) performs no heap allocation.
  std::string wire =
      "POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n"
      "hello";
  std::string chunked =
      "POST /mcp HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
  std::vector<std::string> copies(100, chunked);  // decoding in place consumes its input
  request req;
  test::alloc_scope scope;
  for (auto& c : copies) {
    ASSERT_EQ(parse_request(wire.data(), wire.size(), limits{}, req).status,
              parse_status::complete);
    ASSERT_EQ(parse_request(c.data(), c.size(), limits{}, req).status, parse_status::complete);
    ASSERT_EQ(req.body, "hello");
  }
  EXPECT_EQ(scope.count(), 0u);
}

TEST(http_parser_test, status_and_message_cover_every_error) {
  // Verifies each errc maps to its documented status and has a message.
  EXPECT_EQ(status_of(errc::bad_request_line), 400);
  EXPECT_EQ(status_of(errc::bad_header), 400);
  EXPECT_EQ(status_of(errc::too_many_headers), 431);
  EXPECT_EQ(status_of(errc::header_too_large), 431);
  EXPECT_EQ(status_of(errc::body_too_large), 413);
  EXPECT_EQ(status_of(errc::conflicting_length), 400);
  EXPECT_EQ(status_of(errc::bad_content_length), 400);
  EXPECT_EQ(status_of(errc::bad_chunk), 400);
  EXPECT_EQ(status_of(errc::unsupported_encoding), 501);
  EXPECT_EQ(status_of(errc::unsupported_version), 505);
  for (int e = 0; e <= static_cast<int>(errc::unsupported_version); ++e) {
    EXPECT_FALSE(message(static_cast<errc>(e)).empty());
  }
}

TEST(http_parser_test, a_request_copy_outlives_the_buffer_it_was_parsed_from) {
  // Verifies request_copy (a request answered off the core) keeps every field, the indexed
  // header lookups and the path and query inside its target, after the receive buffer changed.
  const std::string wire =
      "POST /admin/keys?dry=1 HTTP/1.0\r\nHost: h\r\nAuthorization: Bearer t\r\n"
      "Idempotency-Key: k1\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
  std::vector<char> buf(wire.begin(), wire.end());
  request req;
  ASSERT_EQ(parse_request(buf.data(), buf.size(), limits{}, req).status, parse_status::complete);
  const request_copy copy(req);
  std::fill(buf.begin(), buf.end(), 'x');
  const request& c = copy.get();
  EXPECT_EQ(c.method, "POST");
  EXPECT_EQ(c.target, "/admin/keys?dry=1");
  EXPECT_EQ(c.path, "/admin/keys");
  EXPECT_EQ(c.query, "dry=1");
  EXPECT_EQ(c.path.data(), c.target.data());
  EXPECT_EQ(c.body, "{\"a\":1}");
  EXPECT_EQ(c.version_minor, 0);
  EXPECT_FALSE(c.keep_alive);
  EXPECT_EQ(c.content_length, 7u);
  EXPECT_EQ(c.field_value(field::authorization), "Bearer t");
  EXPECT_EQ(c.header_value("idempotency-key"), "k1");
  EXPECT_EQ(c.num_headers, 4u);
  request by_hand;  // a path and query apart from the target
  by_hand.method = "GET";
  by_hand.path = "/p";
  by_hand.query = "q=1";
  const request_copy hand(by_hand);
  EXPECT_EQ(hand.get().path, "/p");
  EXPECT_EQ(hand.get().query, "q=1");
}

}  // namespace
}  // namespace tollgate::http
