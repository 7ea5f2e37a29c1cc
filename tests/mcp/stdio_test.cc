// stdio transport tests: newline-delimited JSON-RPC through real file descriptors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "mcp/mcp_fixture.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;

// Feeds `input` through run_stdio and returns (exit code, output lines).
// With `keep_open`, the input is not closed: only `events` can end the run.
std::pair<int, std::vector<std::string>> run_lines(endpoint& ep, host& h, const std::string& input,
                                                   const stdio_events& events = {},
                                                   bool keep_open = false) {
  int in[2];
  EXPECT_EQ(pipe(in), 0);
  EXPECT_EQ(write(in[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
  if (!keep_open) {
    close(in[1]);
  }
  FILE* out = tmpfile();
  int rc = run_stdio(ep, h, in[0], fileno(out), events);
  close(in[0]);
  if (keep_open) {
    close(in[1]);
  }
  std::string all;
  lseek(fileno(out), 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = read(fileno(out), buf, sizeof buf)) > 0) {
    all.append(buf, static_cast<size_t>(n));
  }
  fclose(out);
  std::vector<std::string> lines;
  std::istringstream ss(all);
  std::string line;
  while (std::getline(ss, line)) {
    lines.push_back(line);
  }
  EXPECT_TRUE(all.empty() || all.back() == '\n');
  return {rc, lines};
}

class stdio_test : public ::testing::Test {
 protected:
  std::shared_ptr<fake_search> search = std::make_shared<fake_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  endpoint ep{tools, env};
  fake_host h;
  stdio_test() { ep.lend(nullptr, &h); }  // stdio's rate: the host rates each message
};

TEST_F(stdio_test, answers_each_line_and_exits_zero_at_eof) {
  // Verifies initialize negotiation, ping, a silent notification, a malformed line (-32700), a
  // CRLF line and a final line without newline, with exit code 0 at EOF.
  std::string input =
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})"
      "\n"
      R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
      "\n\n"
      R"({"jsonrpc":"2.0","id":2,"method":"ping"})"
      "\r\n"
      "{broken\n"
      R"({"jsonrpc":"2.0","id":3,"method":"tools/list"})";
  auto [rc, lines] = run_lines(ep, h, input);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(lines.size(), 4u);
  json_doc init(lines[0]);
  EXPECT_EQ(init.str("/result/protocolVersion"), "2025-06-18");
  EXPECT_EQ(lines[1], R"({"jsonrpc":"2.0","id":2,"result":{}})");
  json_doc bad(lines[2]);
  EXPECT_EQ(bad.num("/error/code"), -32700);
  EXPECT_TRUE(bad.is_null("/id"));
  json_doc list(lines[3]);
  EXPECT_EQ(list.str("/result/tools/0/name"), "search_stories");
  EXPECT_EQ(ep.stdio_revision(), envelope::revision::v2025_06_18);
}

TEST_F(stdio_test, rate_limit_is_a_rate_limited_tool_error) {
  // Verifies a stdio rate-limit breach comes back as the rate_limited tool error with
  // retry_after_secs (stdio cannot carry a status), and the tool does not run.
  h.next = admission{envelope::tool_error_code::rate_limited, 2, -1, -1, -1};
  auto [rc, lines] = run_lines(
      ep, h,
      R"({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"x"}}})"
      "\n");
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(lines.size(), 1u);
  json_doc d(lines[0]);
  EXPECT_EQ(d.raw("/result/isError"), "true");
  json_doc text(d.str("/result/content/0/text"));
  EXPECT_EQ(text.str("/code"), "rate_limited");
  EXPECT_EQ(text.num("/retry_after_secs"), 2);
  EXPECT_EQ(search->calls, 0);
}

TEST_F(stdio_test, successful_call_and_schema_error) {
  // Verifies tools/call success and -32602 over stdio, and that large inputs spanning reads work.
  std::string big(40000, 'z');
  std::string input =
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"a"}}})"
      "\n"
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"a","limit":0}}})"
      "\n"
      R"({"jsonrpc":"2.0","id":3,"method":"ping","params":{"pad":")" +
      big + "\"}}\n";
  auto [rc, lines] = run_lines(ep, h, input);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(lines.size(), 3u);
  json_doc ok(lines[0]);
  EXPECT_EQ(ok.raw("/result/isError"), "false");
  json_doc bad(lines[1]);
  EXPECT_EQ(bad.num("/error/code"), -32602);
  EXPECT_EQ(bad.str("/error/data/argument"), "limit");
  EXPECT_EQ(lines[2], R"({"jsonrpc":"2.0","id":3,"result":{}})");
  EXPECT_EQ(h.settled_ok, 1);
}

TEST_F(stdio_test, meta_protocol_version_selects_2026_07_28_per_message) {
  // Verifies that on stdio (no headers) a request whose _meta names 2026-07-28 gets the
  // 2026-07-28 shapes (resultType; initialize unknown), an unsupported one gets -32022, and a
  // request without _meta keeps the negotiated revision.
  const std::string meta =
      R"("_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}})";
  std::string input =
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{)" + meta + "}}\n" +
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"q"},)" +
      meta + "}}\n" + R"({"jsonrpc":"2.0","id":3,"method":"ping","params":{)" + meta + "}}\n" +
      R"({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2026-07-28",)" +
      meta + "}}\n" +
      R"({"jsonrpc":"2.0","id":5,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2030-01-01"}}})"
      "\n" +
      R"({"jsonrpc":"2.0","id":6,"method":"ping"})"
      "\n";
  auto [rc, lines] = run_lines(ep, h, input);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(lines.size(), 6u);
  json_doc list(lines[0]);
  EXPECT_EQ(list.str("/result/resultType"), "complete");
  json_doc call(lines[1]);
  EXPECT_EQ(call.str("/result/resultType"), "complete");
  EXPECT_EQ(call.raw("/result/isError"), "false");
  EXPECT_EQ(lines[2], R"({"jsonrpc":"2.0","id":3,"result":{"resultType":"complete"}})");
  json_doc init(lines[3]);
  EXPECT_EQ(init.num("/error/code"), -32601);
  json_doc bad(lines[4]);
  EXPECT_EQ(bad.num("/error/code"), -32022);
  EXPECT_EQ(lines[5], R"({"jsonrpc":"2.0","id":6,"result":{}})");
}

TEST_F(stdio_test, non_tool_requests_are_rated_through_rate_check) {
  // Verifies every stdio request except tools/call (rated in admit) and notifications asks the
  // host's rate_check, and a breach answers the JSON-RPC 429 error with the rate_limited data.
  h.rate = admission{envelope::tool_error_code::rate_limited, 4, -1, -1, -1};
  auto [rc, lines] = run_lines(
      ep, h,
      R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"
      "\n"
      R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
      "\n"
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"x"}}})"
      "\n");
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(lines.size(), 2u);
  json_doc d(lines[0]);
  EXPECT_EQ(d.num("/error/code"), 429);
  EXPECT_EQ(d.num("/id"), 1);
  EXPECT_EQ(d.str("/error/data/code"), "rate_limited");
  EXPECT_EQ(d.num("/error/data/retry_after_secs"), 4);
  EXPECT_EQ(h.rate_checks, 1);
  json_doc call(lines[1]);
  EXPECT_EQ(call.raw("/result/isError"), "false");
}

TEST_F(stdio_test, empty_input_exits_zero_with_no_output) {
  // Verifies immediate EOF flushes nothing and returns 0.
  auto [rc, lines] = run_lines(ep, h, "");
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(lines.empty());
}

// An event source for run_stdio: a pipe holding `pending` bytes; each on_ready drains one byte
// and answers `keep_going` until `stop_after` calls have been made.
struct event_pipe {
  int fds[2] = {-1, -1};
  int calls = 0;
  int stop_after = 1;
  event_pipe(int pending, int stop) : stop_after(stop) {
    EXPECT_EQ(pipe(fds), 0);
    for (int i = 0; i < pending; ++i) {
      EXPECT_EQ(write(fds[1], "x", 1), 1);
    }
  }
  ~event_pipe() {
    close(fds[0]);
    close(fds[1]);
  }
  stdio_events events() {
    stdio_events e;
    e.fd = fds[0];
    e.ctx = this;
    e.on_ready = [](void* p) -> bool {
      auto& self = *static_cast<event_pipe*>(p);
      char c;
      EXPECT_EQ(read(self.fds[0], &c, 1), 1);
      return ++self.calls < self.stop_after;
    };
    return e;
  }
};

TEST_F(stdio_test, an_event_that_says_stop_ends_the_run_after_the_lines_read_are_answered) {
  // Verifies that with input still open (no EOF) a stop event (SIGTERM in the app) ends the run
  // with 0, and that the lines already waiting are answered before it stops.
  event_pipe ev(1, 1);
  std::string input = R"({"jsonrpc":"2.0","id":1,"method":"ping"})"
                      "\n"
                      R"({"jsonrpc":"2.0","id":2,"method":"ping"})"
                      "\n";
  auto [rc, lines] = run_lines(ep, h, input, ev.events(), true);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ev.calls, 1);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], R"({"jsonrpc":"2.0","id":2,"result":{}})");
}

TEST_F(stdio_test, events_that_say_go_on_are_each_handled_and_serving_continues) {
  // Verifies events that do not stop (SIGHUP's reload in the app) are each handled once while
  // input is answered, until one says stop (input still open: only the events end the run).
  event_pipe ev(3, 3);
  auto [rc, lines] = run_lines(ep, h,
                               R"({"jsonrpc":"2.0","id":1,"method":"ping"})"
                               "\n",
                               ev.events(), true);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ev.calls, 3);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], R"({"jsonrpc":"2.0","id":1,"result":{}})");
}

}  // namespace
}  // namespace tollgate::mcp
