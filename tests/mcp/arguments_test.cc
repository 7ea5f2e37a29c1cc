// tools/call arguments (arguments.cc): checked against the tool's schema, refused with -32602
// naming the argument and the rule, strings measured in characters, escapes read as their text.
#include <gtest/gtest.h>

#include <string>

#include "mcp/endpoint_fixture.h"
#include "mcp/mcp_fixture.h"
#include "tollgate/envelope/reference.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;
using envelope::revision;

struct schema_case {
  std::string args;
  const char* argument;
  const char* rule_fragment;
};

TEST_F(endpoint_test, schema_violations_are_32602_naming_argument_and_rule) {
  // Verifies missing, wrong type, out of range, unknown, bad enum and bad array arguments each
  // give -32602 with data.argument and data.rule, and the tool never runs.
  const schema_case cases[] = {
      {"{}", "query", "is required"},
      {R"({"limit":5})", "query", "is required"},
      {R"({"query":5})", "query", "must be a string"},
      {R"({"query":""})", "query", "between 1 and 500"},
      {std::string(R"({"query":")") + std::string(501, 'q') + "\"}", "query", "between 1 and 500"},
      {R"({"query":"x","limit":"5"})", "limit", "must be an integer"},
      {R"({"query":"x","limit":2.5})", "limit", "must be an integer"},
      {R"({"query":"x","limit":51})", "limit", "between 1 and 50"},
      {R"({"query":"x","limit":0})", "limit", "between 1 and 50"},
      {R"({"query":"x","limit":99999999999999999999})", "limit", "between 1 and 50"},
      {R"({"query":"x","sort":"random"})", "sort", "one of"},
      {R"({"query":"x","tags":"a"})", "tags", "array of strings"},
      {R"({"query":"x","tags":["a",1]})", "tags", "array of strings"},
      {R"({"query":"x","tags":["1","2","3","4","5","6","7","8","9"]})", "tags", "at most 8"},
      {R"({"query":"x","colour":"red"})", "colour", "not an argument"},
      {R"([1])", "arguments", "must be an object"},
  };
  for (const auto& sc : cases) {
    const std::string& args = sc.args;
    auto r = post(call(args));
    ASSERT_EQ(r.status, 200) << args;
    json_doc d(r.body);
    ASSERT_TRUE(d.ok) << r.body;
    EXPECT_EQ(d.num("/error/code"), -32602) << args;
    EXPECT_EQ(d.str("/error/data/argument"), sc.argument) << args;
    EXPECT_NE(d.str("/error/data/rule").find(sc.rule_fragment), std::string::npos)
        << args << " → " << d.str("/error/data/rule");
  }
  EXPECT_EQ(search->calls, 0);
  EXPECT_EQ(h.admits, 0);
}

TEST_F(endpoint_test, integral_numbers_are_integers) {
  // Verifies an integer argument takes any JSON number whose value is integral, as JSON Schema's
  // "integer" does (3.0, 3e0, 30e-1 are 3; clients and models send them), while 2.5 is still
  // refused as not an integer and an integral 1e20 as out of range.
  for (const char* limit : {"3.0", "3e0", "30e-1", "3.000", "0.3e1"}) {
    auto r = post(call(std::string(R"({"query":"x","limit":)") + limit + "}"));
    ASSERT_EQ(r.status, 200) << limit;
    json_doc d(r.body);
    ASSERT_TRUE(d.ok) << r.body;
    EXPECT_EQ(d.raw("/result/isError"), "false") << limit << " → " << r.body;
    EXPECT_NE(d.str("/result/content/0/text").find(R"("limit":3,)"), std::string::npos)
        << limit << " → " << r.body;
  }
  const schema_case refused[] = {
      {R"({"query":"x","limit":2.5})", "limit", "must be an integer"},
      {R"({"query":"x","limit":3.0000001})", "limit", "must be an integer"},
      {R"({"query":"x","limit":1e20})", "limit", "between 1 and 50"},
      {R"({"query":"x","limit":-0.0})", "limit", "between 1 and 50"},
      {R"({"query":"x","limit":1e400})", "limit", "must be an integer"},
  };
  for (const auto& sc : refused) {
    auto r = post(call(sc.args));
    json_doc d(r.body);
    ASSERT_TRUE(d.ok) << r.body;
    EXPECT_EQ(d.num("/error/code"), -32602) << sc.args;
    EXPECT_EQ(d.str("/error/data/argument"), sc.argument) << sc.args;
    EXPECT_NE(d.str("/error/data/rule").find(sc.rule_fragment), std::string::npos)
        << sc.args << " → " << d.str("/error/data/rule");
  }
}

TEST_F(endpoint_test, query_length_counts_characters_not_bytes) {
  // Verifies string length bounds count Unicode characters: 500 × "é" (1000 bytes) is valid.
  std::string q;
  for (int i = 0; i < 500; ++i) q += "\xc3\xa9";
  auto r = post(call(R"({"query":")" + q + "\"}"));
  json_doc d(r.body);
  EXPECT_EQ(d.raw("/result/isError"), "false") << r.body.substr(0, 200);
}

TEST_F(endpoint_test, escaped_keys_and_strings_are_read_as_their_text) {
  // Verifies keys and strings written with escapes mean what their unescaped text means: the
  // jsonrpc version, an argument's name and value. (Those without escapes are read in place.)
  auto plain = post(call(R"({"query":"rust","tags":["a"]})"));
  ASSERT_EQ(plain.status, 200);
  auto escaped = post(R"({"jsonrpc":"2\u002e0","id":7,"method":"tools/call","params":{"name":)"
                      R"("search_stories","arguments":{"qu\u0065ry":"r\u0075st","t\u0061gs":)"
                      R"(["\u0061"]}}})");
  EXPECT_EQ(escaped.status, 200);
  EXPECT_EQ(escaped.body, plain.body);
  EXPECT_EQ(h.admits, 2);
}

}  // namespace
}  // namespace tollgate::mcp
