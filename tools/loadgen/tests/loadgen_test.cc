// Tests for the load generator: the histogram, response framing, response checks, request
// rendering, and the io_uring engine end to end against a small poll() server on 127.0.0.1.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "engine.h"
#include "histogram.h"
#include "http_response.h"
#include "stats.h"
#include "workload.h"

namespace tollgate::loadgen {
namespace {

// ---------------------------------------------------------------------------------------------
// histogram

TEST(loadgen_histogram_test, exact_below_256_and_within_one_percent_above) {
  // Verifies every value maps to a bucket whose highest equivalent value is >= it and within
  // 1/128 of it, and that bucket indices never decrease as values grow.
  std::size_t last = 0;
  for (std::uint64_t v = 0; v < 2'000'000; v += (v < 1000 ? 1 : 997)) {
    std::size_t i = histogram::index_of(v);
    ASSERT_GE(i, last);
    last = i;
    std::uint64_t hi = histogram::highest_equivalent(i);
    ASSERT_GE(hi, v);
    if (v < 256) {
      ASSERT_EQ(hi, v);
    } else {
      ASSERT_LE(static_cast<double>(hi - v), static_cast<double>(v) / 128.0);
    }
  }
}

TEST(loadgen_histogram_test, quantiles_of_uniform_samples) {
  // Verifies p50/p99/max of 1..100000 within the histogram's precision, and merge adds counts.
  histogram a;
  histogram b;
  for (std::uint64_t v = 1; v <= 100000; v++) {
    (v % 2 ? a : b).record(v);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), 100000u);
  EXPECT_NEAR(static_cast<double>(a.quantile(0.5)), 50000.0, 50000.0 / 100);
  EXPECT_NEAR(static_cast<double>(a.quantile(0.99)), 99000.0, 99000.0 / 100);
  EXPECT_EQ(a.quantile(1.0), 100000u);
  EXPECT_EQ(a.max(), 100000u);
  EXPECT_EQ(a.min(), 1u);
}

// ---------------------------------------------------------------------------------------------
// framing

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

// ---------------------------------------------------------------------------------------------
// checks

std::string tool_result(std::int64_t id, bool is_error, const std::string& text_escaped) {
  return "{\"jsonrpc\":\"2.0\",\"id\":" + std::to_string(id) +
         ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" + text_escaped +
         "\"}],\"isError\":" + (is_error ? "true" : "false") + "}}";
}

outcome check_one(int status, const std::string& body, req_kind kind, std::int64_t id,
                  std::string ct = "application/json", bool retry_after = false) {
  static response_checker checker;
  static std::string keep;
  keep = body;
  response_head h;
  h.status = status;
  h.content_type = ct;
  h.has_retry_after = retry_after;
  return checker.check(h, keep, expectation{kind, id, 200}, check_level::full);
}

TEST(loadgen_check_test, search_success_is_ok) {
  // Verifies a well-formed tools/call success with a search payload is a success.
  outcome o = check_one(200, tool_result(7, false, R"({\"total\":1,\"stories\":[]})"),
                        req_kind::mcp_call, 7);
  EXPECT_EQ(o.kind, outcome_kind::ok);
}

TEST(loadgen_check_test, wrong_id_is_bad_response) {
  // Verifies an answer to another request id is never a success.
  outcome o = check_one(200, tool_result(8, false, R"({\"total\":1,\"stories\":[]})"),
                        req_kind::mcp_call, 7);
  EXPECT_EQ(o.kind, outcome_kind::bad_response);
  EXPECT_EQ(o.detail, "id mismatch");
}

TEST(loadgen_check_test, tool_error_code_is_read_from_text_block) {
  // Verifies isError:true yields the tool-error code from the JSON inside the text block.
  outcome o =
      check_one(200, tool_result(3, true, R"({\"code\":\"quota_exceeded\",\"message\":\"m\"})"),
                req_kind::mcp_call, 3);
  EXPECT_EQ(o.kind, outcome_kind::tool_error);
  EXPECT_EQ(o.detail, "quota_exceeded");
}

TEST(loadgen_check_test, repeated_identical_success_is_memoized_but_never_widened) {
  // Verifies a byte-identical repeat of a passing answer is a success without re-parsing,
  // while a change in the expected id, the status, the content type or any body byte is
  // checked afresh (and fails where it should).
  response_checker checker;
  std::string body = tool_result(5, false, R"({\"total\":1,\"stories\":[{\"id\":\"1\"}]})");
  response_head h;
  h.status = 200;
  h.content_type = "application/json";
  expectation want{req_kind::mcp_call, 5, 200};
  EXPECT_EQ(checker.check(h, body, want, check_level::full).kind, outcome_kind::ok);
  EXPECT_EQ(checker.memo_hits(), 0u);
  std::string again = body;  // another buffer, same bytes
  EXPECT_EQ(checker.check(h, again, want, check_level::full).kind, outcome_kind::ok);
  EXPECT_EQ(checker.memo_hits(), 1u);

  expectation other_id{req_kind::mcp_call, 6, 200};
  outcome o = checker.check(h, again, other_id, check_level::full);
  EXPECT_EQ(o.kind, outcome_kind::bad_response);
  EXPECT_EQ(o.detail, "id mismatch");

  response_head status_500 = h;
  status_500.status = 500;
  EXPECT_EQ(checker.check(status_500, again, want, check_level::full).kind,
            outcome_kind::http_status);

  response_head text = h;
  text.content_type = "text/plain";
  EXPECT_NE(checker.check(text, again, want, check_level::full).kind, outcome_kind::ok);

  std::string broken = body;
  broken[broken.size() - 1] = ' ';  // drops the closing brace
  EXPECT_EQ(checker.check(h, broken, want, check_level::full).kind, outcome_kind::bad_response);
  EXPECT_EQ(checker.memo_hits(), 1u);
}

TEST(loadgen_check_test, jsonrpc_error_code_is_counted) {
  // Verifies a JSON-RPC error object is classified by its code.
  outcome o = check_one(
      200, R"({"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"Unknown tool: x"}})",
      req_kind::mcp_call, 4);
  EXPECT_EQ(o.kind, outcome_kind::jsonrpc_error);
  EXPECT_EQ(o.code, -32602);
}

TEST(loadgen_check_test, unparseable_or_incomplete_bodies_are_errors) {
  // Verifies broken JSON, a text block that is not JSON, a missing payload field, more stories
  // than the total, stories that are not objects and a double-encoded text are all bad
  // responses, never successes.
  const std::vector<std::string> bodies = {
      "{not json",
      tool_result(1, false, "plain words"),
      tool_result(1, false, R"({\"stories\":[]})"),
      tool_result(1, false, R"({\"total\":0,\"stories\":[{}]})"),
      tool_result(1, false, R"({\"total\":5,\"stories\":[1,2]})"),
      tool_result(1, false, R"(\"{\\\"total\\\":1}\")"),
      R"({"jsonrpc":"2.0","id":1})",
      R"({"jsonrpc":"1.0","id":1,"result":{}})",
  };
  for (const auto& b : bodies) {
    EXPECT_EQ(check_one(200, b, req_kind::mcp_call, 1).kind, outcome_kind::bad_response) << b;
  }
}

TEST(loadgen_check_test, statuses_401_and_429) {
  // Verifies 401 counts as http 401, 429 with Retry-After as http 429, and 429 without it as
  // a bad response (the contract requires Retry-After).
  EXPECT_EQ(check_one(401, "{}", req_kind::mcp_call, 1).code, 401);
  outcome o = check_one(429, "{}", req_kind::mcp_call, 1, "application/json", true);
  EXPECT_EQ(o.kind, outcome_kind::http_status);
  EXPECT_EQ(o.code, 429);
  EXPECT_EQ(check_one(429, "{}", req_kind::mcp_call, 1).kind, outcome_kind::bad_response);
}

TEST(loadgen_check_test, sse_response_is_unwrapped) {
  // Verifies a text/event-stream answer is checked on its first event's data.
  std::string body =
      "event: message\ndata: " + tool_result(5, false, R"({\"total\":0,\"stories\":[]})") + "\n\n";
  EXPECT_EQ(check_one(200, body, req_kind::mcp_call, 5, "text/event-stream").kind,
            outcome_kind::ok);
}

TEST(loadgen_check_test, rest_statuses_carry_the_error_code) {
  // Verifies REST success needs total/stories and a REST error reports its code.
  EXPECT_EQ(check_one(200, R"({"total":2,"stories":[]})", req_kind::rest_search, 0).kind,
            outcome_kind::ok);
  outcome o = check_one(429, R"({"code":"quota_exceeded"})", req_kind::rest_search, 0,
                        "application/json", true);
  EXPECT_EQ(o.kind, outcome_kind::http_status);
  EXPECT_EQ(o.detail, "quota_exceeded");
  EXPECT_EQ(check_one(200, "[]", req_kind::rest_search, 0).kind, outcome_kind::bad_response);
}

// ---------------------------------------------------------------------------------------------
// request rendering

TEST(loadgen_workload_test, renders_mcp_call_with_headers_and_length) {
  // Verifies the tools/call request carries the MCP headers, the key, an exact Content-Length
  // and a JSON-escaped query.
  workload_config cfg;
  cfg.keys = {"k1"};
  cfg.queries = {"say \"hi\""};
  request_spec s;
  std::string err;
  ASSERT_TRUE(parse_request_spec("call@3", s, err)) << err;
  EXPECT_EQ(s.weight, 3u);
  cfg.mix = {s};
  workload w;
  ASSERT_TRUE(w.build(cfg, err)) << err;
  std::string out;
  std::string tmp;
  w.render(out, tmp, 0, 0, 0, 42);
  std::string body =
      R"({"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"say \"hi\""}}})";
  EXPECT_NE(out.find("POST /mcp HTTP/1.1\r\n"), std::string::npos);
  EXPECT_NE(out.find("Accept: application/json, text/event-stream\r\n"), std::string::npos);
  EXPECT_NE(out.find("MCP-Protocol-Version: 2025-06-18\r\n"), std::string::npos);
  EXPECT_NE(out.find("Authorization: Bearer k1\r\n"), std::string::npos);
  EXPECT_NE(out.find("Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body),
            std::string::npos);
}

TEST(loadgen_workload_test, rejects_bad_specs) {
  // Verifies unknown kinds and zero weights are refused with a message.
  request_spec s;
  std::string err;
  EXPECT_FALSE(parse_request_spec("delete", s, err));
  EXPECT_FALSE(parse_request_spec("call@0", s, err));
  EXPECT_FALSE(parse_request_spec("get:nopath", s, err));
  EXPECT_TRUE(parse_request_spec("get:/healthz", s, err));
  EXPECT_EQ(s.path, "/healthz");
}

TEST(loadgen_workload_test, zipf_prefers_the_first_key) {
  // Verifies key 0 is drawn more often than key 9 under Zipf s=1, and every key is drawn.
  workload_config cfg;
  for (int i = 0; i < 10; i++) {
    std::string key = "k";
    key += static_cast<char>('0' + i);
    cfg.keys.push_back(key);
  }
  cfg.mix = {request_spec{}};
  cfg.mix[0].path = "/";
  workload w;
  std::string err;
  ASSERT_TRUE(w.build(cfg, err)) << err;
  picker p(w, 1);
  std::vector<int> seen(10);
  for (int i = 0; i < 100000; i++) {
    seen[p.key()]++;
  }
  EXPECT_GT(seen[0], 3 * seen[9]);
  for (int n : seen) {
    EXPECT_GT(n, 0);
  }
}

TEST(loadgen_workload_test, query_zipf_follows_the_weights_and_defaults_to_uniform) {
  // Verifies --query-zipf 1.1 draws query i about as often as 1/(i+1)^1.1 of the total, every
  // query at least once, and that without it the draw stays uniform.
  workload_config cfg;
  for (int i = 0; i < 100; i++) {
    cfg.queries.push_back("q" + std::to_string(i));
  }
  cfg.mix = {request_spec{req_kind::mcp_call, "", 1}};
  std::string err;
  workload uniform;
  ASSERT_TRUE(uniform.build(cfg, err)) << err;
  EXPECT_TRUE(uniform.query_cdf().empty());
  cfg.query_zipf_s = 1.1;
  workload zipf;
  ASSERT_TRUE(zipf.build(cfg, err)) << err;
  double norm = 0;
  for (int i = 0; i < 100; i++) {
    norm += 1.0 / std::pow(i + 1.0, 1.1);
  }
  constexpr int draws = 400000;
  std::vector<int> z(100), u(100);
  picker pz(zipf, 7), pu(uniform, 7);
  for (int i = 0; i < draws; i++) {
    z[pz.query()]++;
    u[pu.query()]++;
  }
  for (int i : {0, 1, 9, 99}) {
    double want = draws / std::pow(i + 1.0, 1.1) / norm;
    EXPECT_NEAR(z[i], want, 0.1 * want + 50) << "query " << i;
  }
  for (int i = 0; i < 100; i++) {
    EXPECT_GT(z[i], 0);
    EXPECT_NEAR(u[i], draws / 100.0, draws / 100.0 * 0.1) << "query " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// engine, end to end over real sockets and a real ring

/// A single-threaded poll() HTTP server on 127.0.0.1:0 that answers each request with
/// `answer(request_body)`. Stops within ~20 ms of stop().
class tiny_server {
 public:
  using answer_fn = std::function<std::string(const std::string& body)>;

  /// `piece` > 0 writes each batch of answers in pieces of that many bytes, 1 ms apart, so
  /// responses arrive split across reads.
  explicit tiny_server(answer_fn answer, std::size_t piece = 0)
      : answer_(std::move(answer)), piece_(piece) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    EXPECT_EQ(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(lfd_, 128), 0);
    socklen_t len = sizeof addr_;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&addr_), &len);
    thread_ = std::thread([this] { loop(); });
  }
  ~tiny_server() {
    stop_ = true;
    thread_.join();
    ::close(lfd_);
  }
  const sockaddr_in& addr() const { return addr_; }
  int accepted() const { return accepted_.load(); }

 private:
  void loop() {
    std::map<int, std::string> in;
    while (!stop_) {
      std::vector<pollfd> fds{{lfd_, POLLIN, 0}};
      for (auto& [fd, _] : in) {
        fds.push_back({fd, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) {
        continue;
      }
      if (fds[0].revents & POLLIN) {
        int c = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          in[c];
          accepted_++;
        }
      }
      for (std::size_t i = 1; i < fds.size(); i++) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
          continue;
        }
        int fd = fds[i].fd;
        char buf[65536];
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) {
          ::close(fd);
          in.erase(fd);
          continue;
        }
        std::string& b = in[fd];
        b.append(buf, static_cast<std::size_t>(n));
        std::string out;
        bool close = false;
        for (;;) {
          std::size_t end = b.find("\r\n\r\n");
          if (end == std::string::npos) {
            break;
          }
          std::size_t cl = 0;
          std::size_t p = b.find("Content-Length: ");
          if (p != std::string::npos && p < end) {
            cl = std::stoul(b.substr(p + 16));
          }
          if (b.size() < end + 4 + cl) {
            break;
          }
          std::string resp = answer_(b.substr(end + 4, cl));
          close |= resp.find("Connection: close") != std::string::npos;
          out += resp;
          b.erase(0, end + 4 + cl);
        }
        if (!out.empty() && piece_ == 0) {
          ssize_t w = ::write(fd, out.data(), out.size());
          (void)w;
        } else {
          for (std::size_t at = 0; at < out.size(); at += piece_) {
            std::size_t len = out.size() - at < piece_ ? out.size() - at : piece_;
            ssize_t w = ::send(fd, out.data() + at, len, MSG_NOSIGNAL);
            (void)w;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }
        if (close) {
          ::close(fd);
          in.erase(fd);
        }
      }
    }
    for (auto& [fd, _] : in) {
      ::close(fd);
    }
  }

  answer_fn answer_;
  std::size_t piece_ = 0;
  int lfd_ = -1;
  sockaddr_in addr_{};
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

std::int64_t id_of(const std::string& body) {
  std::size_t p = body.find("\"id\":");
  return p == std::string::npos ? -1 : std::stoll(body.substr(p + 5));
}

std::string json_response(const std::string& json, const char* extra = "") {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + std::string(extra) +
         "Content-Length: " + std::to_string(json.size()) + "\r\n\r\n" + json;
}

/// Runs one load thread against `srv` with `conns` connections and `depth` until `stop_after`
/// outcomes were counted (the 20 s end time is only a safety net), or, with stop_after 0,
/// for `window_ms`.
thread_stats run_against(const tiny_server& srv, unsigned conns, unsigned depth,
                         std::uint64_t stop_after, double rate = 0, std::uint64_t window_ms = 0,
                         run_config cfg = {}) {
  std::memcpy(&cfg.addr, &srv.addr(), sizeof(sockaddr_in));
  cfg.addr_len = sizeof(sockaddr_in);
  cfg.connections = conns;
  cfg.depth = depth;
  cfg.rate = rate;
  cfg.stop_after = stop_after;
  workload_config wc;
  wc.keys = {"k"};
  request_spec s;
  std::string err;
  EXPECT_TRUE(parse_request_spec("call", s, err));
  wc.mix = {s};
  workload w;
  EXPECT_TRUE(w.build(wc, err)) << err;
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin;
  t.end = t.measure + (window_ms > 0 ? window_ms * 1'000'000 : 20'000'000'000ull);
  thread_stats st;
  run_thread(cfg, w, t, 0, conns, st);
  EXPECT_TRUE(st.fatal.empty()) << st.fatal;
  return st;
}

const std::string kPayload = R"({\"total\":1,\"stories\":[{\"id\":\"1\"}]})";

TEST(loadgen_engine_test, closed_loop_pipelined_all_ok) {
  // Verifies a correct server gets only successes, with 4 connections pipelining 8 deep, and
  // that latency samples match the responses counted.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  thread_stats st = run_against(srv, 4, 8, 400);
  EXPECT_GE(st.responses, 400u);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_EQ(st.outcomes.errors(), 0u);
  EXPECT_EQ(st.latency.count(), st.responses);
}

TEST(loadgen_engine_test, wrong_ids_are_never_successes) {
  // Verifies a server that answers with the wrong id yields only id-mismatch errors.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body) + 1, false, kPayload));
  });
  thread_stats st = run_against(srv, 2, 1, 50);
  EXPECT_GE(st.responses, 50u);
  EXPECT_EQ(st.outcomes.ok(), 0u);
  ASSERT_EQ(st.outcomes.rows().size(), 1u);
  EXPECT_EQ(st.outcomes.rows()[0].detail, "id mismatch");
}

TEST(loadgen_engine_test, connection_close_reconnects) {
  // Verifies `Connection: close` answers are all counted as successes and the engine
  // reconnects for the next request.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload), "Connection: close\r\n");
  });
  thread_stats st = run_against(srv, 2, 1, 50);
  EXPECT_GE(st.responses, 50u);
  EXPECT_EQ(st.outcomes.errors(), 0u);
  EXPECT_GT(st.connects, 10u);
  EXPECT_GT(srv.accepted(), 10);
}

TEST(loadgen_engine_test, open_loop_sends_at_the_rate) {
  // Verifies an open-loop run at 2000 req/s never sends ahead of its schedule: 500 ms of
  // schedule hold at most 1000 requests, where a closed loop would send many more.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  thread_stats st = run_against(srv, 4, 1, 0, 2000, 500);
  EXPECT_GT(st.responses, 0u);
  EXPECT_LE(st.responses, 1000u);
  EXPECT_EQ(st.outcomes.errors(), 0u);
}

TEST(loadgen_engine_test, refused_connections_are_transport_errors) {
  // Verifies that with nothing listening, the run reports connect errors and no success.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);  // the port is now (very likely) closed
  run_config cfg;
  std::memcpy(&cfg.addr, &a, sizeof a);
  cfg.addr_len = sizeof a;
  cfg.connections = 2;
  workload_config wc;
  wc.mix = {request_spec{}};
  wc.mix[0].path = "/";
  workload w;
  std::string err;
  ASSERT_TRUE(w.build(wc, err));
  cfg.stop_after = 4;
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin;
  t.end = t.begin + 20'000'000'000ull;  // safety net: stop_after ends it
  thread_stats st;
  run_thread(cfg, w, t, 0, 2, st);
  EXPECT_EQ(st.outcomes.ok(), 0u);
  ASSERT_FALSE(st.outcomes.rows().empty());
  EXPECT_EQ(st.outcomes.rows()[0].kind, outcome_kind::transport);
  EXPECT_GE(st.outcomes.errors(), 4u);
}

TEST(loadgen_engine_test, responses_split_across_reads_are_framed) {
  // Verifies responses that arrive a few bytes at a time (each read ends mid-response, so the
  // tail is kept between reads) are all framed and checked as successes.
  tiny_server srv(
      [](const std::string& body) {
        return json_response(tool_result(id_of(body), false, kPayload));
      },
      7);
  thread_stats st = run_against(srv, 2, 2, 20);
  EXPECT_GE(st.responses, 20u);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_EQ(st.outcomes.errors(), 0u);
}

TEST(loadgen_engine_test, every_feature_subset_gives_the_same_outcomes) {
  // Verifies the engine is correct with each optional io_uring feature turned off (plain
  // ring, no registered files, one recv per read), so a kernel without them still works.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  for (unsigned f :
       {0u, unsigned{feat_coop_taskrun}, unsigned{feat_defer_taskrun},
        feat_all & ~unsigned{feat_fixed_files}, feat_all & ~unsigned{feat_buf_ring},
        feat_all & ~unsigned{feat_ring_fd}, unsigned{feat_ring_fd}, unsigned{feat_all}}) {
    run_config cfg;
    cfg.features = f;
    thread_stats st = run_against(srv, 3, 2, 60, 0, 0, cfg);
    EXPECT_GE(st.responses, 60u) << ring_feature_names(f);
    EXPECT_EQ(st.outcomes.ok(), st.responses) << ring_feature_names(f);
    EXPECT_EQ(st.features & ~f, 0u) << "uses a feature it was told not to";
    EXPECT_TRUE(st.ring_note.empty()) << st.ring_note;
  }
}

TEST(loadgen_engine_test, wait_batch_settings_all_complete) {
  // Verifies the auto wait batch, waking for every completion and a fixed batch larger than
  // the requests outstanding all finish with only successes (a batch never waits for answers
  // that cannot come).
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  for (unsigned b : {0u, 1u, 64u}) {
    run_config cfg;
    cfg.wait_batch = b;
    thread_stats st = run_against(srv, 4, 1, 100, 0, 0, cfg);
    EXPECT_GE(st.responses, 100u) << b;
    EXPECT_EQ(st.outcomes.ok(), st.responses) << b;
  }
}

TEST(loadgen_engine_test, tcp_segments_count_only_the_window) {
  // Verifies the TCP_INFO segment counts cover the measured window only: after a warm-up,
  // a closed loop at depth 1 (each small request is one data segment) sent as many data
  // segments as responses, give or take the one request per connection in flight at each
  // edge of the window. Counting the warm-up too would add about half again.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  run_config cfg;
  std::memcpy(&cfg.addr, &srv.addr(), sizeof(sockaddr_in));
  cfg.addr_len = sizeof(sockaddr_in);
  cfg.connections = 2;
  workload_config wc;
  wc.keys = {"k"};
  request_spec s;
  std::string err;
  ASSERT_TRUE(parse_request_spec("call", s, err));
  wc.mix = {s};
  workload w;
  ASSERT_TRUE(w.build(wc, err)) << err;
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin + 200'000'000ull;
  t.end = t.measure + 400'000'000ull;
  thread_stats st;
  run_thread(cfg, w, t, 0, cfg.connections, st);
  ASSERT_TRUE(st.fatal.empty()) << st.fatal;
  ASSERT_GE(st.responses, 100u);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.tcp_data_segs_out + cfg.connections, st.responses);
  EXPECT_LE(st.tcp_data_segs_out, st.responses + cfg.connections);
  EXPECT_GE(st.tcp_segs_out, st.tcp_data_segs_out);
}

int refuse_defer(unsigned entries, io_uring* ring, io_uring_params* p) {
  if ((p->flags & IORING_SETUP_DEFER_TASKRUN) != 0) {
    return -EINVAL;
  }
  return io_uring_queue_init_params(entries, ring, p);
}

int refuse_taskrun_flags(unsigned entries, io_uring* ring, io_uring_params* p) {
  if ((p->flags & (IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN)) != 0) {
    return -EINVAL;
  }
  return io_uring_queue_init_params(entries, ring, p);
}

int refuse_everything(unsigned, io_uring*, io_uring_params*) { return -ENOSYS; }

TEST(loadgen_engine_test, refused_setup_flags_fall_back_with_a_note) {
  // Verifies a kernel that refuses DEFER_TASKRUN gets COOP_TASKRUN, one that refuses both
  // gets a plain ring, each run still all successes, and the note names what was refused.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  run_config cfg;
  cfg.ring_init = &refuse_defer;
  thread_stats st = run_against(srv, 2, 1, 30, 0, 0, cfg);
  EXPECT_EQ(st.features & (feat_defer_taskrun | feat_coop_taskrun), unsigned{feat_coop_taskrun});
  EXPECT_NE(st.ring_note.find("DEFER_TASKRUN refused"), std::string::npos) << st.ring_note;
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.responses, 30u);

  cfg.ring_init = &refuse_taskrun_flags;
  st = run_against(srv, 2, 1, 30, 0, 0, cfg);
  EXPECT_EQ(st.features & (feat_defer_taskrun | feat_coop_taskrun), 0u);
  EXPECT_NE(st.ring_note.find("COOP_TASKRUN refused"), std::string::npos) << st.ring_note;
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.responses, 30u);
}

TEST(loadgen_engine_test, unknown_congestion_control_keeps_the_default_with_a_note) {
  // Verifies a TCP congestion control the kernel does not know is noted once and the run
  // goes on with the system default.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  run_config cfg;
  cfg.congestion = "no_such_cc";
  thread_stats st = run_against(srv, 2, 1, 20, 0, 0, cfg);
  EXPECT_NE(st.ring_note.find("TCP_CONGESTION no_such_cc refused"), std::string::npos)
      << st.ring_note;
  EXPECT_EQ(st.ring_note.find("TCP_CONGESTION", st.ring_note.find("TCP_CONGESTION") + 1),
            std::string::npos);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.responses, 20u);
}

TEST(loadgen_engine_test, a_ring_that_cannot_be_created_is_fatal) {
  // Verifies that when io_uring itself is unavailable the thread reports a fatal message
  // saying so, instead of running without a ring.
  run_config cfg;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::memcpy(&cfg.addr, &a, sizeof a);
  cfg.addr_len = sizeof a;
  cfg.ring_init = &refuse_everything;
  workload_config wc;
  wc.mix = {request_spec{}};
  wc.mix[0].path = "/";
  workload w;
  std::string err;
  ASSERT_TRUE(w.build(wc, err));
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin;
  t.end = t.begin + 1'000'000'000ull;
  thread_stats st;
  run_thread(cfg, w, t, 0, 1, st);
  EXPECT_NE(st.fatal.find("io_uring_queue_init"), std::string::npos) << st.fatal;
  EXPECT_EQ(st.outcomes.ok(), 0u);
}

TEST(loadgen_ring_features_test, names_round_trip) {
  // Verifies feature lists parse into bits and print back, and unknown names are refused.
  unsigned f = 0;
  ASSERT_TRUE(parse_ring_features("fixed_files,defer_taskrun", f));
  EXPECT_EQ(f, unsigned{feat_fixed_files | feat_defer_taskrun});
  EXPECT_EQ(ring_feature_names(f), "defer_taskrun+fixed_files");
  ASSERT_TRUE(parse_ring_features("ring_fd,buf_ring", f));
  EXPECT_EQ(f, unsigned{feat_ring_fd | feat_buf_ring});
  EXPECT_EQ(ring_feature_names(f), "buf_ring+ring_fd");
  ASSERT_TRUE(parse_ring_features("all", f));
  EXPECT_EQ(f, unsigned{feat_all});
  ASSERT_TRUE(parse_ring_features("none", f));
  EXPECT_EQ(f, 0u);
  EXPECT_EQ(ring_feature_names(0), "plain");
  EXPECT_FALSE(parse_ring_features("defer_taskrun,sqpoll", f));
  EXPECT_FALSE(parse_ring_features("", f));
}

}  // namespace
}  // namespace tollgate::loadgen
