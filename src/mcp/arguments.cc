// tools/call arguments: checked against the tool's argument specs (types, bounds, choices,
// required, defaults) into the endpoint's fixed-capacity `arguments`, or refused with -32602
// naming the argument and the rule it broke.
#include <cmath>

#include "mcp/endpoint_impl.h"

namespace tollgate::mcp {

namespace {

bool is_integer_token(std::string_view s) {
  return s.find_first_of(".eE") == std::string_view::npos;
}

// A JSON number as an integer, the way JSON Schema's "integer" reads it: any number whose value
// is integral (3, 3.0, 3e0, 30e-1), so a client or model that writes 3.0 is not refused.
// `range` on return: integral but outside int64 (a range breach, not a type breach).
bool integral_value(od::value& v, int64_t& n, bool& range) {
  range = false;
  if (is_integer_token(trim(v.raw_json_token()))) {
    if (v.get_int64().get(n)) {
      range = true;  // integer digits beyond int64
      return false;
    }
    return true;
  }
  double d = 0;
  if (v.get_double().get(d) || !std::isfinite(d) || d != std::trunc(d)) {
    return false;
  }
  // 2^63 is exactly representable; every double below it in magnitude converts exactly.
  if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
    range = true;
    return false;
  }
  n = static_cast<int64_t>(d);
  return true;
}

// Unicode code points in UTF-8 `s` (simdjson has validated it).
size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }
  return n;
}

// Each check below takes one argument's value (its JSON type `jt`) and fills `out`; false with
// `rule` set to the rule it broke.

bool check_string(const arg_spec& spec, const registry::rules& rules, size_t idx, od::value& v,
                  od::json_type jt, arg_value& out, std::string_view& rule) {
  std::string_view s;
  if (jt != od::json_type::string || v.get_string().get(s)) {
    rule = rules.type[idx];
    return false;
  }
  if (spec.type == arg_type::enumeration) {
    bool found = false;
    for (const auto& choice : spec.choices) {
      found = found || choice == s;
    }
    if (!found) {
      rule = rules.range[idx];
      return false;
    }
  } else {
    const auto n = static_cast<int64_t>(code_points(s));
    if ((spec.has_min && n < spec.min) || (spec.has_max && n > spec.max)) {
      rule = rules.range[idx];
      return false;
    }
  }
  out.str = s;
  return true;
}

bool check_timestamp(const registry::rules& rules, size_t idx, od::value& v, od::json_type jt,
                     arg_value& out, std::string_view& rule) {
  rule = rules.type[idx];
  if (jt == od::json_type::string) {
    std::string_view ts;
    if (v.get_string().get(ts) || ts.empty() || ts.size() > 64) {
      return false;
    }
    out.str = ts;
    return true;
  }
  int64_t n = 0;
  bool range = false;
  if (jt != od::json_type::number || !integral_value(v, n, range)) {
    return false;
  }
  out.num = n;
  out.is_number = true;
  return true;
}

bool check_integer(const arg_spec& spec, const registry::rules& rules, size_t idx, od::value& v,
                   od::json_type jt, arg_value& out, std::string_view& rule) {
  if (jt != od::json_type::number) {
    rule = rules.type[idx];
    return false;
  }
  int64_t n = 0;
  bool range = false;
  if (!integral_value(v, n, range)) {
    rule = range && !rules.range[idx].empty() ? rules.range[idx] : rules.type[idx];
    return false;
  }
  if ((spec.has_min && n < spec.min) || (spec.has_max && n > spec.max)) {
    rule = rules.range[idx];
    return false;
  }
  out.num = n;
  return true;
}

bool check_string_array(const arg_spec& spec, const registry::rules& rules, size_t idx,
                        od::value& v, od::json_type jt, arg_value& out, std::string_view& rule) {
  od::array arr;
  if (jt != od::json_type::array || v.get_array().get(arr)) {
    rule = rules.type[idx];
    return false;
  }
  size_t n = 0;
  const int64_t cap = spec.has_max ? spec.max : static_cast<int64_t>(max_array_items);
  for (auto er : arr) {
    od::value ev;
    std::string_view s;
    od::json_type et;
    if (er.get(ev) || ev.type().get(et) || et != od::json_type::string || ev.get_string().get(s)) {
      rule = rules.type[idx];
      return false;
    }
    if (static_cast<int64_t>(n) >= cap) {
      rule = rules.range[idx];
      return false;
    }
    out.items[n++] = s;
  }
  if (spec.has_min && static_cast<int64_t>(n) < spec.min) {
    rule = rules.range[idx];
    return false;
  }
  out.num_items = static_cast<uint8_t>(n);
  return true;
}

// One argument's value against its spec (argument `idx` of the tool).
bool check_value(const arg_spec& spec, const registry::rules& rules, size_t idx, od::value v,
                 arg_value& out, std::string_view& rule) {
  od::json_type jt;
  if (v.type().get(jt)) {
    rule = rules.type[idx];
    return false;
  }
  switch (spec.type) {
    case arg_type::string:
    case arg_type::enumeration:
      return check_string(spec, rules, idx, v, jt, out, rule);
    case arg_type::timestamp:
      return check_timestamp(rules, idx, v, jt, out, rule);
    case arg_type::integer:
      return check_integer(spec, rules, idx, v, jt, out, rule);
    case arg_type::string_array:
      return check_string_array(spec, rules, idx, v, jt, out, rule);
  }
  return true;
}

// The members of the arguments object, each checked against the argument of its name. False
// with `arg` and `rule` set when one is unknown, given twice or breaks its rule.
bool check_members(const tool_def& t, const registry::rules& rules, od::value& args_value,
                   arguments& a, std::string_view& arg, std::string_view& rule) {
  od::object o;
  if (args_value.get_object().get(o)) {
    arg = "arguments";
    rule = "must be an object";
    return false;
  }
  for (auto fr : o) {
    od::field f;
    std::string_view key;
    if (std::move(fr).get(f) || f.unescaped_key().get(key)) {
      arg = "arguments";
      rule = "must be an object";
      return false;
    }
    size_t idx = t.args.size();
    for (size_t i = 0; i < t.args.size(); ++i) {
      if (t.args[i].name == key) {
        idx = i;
        break;
      }
    }
    if (idx == t.args.size()) {
      arg = key;
      rule = rules.unknown;
      return false;
    }
    const arg_spec& spec = t.args[idx];
    arg_value& out = a.values[idx];
    arg = spec.name;
    if (out.present) {
      // Given twice: refused rather than resolved (a reader taking the other one would run
      // a different call).
      rule = "must not appear more than once in arguments";
      return false;
    }
    if (!check_value(spec, rules, idx, f.value(), out, rule)) {
      return false;
    }
    out.present = true;
    out.has_value = true;
  }
  return true;
}

}  // namespace

// Validates tools/call arguments into im.args. Returns false with `r` set to the -32602 reply.
bool validate_arguments(const dispatch_ctx& c, const tool_def& t, od::value* args_value,
                        std::string_view id, reply& r) {
  const registry::rules& rules = c.tools.rules_of(c.tools.index_of(&t));
  arguments& a = c.im.args;
  for (size_t i = 0; i < t.args.size(); ++i) {
    a.values[i].present = false;
    a.values[i].has_value = false;
    a.values[i].num_items = 0;
    a.values[i].is_number = false;
  }
  auto bad = [&](std::string_view arg, std::string_view rule) {
    r = error_reply(id, rpc_error{rpc_error_kind::invalid_params, arg, rule, 0}, 200);
    return false;
  };
  if (args_value != nullptr) {
    std::string_view arg;
    std::string_view rule;
    if (!check_members(t, rules, *args_value, a, arg, rule)) {
      return bad(arg, rule);
    }
  }
  for (size_t i = 0; i < t.args.size(); ++i) {
    arg_value& v = a.values[i];
    if (v.present) {
      continue;
    }
    const arg_spec& spec = t.args[i];
    if (spec.required) {
      return bad(spec.name, "is required");
    }
    if (spec.has_default) {
      v.has_value = true;
      v.num = spec.default_int;
      v.str = spec.default_string;
    }
  }
  return true;
}

}  // namespace tollgate::mcp
