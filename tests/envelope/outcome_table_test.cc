// The outcome table (include/tollgate/envelope/outcome_table.h) walked against the error model's
// own rows: the seed's "What goes where" and tool-error code tables, and the README's REST column.
#include "tollgate/envelope/outcome_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string_view>

namespace tollgate::envelope {
namespace {

const outcome_row* find(std::string_view condition) {
  for (const outcome_row& r : outcome_table) {
    if (r.condition == condition) {
      return &r;
    }
  }
  return nullptr;
}

// One row of the error model as the seed writes it: how MCP over HTTP reports the condition.
struct seed_row {
  std::string_view condition;
  mcp_form form;
  int mcp_code;                      // HTTP status or JSON-RPC code; 0 for a tool error
  std::string_view tool_error_name;  // the `code` of the tool error; empty when none
  int rest_status;                   // README's REST column; 0 where REST has none
  bool retry_after;
};

constexpr seed_row kSeed[] = {
    {"missing or invalid key", mcp_form::http_status, 401, "", 401, false},
    {"rate limit exceeded", mcp_form::http_status, 429, "rate_limited", 429, true},
    {"unknown tool", mcp_form::jsonrpc_error, -32602, "", 0, false},
    {"bad argument", mcp_form::jsonrpc_error, -32602, "", 400, false},
    {"unknown method", mcp_form::jsonrpc_error, -32601, "", 0, false},
    {"account suspended", mcp_form::tool_error, 0, "suspended", 403, false},
    {"monthly quota used up", mcp_form::tool_error, 0, "quota_exceeded", 429, true},
    {"story id not found", mcp_form::tool_error, 0, "not_found", 404, false},
    {"no shard answered", mcp_form::tool_error, 0, "unavailable", 503, true},
    {"usage cannot be recorded", mcp_form::tool_error, 0, "unavailable", 503, true},
    {"quota service unreachable", mcp_form::tool_error, 0, "unavailable", 503, true},
    {"stored story unreadable", mcp_form::tool_error, 0, "unavailable", 503, false},
    {"call past its deadline", mcp_form::tool_error, 0, "unavailable", 0, true},
    {"call cancelled by its client", mcp_form::tool_error, 0, "unavailable", 0, false},
    {"corpus still loading", mcp_form::tool_error, 0, "unavailable", 0, true},
    {"keys not loaded yet", mcp_form::http_status, 503, "", 503, true},
};

TEST(outcome_table_test, every_seed_row_is_a_table_row_with_its_forms) {
  // Verifies each condition of the error model is in the table once, reported as the seed says
  // on MCP and with the README's REST status.
  ASSERT_EQ(std::size(kSeed), outcome_table.size());
  for (const seed_row& s : kSeed) {
    const outcome_row* r = find(s.condition);
    ASSERT_NE(r, nullptr) << s.condition;
    EXPECT_EQ(r->mcp, s.form) << s.condition;
    EXPECT_EQ(r->mcp_code, s.mcp_code) << s.condition;
    EXPECT_EQ(r->code.has_value(), !s.tool_error_name.empty()) << s.condition;
    if (r->code) {
      EXPECT_EQ(name_of(*r->code), s.tool_error_name) << s.condition;
    }
    EXPECT_EQ(r->rest_status, s.rest_status) << s.condition;
    EXPECT_EQ(r->retry != retry_after::none, s.retry_after) << s.condition;
  }
}

TEST(outcome_table_test, every_tool_error_code_has_exactly_one_row) {
  // Verifies row_of(code) is defined for every code, so a new code cannot go unanswered.
  std::multiset<size_t> seen;
  for (const outcome_row& r : outcome_table) {
    if (r.code) {
      seen.insert(static_cast<size_t>(*r.code));
    }
  }
  for (size_t c = 0; c < num_tool_error_codes; ++c) {
    EXPECT_EQ(seen.count(c), 1u) << name_of(static_cast<tool_error_code>(c));
    EXPECT_EQ(row_of(static_cast<tool_error_code>(c)).code, static_cast<tool_error_code>(c));
  }
}

TEST(outcome_table_test, every_admission_refusal_has_exactly_one_row) {
  // Verifies each verdict by which the quota core refuses a call names one row with a tool error
  // (the surfaces look it up instead of mapping it), and that ok and lease_pending, which are
  // never an answer, name none.
  using quota::admit_verdict;
  for (admit_verdict v : {admit_verdict::ok, admit_verdict::suspended,
                          admit_verdict::quota_exceeded, admit_verdict::unavailable,
                          admit_verdict::quota_unreachable, admit_verdict::lease_pending}) {
    size_t rows = 0;
    for (const outcome_row& r : outcome_table) {
      rows += r.verdict == v ? 1 : 0;
    }
    const bool refusal = v != admit_verdict::ok && v != admit_verdict::lease_pending;
    EXPECT_EQ(rows, refusal ? 1u : 0u) << static_cast<int>(v);
    if (refusal) {
      EXPECT_TRUE(row_of(v).code.has_value()) << static_cast<int>(v);
      EXPECT_EQ(row_of(v).verdict, v);
    }
  }
  EXPECT_EQ(row_of(admit_verdict::unavailable).code, tool_error_code::usage_unavailable);
  EXPECT_EQ(row_named("keys not loaded yet").mcp_code, 503);
  EXPECT_EQ(row_of(admit_verdict::quota_unreachable).code, tool_error_code::quota_unreachable);
}

TEST(outcome_table_test, tool_errors_carry_the_figures_the_seed_lists) {
  // Verifies the seed's code table: suspended carries no figures, quota_exceeded its
  // retry_after_secs (which may be days) and the quota figures, rate_limited a retry of at
  // least a second.
  const tool_error s = make_tool_error(tool_error_code::suspended, 5, 1000, 1000, 0);
  EXPECT_EQ(s.retry_after_secs, -1);
  EXPECT_EQ(s.quota_limit, -1);
  const tool_error q = make_tool_error(tool_error_code::quota_exceeded, 394200, 1000, 1000, 0);
  EXPECT_EQ(q.retry_after_secs, 394200);
  EXPECT_EQ(q.quota_limit, 1000);
  EXPECT_EQ(q.quota_used, 1000);
  EXPECT_EQ(q.quota_remaining, 0);
  const tool_error r = make_tool_error(tool_error_code::rate_limited, 0, 1000, 1000, 0);
  EXPECT_EQ(r.retry_after_secs, 1);
  EXPECT_EQ(r.quota_limit, -1);
  EXPECT_EQ(make_tool_error(tool_error_code::unavailable, 7).retry_after_secs, 7);
  EXPECT_EQ(make_tool_error(tool_error_code::not_found, 7).retry_after_secs, -1);
}

TEST(outcome_table_test, rows_name_the_outcome_metrics_print) {
  // Verifies the metrics name of the rows the surfaces look up by outcome.
  EXPECT_EQ(row_of(tool_error_code::usage_unavailable).result, outcome::unavailable);
  EXPECT_EQ(row_of(outcome::invalid_argument).rest_status, 400);
  EXPECT_EQ(row_of(outcome::rate_limited).mcp_code, 429);
  EXPECT_EQ(row_of(outcome::invalid_key).rest_status, 401);
  EXPECT_EQ(row_named("keys not loaded yet").result, outcome::unavailable);
}

}  // namespace
}  // namespace tollgate::envelope
