// tools/call arguments: checked against the tool's argument specs (types, bounds, choices,
// required, defaults) into the endpoint's fixed-capacity `arguments`, or refused with -32602
// naming the argument and the rule it broke.
#include "mcp/endpoint_impl.h"
#include "tollgate/common/ascii.h"

namespace tollgate::mcp {

namespace od = simdjson::ondemand;
using envelope::revision;
using envelope::rpc_error;
using envelope::rpc_error_kind;

namespace {

using ascii::trim;

bool is_integer_token(std::string_view s) {
  return s.find_first_of(".eE") == std::string_view::npos;
}

// Unicode code points in UTF-8 `s` (simdjson has validated it).
size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }
  return n;
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
    od::object o;
    if (args_value->get_object().get(o)) {
      return bad("arguments", "must be an object");
    }
    for (auto fr : o) {
      od::field f;
      std::string_view key;
      if (std::move(fr).get(f) || f.unescaped_key().get(key)) {
        return bad("arguments", "must be an object");
      }
      size_t idx = t.args.size();
      for (size_t i = 0; i < t.args.size(); ++i) {
        if (t.args[i].name == key) {
          idx = i;
          break;
        }
      }
      if (idx == t.args.size()) {
        return bad(key, rules.unknown);
      }
      const arg_spec& spec = t.args[idx];
      arg_value& out = a.values[idx];
      if (out.present) {
        // Given twice: refused rather than resolved (a reader taking the other one would run
        // a different call).
        return bad(spec.name, "must not appear more than once in arguments");
      }
      od::value v = f.value();
      od::json_type jt;
      if (v.type().get(jt)) {
        return bad(spec.name, rules.type[idx]);
      }
      switch (spec.type) {
        case arg_type::string:
        case arg_type::enumeration: {
          std::string_view s;
          if (jt != od::json_type::string || v.get_string().get(s)) {
            return bad(spec.name, rules.type[idx]);
          }
          if (spec.type == arg_type::enumeration) {
            bool found = false;
            for (const auto& choice : spec.choices) {
              found = found || choice == s;
            }
            if (!found) {
              return bad(spec.name, rules.range[idx]);
            }
          } else {
            const auto n = static_cast<int64_t>(code_points(s));
            if ((spec.has_min && n < spec.min) || (spec.has_max && n > spec.max)) {
              return bad(spec.name, rules.range[idx]);
            }
          }
          out.str = s;
          break;
        }
        case arg_type::timestamp: {
          if (jt == od::json_type::string) {
            std::string_view ts;
            if (v.get_string().get(ts) || ts.empty() || ts.size() > 64) {
              return bad(spec.name, rules.type[idx]);
            }
            out.str = ts;
            break;
          }
          int64_t n = 0;
          if (jt != od::json_type::number || !is_integer_token(trim(v.raw_json_token())) ||
              v.get_int64().get(n)) {
            return bad(spec.name, rules.type[idx]);
          }
          out.num = n;
          out.is_number = true;
          break;
        }
        case arg_type::integer: {
          if (jt != od::json_type::number) {
            return bad(spec.name, rules.type[idx]);
          }
          int64_t n = 0;
          const bool integral = is_integer_token(trim(v.raw_json_token()));
          auto e = v.get_int64().get(n);
          if (e && integral) {
            return bad(spec.name, rules.range[idx].empty() ? rules.type[idx] : rules.range[idx]);
          }
          if (e) {
            return bad(spec.name, rules.type[idx]);
          }
          if ((spec.has_min && n < spec.min) || (spec.has_max && n > spec.max)) {
            return bad(spec.name, rules.range[idx]);
          }
          out.num = n;
          break;
        }
        case arg_type::string_array: {
          od::array arr;
          if (jt != od::json_type::array || v.get_array().get(arr)) {
            return bad(spec.name, rules.type[idx]);
          }
          size_t n = 0;
          const int64_t cap = spec.has_max ? spec.max : static_cast<int64_t>(max_array_items);
          for (auto er : arr) {
            od::value ev;
            std::string_view s;
            od::json_type et;
            if (er.get(ev) || ev.type().get(et) || et != od::json_type::string ||
                ev.get_string().get(s)) {
              return bad(spec.name, rules.type[idx]);
            }
            if (static_cast<int64_t>(n) >= cap) {
              return bad(spec.name, rules.range[idx]);
            }
            out.items[n++] = s;
          }
          if (spec.has_min && static_cast<int64_t>(n) < spec.min) {
            return bad(spec.name, rules.range[idx]);
          }
          out.num_items = static_cast<uint8_t>(n);
          break;
        }
      }
      out.present = true;
      out.has_value = true;
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
