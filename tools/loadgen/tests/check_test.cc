// Response checks (check.cc): MCP tool results and errors, JSON-RPC errors, 401/429, SSE and
// REST statuses, each counted as its outcome.
#include "check.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "http_response.h"
#include "stats.h"
#include "tool_result.h"

namespace tollgate::loadgen {
namespace {

using test::tool_result;

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

}  // namespace
}  // namespace tollgate::loadgen
