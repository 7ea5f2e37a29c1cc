// The timestamp argument type: a JSON integer (unix seconds) or a string the tool parses.
#include <gtest/gtest.h>

#include <string>

#include "mcp/mcp_fixture.h"

namespace tollgate::mcp {
namespace {

using test_support::fake_host;
using test_support::http_case;
using test_support::run;

// Echoes how `since` arrived: {"n":N} for an integer, {"s":"..."} for a string, {} when absent.
class echo_time : public tool {
 public:
  tool_result call(const arguments& a, json_out& out, call_context&) override {
    if (!a[0].present) {
      out.raw("{}");
    } else if (a[0].is_number) {
      out.raw("{\"n\":");
      out.number(a[0].num);
      out.raw("}");
    } else {
      out.raw("{\"s\":");
      out.string(a[0].str);
      out.raw("}");
    }
    return tool_result::success();
  }
};

struct timestamp_test : ::testing::Test {
  registry tools = [] {
    registry r;
    tool_def d;
    d.name = "t";
    d.title = "T";
    d.description = "Echoes since.";
    arg_spec since;
    since.name = "since";
    since.type = arg_type::timestamp;
    since.description = "A time.";
    d.args = {since};
    d.billable = false;
    d.impl = std::make_shared<echo_time>();
    r.add(std::move(d));
    r.finish();
    return r;
  }();
  envelope::cache env{envelope::server_identity{}};
  endpoint ep{tools, env};
  fake_host h;
  out_buffer out;

  std::string call(const std::string& args) {
    http_case c;
    c.body = R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":)" +
             args + "}}";
    return run(ep, h, c, out).body;
  }
};

TEST_F(timestamp_test, schema_declares_one_type) {
  // Verifies the rendered inputSchema declares a single type, an integer (unix seconds: what a
  // schema-validating client lets through; providers refuse type arrays); strings are still
  // accepted (next test).
  EXPECT_NE(std::string(tools.input_schema(0)).find(R"("since":{"type":"integer",)"),
            std::string::npos)
      << tools.input_schema(0);
  EXPECT_EQ(std::string(tools.input_schema(0)).find("["), std::string::npos)
      << tools.input_schema(0);
}

TEST_F(timestamp_test, integer_and_string_forms_reach_the_tool) {
  // Verifies an integer arrives as a number and a string as text.
  EXPECT_NE(call(R"({"since":1700000000})").find(R"({\"n\":1700000000})"), std::string::npos);
  EXPECT_NE(call(R"({"since":1700000000.0})").find(R"({\"n\":1700000000})"), std::string::npos);
  std::string str = call(R"({"since":"2024-05-01"})");
  EXPECT_NE(str.find(R"({\"s\":\"2024-05-01\"})"), std::string::npos) << str;
  EXPECT_NE(call(R"({})").find(R"("text":"{}")"), std::string::npos);
}

TEST_F(timestamp_test, other_types_are_invalid_params_naming_the_argument) {
  // Verifies fractions, booleans, empty strings and objects get -32602 naming `since`.
  for (const char* bad :
       {R"({"since":1.5})", R"({"since":true})", R"({"since":""})", R"({"since":{}})"}) {
    std::string body = call(bad);
    EXPECT_NE(body.find("-32602"), std::string::npos) << bad << " -> " << body;
    EXPECT_NE(body.find(R"("argument":"since")"), std::string::npos) << body;
  }
}

}  // namespace
}  // namespace tollgate::mcp
