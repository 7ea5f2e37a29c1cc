// The published tool schemas (tools/list, every revision) against the JSON Schema subset that
// every major model provider's function calling accepts, so a client can hand them to any model
// unchanged. The subset, the intersection of what OpenAI and Anthropic accept (JSON Schema)
// and what Gemini's function declarations accept (an OpenAPI 3.0 Schema subset, which refuses
// type arrays, additionalProperties, $schema, $ref and default):
//   - the input schema: {"type":"object","properties":{...},"required":[names of properties]};
//   - a property: "type" is ONE of string, integer, number, boolean, array, object (never an
//     array of types, never oneOf/anyOf/allOf/not/$ref/const/default/format/pattern/title);
//     "description" a string; "enum" only on a string, all strings; minLength/maxLength only on
//     a string, minimum/maximum only on a number or integer, minItems/maxItems and "items" (a
//     property schema itself) only on an array, which must have "items"; an object property
//     only with "properties" (and "required") as the input schema has.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <set>
#include <string>

#include "app/tools.h"
#include "tollgate/mcp/tool.h"

namespace tollgate::app {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

void check_property(element e, const std::string& where);

void check_object(object o, const std::string& where, bool top) {
  const std::set<std::string> allowed =
      top ? std::set<std::string>{"type", "properties", "required"}
          : std::set<std::string>{"type", "description", "properties", "required"};
  std::set<std::string> names;
  for (auto [k, v] : o) {
    EXPECT_TRUE(allowed.count(std::string(k))) << where << ": keyword " << k;
  }
  std::string_view type;
  EXPECT_EQ(o["type"].get(type), simdjson::SUCCESS) << where;
  EXPECT_EQ(type, "object") << where;
  object props;
  ASSERT_EQ(o["properties"].get(props), simdjson::SUCCESS) << where << ": properties";
  for (auto [k, v] : props) {
    names.insert(std::string(k));
    check_property(v, where + "." + std::string(k));
  }
  simdjson::dom::array req;
  if (o["required"].get(req) == simdjson::SUCCESS) {
    for (element r : req) {
      std::string_view n;
      ASSERT_EQ(r.get(n), simdjson::SUCCESS) << where << ": required holds strings";
      EXPECT_TRUE(names.count(std::string(n))) << where << ": required " << n << " is a property";
    }
  }
}

void check_property(element e, const std::string& where) {
  object o;
  ASSERT_EQ(e.get(o), simdjson::SUCCESS) << where << ": a schema object";
  std::string_view type;
  ASSERT_EQ(o["type"].get(type), simdjson::SUCCESS)
      << where << ": \"type\" must be one string (not an array, not absent)";
  static const std::set<std::string_view> types = {"string",  "integer", "number",
                                                   "boolean", "array",   "object"};
  ASSERT_TRUE(types.count(type)) << where << ": type " << type;
  if (type == "object") {
    check_object(o, where, false);
    return;
  }
  std::set<std::string> allowed = {"type", "description"};
  if (type == "string") {
    allowed.insert({"enum", "minLength", "maxLength"});
  } else if (type == "integer" || type == "number") {
    allowed.insert({"minimum", "maximum"});
  } else if (type == "array") {
    allowed.insert({"items", "minItems", "maxItems"});
    element items;
    ASSERT_EQ(o["items"].get(items), simdjson::SUCCESS) << where << ": an array needs items";
    check_property(items, where + "[]");
  }
  for (auto [k, v] : o) {
    EXPECT_TRUE(allowed.count(std::string(k)))
        << where << ": keyword " << k << " (not in the subset for type " << type << ")";
    if (k == "description") {
      EXPECT_TRUE(v.is_string()) << where;
    }
    if (k == "enum") {
      simdjson::dom::array a;
      ASSERT_EQ(v.get(a), simdjson::SUCCESS) << where;
      for (element x : a) {
        EXPECT_TRUE(x.is_string()) << where << ": enum values are strings";
      }
    }
  }
}

TEST(schema_subset_test, published_tool_schemas_stay_inside_the_provider_subset) {
  // Verifies every tool's inputSchema in tools/list (legacy and 2026-07-28 lists) uses only the
  // subset above: one type per property (since/until are integers), no additionalProperties,
  // no default, no unions.
  mcp::registry reg;
  register_tools(reg);
  simdjson::dom::parser p;
  for (auto rev : {envelope::revision::v2025_06_18, envelope::revision::v2026_07_28}) {
    element root;
    ASSERT_EQ(p.parse(std::string(reg.list_result(rev))).get(root), simdjson::SUCCESS);
    simdjson::dom::array tools;
    ASSERT_EQ(root["tools"].get(tools), simdjson::SUCCESS);
    size_t n = 0;
    for (element t : tools) {
      std::string_view name;
      ASSERT_EQ(t["name"].get(name), simdjson::SUCCESS);
      object schema;
      ASSERT_EQ(t["inputSchema"].get(schema), simdjson::SUCCESS) << name;
      check_object(schema, std::string(name), true);
      ++n;
    }
    EXPECT_EQ(n, 3u);
  }
}

TEST(schema_subset_test, the_checker_refuses_what_providers_refuse) {
  // Verifies the subset check itself fails on a type array, additionalProperties, a default
  // and anyOf (so the test above can fail).
  simdjson::dom::parser p;
  for (const char* bad : {
           R"({"type":"object","properties":{"t":{"type":["integer","string"]}}})",
           R"({"type":"object","properties":{},"additionalProperties":false})",
           R"({"type":"object","properties":{"n":{"type":"integer","default":1}}})",
           R"({"type":"object","properties":{"x":{"anyOf":[{"type":"string"}]}}})",
       }) {
    object root;
    ASSERT_EQ(p.parse(std::string(bad)).get(root), simdjson::SUCCESS);
    ::testing::TestPartResultArray failures;
    {
      ::testing::ScopedFakeTestPartResultReporter rep(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      check_object(root, "bad", true);
    }
    EXPECT_GT(failures.size(), 0) << bad;
  }
}

}  // namespace
}  // namespace tollgate::app
