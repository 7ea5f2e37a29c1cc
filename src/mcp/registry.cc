// Tool registry: inputSchema and tools/list rendered once at start-up.
#include <fmt/format.h>

#include "tollgate/common/assert.h"
#include "tollgate/common/json_out.h"
#include "tollgate/mcp/tool.h"

namespace tollgate::mcp {
namespace {

std::string quoted(std::string_view s) {
  out_buffer b;
  json_out(b, false).string(s);
  return std::string(b.view());
}

// Schemas use only what every major model provider's function calling accepts (the subset
// tests/app/schema_subset_test.cc checks): one "type" per property (never an array of types,
// never oneOf/anyOf), and no "additionalProperties" or "default" (Gemini's schema refuses
// them): unknown arguments are still refused by the server, and a default is said in the
// description.
std::string arg_schema(const arg_spec& a) {
  std::string s = "{";
  switch (a.type) {
    case arg_type::string:
    case arg_type::enumeration:
      s += R"("type":"string")";
      break;
    case arg_type::integer:
      s += R"("type":"integer")";
      break;
    case arg_type::string_array:
      s += R"("type":"array","items":{"type":"string"})";
      break;
    // Declared as unix seconds, an integer, which is what its description says and what a
    // client that validates against the schema (LangChain) lets a model send; the server is
    // lenient beyond it and also takes an RFC 3339 date-time or a date as a string.
    case arg_type::timestamp:
      s += R"("type":"integer")";
      break;
  }
  std::string description = a.description;
  if (a.has_default) {
    description +=
        (description.empty() ? "" : " ") + std::string("Default: ") +
        (a.type == arg_type::integer ? std::to_string(a.default_int) : a.default_string) + ".";
  }
  if (!description.empty()) {
    s += R"(,"description":)" + quoted(description);
  }
  if (a.type == arg_type::enumeration) {
    s += R"(,"enum":[)";
    for (size_t i = 0; i < a.choices.size(); ++i) {
      s += (i ? "," : "") + quoted(a.choices[i]);
    }
    s += "]";
  }
  const bool numeric = a.type == arg_type::integer || a.type == arg_type::timestamp;
  const char* min_key = a.type == arg_type::string         ? "minLength"
                        : numeric                          ? "minimum"
                        : a.type == arg_type::string_array ? "minItems"
                                                           : nullptr;
  const char* max_key = a.type == arg_type::string         ? "maxLength"
                        : numeric                          ? "maximum"
                        : a.type == arg_type::string_array ? "maxItems"
                                                           : nullptr;
  if (min_key != nullptr && a.has_min) {
    s += fmt::format(R"(,"{}":{})", min_key, a.min);
  }
  if (max_key != nullptr && a.has_max) {
    s += fmt::format(R"(,"{}":{})", max_key, a.max);
  }
  return s + "}";
}

std::string input_schema(const tool_def& t) {
  std::string s = R"({"type":"object","properties":{)";
  std::string required;
  for (size_t i = 0; i < t.args.size(); ++i) {
    s += (i ? "," : "") + quoted(t.args[i].name) + ":" + arg_schema(t.args[i]);
    if (t.args[i].required) {
      required += (required.empty() ? "" : ",") + quoted(t.args[i].name);
    }
  }
  s += "}";
  if (!required.empty()) {
    s += R"(,"required":[)" + required + "]";
  }
  return s + "}";
}

registry::rules make_rules(const tool_def& t) {
  registry::rules r;
  r.unknown = "is not an argument of this tool";
  if (t.args.empty()) {
    r.unknown += " (it takes no arguments)";
  } else {
    r.unknown += " (arguments: ";
    for (size_t i = 0; i < t.args.size(); ++i) {
      r.unknown += (i ? ", " : "") + t.args[i].name;
    }
    r.unknown += ")";
  }
  for (const auto& a : t.args) {
    std::string type;
    std::string range;
    auto bounds = [&](const char* unit) {
      if (a.has_min && a.has_max) {
        range = fmt::format("must be between {} and {}{}", a.min, a.max, unit);
      } else if (a.has_min) {
        range = fmt::format("must be at least {}{}", a.min, unit);
      } else if (a.has_max) {
        range = fmt::format("must be at most {}{}", a.max, unit);
      }
    };
    switch (a.type) {
      case arg_type::string:
        type = "must be a string";
        bounds(" characters long");
        if (!range.empty()) {
          range = "length " + range;
        }
        break;
      case arg_type::integer:
        type = "must be an integer";
        bounds("");
        break;
      case arg_type::string_array:
        type = "must be an array of strings";
        bounds(" items");
        if (!range.empty()) {
          range = "item count " + range;
        } else {
          range = fmt::format("item count must be at most {} items", max_array_items);
        }
        break;
      case arg_type::timestamp:
        type = "must be unix seconds (an integer) or a date-time string";
        range = type;
        break;
      case arg_type::enumeration:
        type = "must be one of ";
        for (size_t i = 0; i < a.choices.size(); ++i) {
          type += (i ? ", " : "") + quoted(a.choices[i]);
        }
        range = type;
        break;
    }
    r.type.push_back(std::move(type));
    r.range.push_back(std::move(range));
  }
  return r;
}

}  // namespace

void registry::add(tool_def def) {
  TOLLGATE_CHECK(!finished_);
  TOLLGATE_CHECK(find(def.name) == nullptr);
  TOLLGATE_CHECK(def.args.size() <= max_args);
  TOLLGATE_CHECK(def.impl != nullptr);
  for (const auto& a : def.args) {
    TOLLGATE_CHECK(a.type != arg_type::string_array || !a.has_max ||
                   a.max <= static_cast<int64_t>(max_array_items));
    TOLLGATE_CHECK(a.type != arg_type::enumeration || !a.choices.empty());
  }
  tools_.push_back(std::move(def));
}

void registry::finish() {
  TOLLGATE_CHECK(!finished_);
  finished_ = true;
  std::string list;
  for (size_t i = 0; i < tools_.size(); ++i) {
    const tool_def& t = tools_[i];
    schemas_.push_back(mcp::input_schema(t));
    rules_.push_back(make_rules(t));
    list += (i ? "," : "") + std::string(R"({"name":)") + quoted(t.name);
    if (!t.title.empty()) {
      list += R"(,"title":)" + quoted(t.title);
    }
    list +=
        R"(,"description":)" + quoted(t.description) + R"(,"inputSchema":)" + schemas_.back() + "}";
  }
  list_legacy_ = R"({"tools":[)" + list + "]}";
  list_modern_ =
      R"({"resultType":"complete","tools":[)" + list + R"(],"ttlMs":300000,"cacheScope":"public"})";
}

const tool_def* registry::find(std::string_view name) const noexcept {
  for (const auto& t : tools_) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

}  // namespace tollgate::mcp
