// JSON-RPC 2.0 + MCP dispatch (see endpoint.h).
//
// Each body is parsed in place with simdjson On Demand in two passes over one iteration:
//   1. walk the whole document once: this validates every byte (malformed JSON anywhere is
//      -32700, even in parts the method never looks at) and records each message's id and method
//      as raw views into the body;
//   2. rewind and look only at what the method needs (params._meta, name, arguments).
// Replies are decided before anything is written, so the HTTP status and the host's header
// lines (which follow admit()) precede the body, and the payload is written straight into the
// response buffer.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "mcp/endpoint_impl.h"
#include "tollgate/common/ascii.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/json_out.h"
#include "tollgate/envelope/outcome_table.h"

namespace tollgate::mcp {

namespace od = simdjson::ondemand;
using envelope::revision;
using envelope::rpc_error;
using envelope::rpc_error_kind;

namespace {

constexpr std::string_view k_meta_version_key = "io.modelcontextprotocol/protocolVersion";

using ascii::trim;

method_id lookup_method(std::string_view m) {
  if (m == "tools/call") return method_id::tools_call;
  if (m == "tools/list") return method_id::tools_list;
  if (m == "ping") return method_id::ping;
  if (m == "initialize") return method_id::initialize;
  if (m == "notifications/initialized") return method_id::initialized;
  if (m == "notifications/cancelled") return method_id::cancelled;
  if (m == "server/discover") return method_id::discover;
  return method_id::unknown;
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool json_number_ok(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      ++i;
    }
    return i - from;
  };
  if (i < s.size() && s[i] == '-') {
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (digits() == 0) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) {
      return false;
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      ++i;
    }
    if (digits() == 0) {
      return false;
    }
  }
  return i == s.size();
}

bool is_integer_token(std::string_view s) {
  return s.find_first_of(".eE") == std::string_view::npos;
}

// The value of the first member of `o` whose unescaped name is `name`, searching from the
// start of `o`.
simdjson::error_code member_unescaped(od::object& o, std::string_view name, od::value& out) {
  bool empty = false;
  if (auto err = o.reset().get(empty)) {
    return err;
  }
  for (auto fr : o) {
    od::field f;
    std::string_view key;
    if (auto err = std::move(fr).get(f)) {
      return err;
    }
    if (auto err = f.unescaped_key().get(key)) {
      return err;
    }
    if (key == name) {
      out = f.value();
      return simdjson::SUCCESS;
    }
  }
  return simdjson::NO_SUCH_FIELD;
}

// The value of the first member of `o` named `name` (which holds no quote or backslash), by the
// member's unescaped name: JSON's "n\u0061me" is the member "name". simdjson's
// find_field_unordered compares raw bytes, which is exact when the body holds no backslash at
// all (parse_body notes whether it does: nearly every body has none); otherwise each key is
// compared unescaped. Call only on objects scan_message has walked, so the text is valid JSON.
// Inlined so that the raw compare sees the literal name's length (else a call to memcmp for
// every key it passes).
[[gnu::always_inline]] inline simdjson::error_code member(od::object& o, std::string_view name,
                                                          bool body_has_escape, od::value& out) {
  if (!body_has_escape) {
    return o.find_field_unordered(name).get(out);
  }
  return member_unescaped(o, name, out);
}

// The deepest nesting of arrays and objects a message may have: walk() recurses once per
// level, so an unbounded depth would overflow a core's stack (a 400 KB body of '[' is 200,000
// levels). A deeper message is refused as a parse error, as RFC 8259 §9 allows; MCP messages
// nest a handful of levels.
constexpr int max_json_depth = 128;

// Consumes `v` whole, validating it. Any error means the body is not valid JSON (or too deep).
// `depth`: the arrays and objects `v` is inside of.
simdjson::error_code walk(od::value v, int depth) {
  od::json_type t;
  auto err = v.type().get(t);
  if (err) {
    return err;
  }
  if ((t == od::json_type::object || t == od::json_type::array) && depth >= max_json_depth) {
    return simdjson::DEPTH_ERROR;
  }
  switch (t) {
    case od::json_type::object: {
      od::object o;
      if ((err = v.get_object().get(o))) {
        return err;
      }
      for (auto fr : o) {
        od::field f;
        if ((err = std::move(fr).get(f))) {
          return err;
        }
        std::string_view key;
        if ((err = f.unescaped_key().get(key))) {
          return err;
        }
        if ((err = walk(f.value(), depth + 1))) {
          return err;
        }
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::array: {
      od::array a;
      if ((err = v.get_array().get(a))) {
        return err;
      }
      for (auto er : a) {
        od::value e;
        if ((err = er.get(e))) {
          return err;
        }
        if ((err = walk(e, depth + 1))) {
          return err;
        }
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::number:
      // Checked against the JSON grammar rather than converted: integers beyond 64 bits are
      // valid JSON (a tool argument may still reject them as out of range).
      return json_number_ok(trim(v.raw_json_token())) ? simdjson::SUCCESS : simdjson::NUMBER_ERROR;
    case od::json_type::string: {
      std::string_view s;
      return v.get_string().get(s);
    }
    case od::json_type::boolean: {
      bool b;
      return v.get_bool().get(b);
    }
    case od::json_type::null: {
      bool is_null = false;
      if ((err = v.is_null().get(is_null))) {
        return err;
      }
      return is_null ? simdjson::SUCCESS : simdjson::TAPE_ERROR;
    }
  }
  return simdjson::TAPE_ERROR;
}

// A member name as written in the body, from just after its opening quote to its closing one
// (the text is valid JSON: every quote inside is escaped).
std::string_view written_name(const char* raw) {
  size_t n = 0;
  while (raw[n] != '"') {
    n += raw[n] == '\\' ? 2 : 1;
  }
  return {raw, n};
}

// The name (as written) of a member that `names` holds twice, or empty. Reorders `names`.
// Objects of a few members (every real message) are compared pairwise; larger ones are sorted,
// so a body of 100,000 members costs n log n, not n^2.
std::string_view find_duplicate(std::vector<member_name>& names) {
  const size_t n = names.size();
  if (n <= 16) {
    for (size_t i = 1; i < n; ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (names[i].key == names[j].key) {
          return written_name(names[i].raw);
        }
      }
    }
    return {};
  }
  std::sort(names.begin(), names.end(),
            [](const member_name& a, const member_name& b) { return a.key < b.key; });
  for (size_t i = 1; i < n; ++i) {
    if (names[i].key == names[i - 1].key) {
      return written_name(names[i].raw);
    }
  }
  return {};
}

// Marks `bit` in `seen`; when it was already there, `name` is a repeat (the first one found is
// kept in `dup`). The members a message's handling reads are tracked by bit (no list, no
// compares: the hot path); only other names go through find_duplicate.
inline void once(uint32_t& seen, uint32_t bit, std::string_view name, std::string_view& dup) {
  if ((seen & bit) != 0 && dup.empty()) {
    dup = name;
  }
  seen |= bit;
}

// Walks the members of a params object (validating every value) and sets m.params_duplicate
// when a name appears twice.
simdjson::error_code scan_params(od::value v, message& m, int depth,
                                 std::vector<member_name>& names) {
  od::object o;
  simdjson::error_code err;
  if ((err = v.get_object().get(o))) {
    return err;
  }
  names.clear();
  uint32_t seen = 0;
  for (auto fr : o) {
    od::field f;
    if ((err = std::move(fr).get(f))) {
      return err;
    }
    const char* raw = f.key().raw();
    std::string_view key;
    if ((err = f.unescaped_key().get(key))) {
      return err;
    }
    if (key == "name") {
      once(seen, 1, "name", m.params_duplicate);
    } else if (key == "arguments") {
      once(seen, 2, "arguments", m.params_duplicate);
    } else if (key == "_meta") {
      once(seen, 4, "_meta", m.params_duplicate);
    } else {
      names.push_back(member_name{key, raw});
    }
    if ((err = walk(f.value(), depth + 1))) {
      return err;
    }
  }
  if (m.params_duplicate.empty() && names.size() > 1) {
    m.params_duplicate = find_duplicate(names);
  }
  return simdjson::SUCCESS;
}

// Pass 1 over one message object: validates it and fills `m`. `depth`: the arrays and objects
// its members are inside of (1 for a single message, 2 in a batch). A member name given twice
// (e.g. two ids or two methods: which one counts would depend on the reader, and a proxy in
// front that reads the other would see a different request) makes the message invalid.
// `names`, `params_names`: scratch (the endpoint's, reserved: no allocation for real messages).
simdjson::error_code scan_message(od::object o, message& m, int depth,
                                  std::vector<member_name>& names,
                                  std::vector<member_name>& params_names) {
  simdjson::error_code err;
  bool jsonrpc_ok = false;
  uint32_t seen = 0;  // once() bits of the members read below
  names.clear();
  for (auto fr : o) {
    od::field f;
    if ((err = std::move(fr).get(f))) {
      return err;
    }
    const char* raw = f.key().raw();
    std::string_view key;
    if ((err = f.unescaped_key().get(key))) {
      return err;
    }
    od::value v = f.value();
    od::json_type t;
    if ((err = v.type().get(t))) {
      return err;
    }
    if (key == "jsonrpc") {
      once(seen, 1, "jsonrpc", m.duplicate);
      if (t == od::json_type::string) {
        std::string_view s;
        if ((err = v.get_string().get(s))) {
          return err;
        }
        jsonrpc_ok = s == "2.0";
        continue;
      }
      jsonrpc_ok = false;
    } else if (key == "id") {
      once(seen, 2, "id", m.duplicate);
      if (t == od::json_type::string || t == od::json_type::number) {
        m.id = trim(v.raw_json_token());
        m.has_id = true;
        if ((err = walk(v, depth))) {
          return err;
        }
        continue;
      }
      m.has_id = true;
      m.id = envelope::null_id;
      m.invalid = true;
      m.invalid_reason = "Invalid Request: id must be a string or a number.";
    } else if (key == "method") {
      once(seen, 4, "method", m.duplicate);
      if (t == od::json_type::string) {
        std::string_view raw = trim(v.raw_json_token());
        m.method = raw.substr(1, raw.size() - 2);
        m.has_method = true;
        if ((err = walk(v, depth))) {
          return err;
        }
        continue;
      }
      m.invalid = true;
      m.invalid_reason = "Invalid Request: method must be a string.";
    } else if (key == "params") {
      once(seen, 8, "params", m.duplicate);
      m.has_params = true;
      if (t == od::json_type::object) {
        if ((err = scan_params(v, m, depth, params_names))) {
          return err;
        }
        continue;
      }
      if (t != od::json_type::array) {
        m.invalid = true;
        m.invalid_reason = "Invalid Request: params must be an object.";
      }
    } else if (key == "result" || key == "error") {
      once(seen, key == "result" ? 16 : 32, key == "result" ? "result" : "error", m.duplicate);
      m.has_result_or_error = true;
    } else {
      names.push_back(member_name{key, raw});
    }
    if ((err = walk(v, depth))) {
      return err;
    }
  }
  if (m.duplicate.empty() && names.size() > 1) {
    m.duplicate = find_duplicate(names);
  }
  if (!m.duplicate.empty()) {
    m.invalid = true;
    if (m.duplicate == "id") {
      m.id = envelope::null_id;  // which one the client meant is not known
    }
  }
  if (!jsonrpc_ok && !m.invalid) {
    m.invalid = true;
    m.invalid_reason = "Invalid Request: jsonrpc must be \"2.0\".";
  }
  if (!m.invalid && !m.has_method && !(m.has_result_or_error && m.has_id)) {
    m.invalid = true;
    m.invalid_reason = "Invalid Request: the message has no method.";
  }
  if (m.has_method) {
    m.mid = lookup_method(m.method);
  }
  return simdjson::SUCCESS;
}

// Unicode code points in UTF-8 `s` (simdjson has validated it).
size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }
  return n;
}

bool origin_is_loopback(std::string_view o) {
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (o.substr(0, scheme.size()) != scheme) {
      continue;
    }
    std::string_view rest = o.substr(scheme.size());
    for (std::string_view host : {std::string_view("localhost"), std::string_view("127.0.0.1"),
                                  std::string_view("[::1]")}) {
      if (rest.substr(0, host.size()) != host) {
        continue;
      }
      std::string_view port = rest.substr(host.size());
      if (port.empty()) {
        return true;
      }
      if (port[0] != ':' || port.size() == 1 || port.size() > 6) {
        continue;
      }
      bool digits = true;
      for (char c : port.substr(1)) {
        digits = digits && c >= '0' && c <= '9';
      }
      if (digits) {
        return true;
      }
    }
  }
  return false;
}

// Accept must admit both application/json and text/event-stream (wildcards count).
// Header values come from the HTTP parser, which refuses every control byte but HTAB, so the
// media-type literals (lowercase letters, '/', '*', '-', all with bit 0x20 set) can be compared
// with ascii::iequals_lower's word-wise fold.
void accept_scan(std::string_view accept, bool& json, bool& sse) {
  using ascii::iequals_lower;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view item = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    item = trim(item.substr(0, item.find(';')));
    if (iequals_lower(item, "*/*")) {
      json = sse = true;
    } else if (iequals_lower(item, "application/json") || iequals_lower(item, "application/*")) {
      json = true;
    } else if (iequals_lower(item, "text/event-stream") || iequals_lower(item, "text/*")) {
      sse = true;
    }
  }
}

bool accept_ok(const http::request& req, std::string_view first) {
  bool json = false;
  bool sse = false;
  accept_scan(first, json, sse);
  if (json && sse) {
    return true;
  }
  // RFC 9110 §5.3: several Accept lines are one comma-separated list (rare: looked at only
  // when the first line alone does not admit both).
  for (size_t i = 0; i < req.num_headers; ++i) {
    if (ascii::iequals_lower(req.headers[i].name, "accept")) {
      accept_scan(req.headers[i].value, json, sse);
    }
  }
  return json && sse;
}

bool content_type_ok(std::string_view ct) {
  return ascii::iequals_lower(trim(ct.substr(0, ct.find(';'))), "application/json");
}

}  // namespace

endpoint::endpoint(const registry& tools, const envelope::cache& env, endpoint_options opts)
    : tools_(tools), env_(env), opts_(std::move(opts)),
      impl_(std::make_unique<impl>(opts_.max_body_bytes)) {
  // Size everything for the largest body and batch now: the steady state allocates nothing.
  TOLLGATE_CHECK(impl_->parser.allocate(opts_.max_body_bytes) == simdjson::SUCCESS);
  impl_->batch.reserve(opts_.max_batch);
  impl_->names.reserve(64);
  impl_->params_names.reserve(64);
  impl_->batch_limit_message =
      fmt::format("Invalid Request: a batch may hold at most {} messages.", opts_.max_batch);
  impl_->scratch.reserve(16 * 1024);
}

endpoint::~endpoint() = default;

// ---------------------------------------------------------------------------------------------
// Deciding replies.

namespace {

struct dispatch_ctx {
  const registry& tools;
  const envelope::cache& env;
  endpoint::impl& im;
  revision rev;           // the transport's revision (header, or stdio's negotiated one)
  const http_facts& http;
  bool sessions_on;
};

reply error_reply(std::string_view id, rpc_error e, int status) {
  reply r;
  r.k = reply::kind::error;
  r.id = id;
  r.err = e;
  r.status = status;
  return r;
}

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

// Pass 2 for one request (m.has_id, m.has_method, valid): decides its reply. `o` is the message
// object, positioned at its start.
void decide(const dispatch_ctx& c, const message& m, od::object* o, reply& r) {
  const std::string_view id = m.id;
  bool modern = envelope::is_modern(c.rev);
  r = reply{};
  r.id = id;
  r.rev = c.rev;

  // Header/body agreement (2026-07-28 over HTTP): Mcp-Method must match the body's method.
  if (modern && c.http.is_http) {
    if (!c.http.has_mcp_method) {
      r = error_reply(id, rpc_error{rpc_error_kind::header_mismatch,
                                       "Header mismatch: the Mcp-Method header is required.", {}, 0},
                         400);
      return;
    }
    if (c.http.mcp_method != m.method) {
      r = error_reply(
          id,
          rpc_error{rpc_error_kind::header_mismatch,
                    "Header mismatch: the Mcp-Method header does not match the method in the body.",
                    {}, 0},
          400);
      return;
    }
  }

  // A params member given twice (name, arguments, _meta...): refused, naming it.
  if (!m.params_duplicate.empty() && m.mid != method_id::unknown) {
    r = error_reply(id,
                    rpc_error{rpc_error_kind::invalid_params, m.params_duplicate,
                              "must not appear more than once in params", 0},
                    200);
    return;
  }

  // params: _meta protocol version (modern), then what the method needs.
  od::object params;
  bool have_params = false;
  if (m.has_params && o != nullptr) {
    od::value pv;
    if (!member(*o, "params", c.im.body_has_escape, pv) && !pv.get_object().get(params)) {
      have_params = true;
    }
  }
  // The _meta protocol version: checked against the header over HTTP (2026-07-28); on stdio,
  // which has no headers, it selects the revision of this one message.
  if ((modern || !c.http.is_http) && have_params) {
    od::value meta;
    if (!member(params, "_meta", c.im.body_has_escape, meta)) {
      od::object mo;
      od::value ver;
      std::string_view v;
      if (!meta.get_object().get(mo) && !member(mo, k_meta_version_key, c.im.body_has_escape, ver) &&
          !ver.get_string().get(v)) {
        revision declared;
        if (!envelope::parse_revision(v, declared)) {
          r = error_reply(id, rpc_error{rpc_error_kind::unsupported_version, v, {}, 0}, 400);
          return;
        }
        if (!c.http.is_http) {
          if (envelope::is_modern(declared)) {
            modern = true;
            r.rev = declared;
          }
        } else if (declared != c.rev) {
          r = error_reply(
              id,
              rpc_error{rpc_error_kind::header_mismatch,
                        "Header mismatch: the MCP-Protocol-Version header does not match "
                        "io.modelcontextprotocol/protocolVersion in _meta.",
                        {}, 0},
              400);
          return;
        }
      }
    }
  }

  switch (m.mid) {
    case method_id::initialize: {
      if (modern) {
        break;  // 2026-07-28 has no handshake: method not found
      }
      revision negotiated = revision::v2025_11_25;  // latest handshake revision
      if (have_params) {
        od::value pv;
        std::string_view v;
        revision asked;
        if (!member(params, "protocolVersion", c.im.body_has_escape, pv) && !pv.get_string().get(v) &&
            envelope::parse_revision(v, asked) && !envelope::is_modern(asked)) {
          negotiated = asked;
        }
      }
      r.k = reply::kind::result;
      r.result = c.env.initialize_result(negotiated);
      r.rev = negotiated;
      r.mint_session = c.sessions_on;
      return;
    }
    case method_id::ping:
      r.k = reply::kind::result;
      r.result = c.env.empty_result(r.rev);
      return;
    case method_id::tools_list:
      r.k = reply::kind::result;
      r.result = c.tools.list_result(r.rev);
      return;
    case method_id::discover:
      r.k = reply::kind::result;
      r.result = c.env.discover_result();
      return;
    case method_id::tools_call: {
      if (!have_params) {
        r = error_reply(id, rpc_error{rpc_error_kind::invalid_params, "params", "must be an object with name and arguments", 0}, 200);
        return;
      }
      od::value nv;
      std::string_view name;
      od::json_type nt;
      if (member(params, "name", c.im.body_has_escape, nv) || nv.type().get(nt) ||
          nt != od::json_type::string || nv.get_string().get(name)) {
        r = error_reply(id, rpc_error{rpc_error_kind::invalid_params, "name", "is required and must be a string", 0}, 200);
        return;
      }
      if (modern && c.http.is_http && (!c.http.has_mcp_name || c.http.mcp_name != name)) {
        r = error_reply(
            id,
            rpc_error{rpc_error_kind::header_mismatch,
                      c.http.has_mcp_name
                          ? "Header mismatch: the Mcp-Name header does not match params.name."
                          : "Header mismatch: the Mcp-Name header is required for tools/call.",
                      {}, 0},
            400);
        return;
      }
      const tool_def* t = c.tools.find(name);
      if (t == nullptr) {
        r = error_reply(id, rpc_error{rpc_error_kind::unknown_tool, name, {}, 0}, 200);
        return;
      }
      od::value av;
      auto e = member(params, "arguments", c.im.body_has_escape, av);
      bool args_null = false;
      if (!e) {
        bool is_null = false;
        args_null = !av.is_null().get(is_null) && is_null;
      }
      if (!validate_arguments(c, *t, (e || args_null) ? nullptr : &av, id, r)) {
        return;
      }
      r.k = reply::kind::tool_call;
      r.tool = t;
      return;
    }
    default:
      break;
  }
  r = error_reply(id, rpc_error{rpc_error_kind::method_not_found, {}, {}, 0}, modern ? 404 : 200);
}

// Admits a billable tool call, or rates a free one (stdio only: over HTTP the handler rated the
// request before dispatch); turns the reply into a tool error when refused.
void prepare(reply& r, host& h) {
  if (r.k != reply::kind::tool_call) {
    return;
  }
  admission a = r.tool->billable ? h.admit(r.tool->name) : h.rate_check();
  if (a.outcome == admission::kind::ok) {
    r.admitted = r.tool->billable;
    return;
  }
  r.k = reply::kind::tool_error;
  // The refusal's name in the outcome table's words; the row decides which figures it carries.
  envelope::tool_error_code code = envelope::tool_error_code::rate_limited;
  switch (a.outcome) {
    case admission::kind::suspended: code = envelope::tool_error_code::suspended; break;
    case admission::kind::quota_exceeded: code = envelope::tool_error_code::quota_exceeded; break;
    case admission::kind::unavailable: code = envelope::tool_error_code::usage_unavailable; break;
    case admission::kind::quota_unreachable: code = envelope::tool_error_code::quota_unreachable; break;
    default: break;
  }
  r.terr = envelope::make_tool_error(code, a.retry_after_secs, a.quota_limit, a.quota_used,
                                     a.quota_remaining);
}

// Writes the JSON-RPC body of a decided (and prepared) reply; runs the tool for a tool call.
// Returns true when an admitted (billable) call failed and so was not billed: the quota figures
// written before it ran counted it.
outcome outcome_of(const envelope::rpc_error& e) noexcept {
  switch (e.kind) {
    case rpc_error_kind::parse_error: return outcome::parse_error;
    case rpc_error_kind::method_not_found: return outcome::method_not_found;
    case rpc_error_kind::invalid_params: return outcome::invalid_argument;
    case rpc_error_kind::unknown_tool: return outcome::unknown_tool;
    case rpc_error_kind::internal_error: return outcome::internal_error;
    case rpc_error_kind::rate_limited: return outcome::rate_limited;
    default: return outcome::invalid_request;
  }
}

outcome outcome_of(envelope::tool_error_code c) noexcept {
  switch (c) {
    case envelope::tool_error_code::suspended: return outcome::suspended;
    case envelope::tool_error_code::quota_exceeded: return outcome::quota_exceeded;
    case envelope::tool_error_code::rate_limited: return outcome::rate_limited;
    case envelope::tool_error_code::unavailable:
    case envelope::tool_error_code::usage_unavailable:
    case envelope::tool_error_code::quota_unreachable: return outcome::unavailable;
    case envelope::tool_error_code::not_found: return outcome::not_found;
  }
  return outcome::internal_error;
}

bool write_body_of(const dispatch_ctx& c, reply& r, host& h, out_buffer& out, outcome& o);

// write_body_of, then tells the host what `method` was answered with.
bool write_body(const dispatch_ctx& c, reply& r, host& h, out_buffer& out,
                std::string_view method) {
  outcome o = outcome::ok;
  const bool unbilled = write_body_of(c, r, h, out, o);
  if (r.k != reply::kind::none) {
    h.answered(answer_note{method, r.tool, o});
  }
  return unbilled;
}

bool write_body_of(const dispatch_ctx& c, reply& r, host& h, out_buffer& out, outcome& o) {
  switch (r.k) {
    case reply::kind::none: return false;
    case reply::kind::result: c.env.result_response(out, r.id, r.result); return false;
    case reply::kind::error:
      o = outcome_of(r.err);
      c.env.error_response(out, r.id, r.err);
      return false;
    case reply::kind::tool_error:
      o = outcome_of(r.terr.code);
      c.env.tool_error_response(out, r.id, r.rev, r.terr);
      return false;
    case reply::kind::tool_call: {
      const size_t mark = out.size();
      c.env.success_prefix(out, r.id, r.rev);
      json_out j(out, true);
      call_context ctx{&h, r.rev};
      tool_result res = r.tool->impl->call(c.im.args, j, ctx);
      if (res.ok) {
        c.env.success_suffix(out);
      } else if (res.invalid) {
        o = outcome::invalid_argument;
        out.resize(mark);  // roll back whatever the tool wrote
        c.env.error_response(out, r.id,
                             rpc_error{rpc_error_kind::invalid_params, res.argument, res.rule, 0});
      } else {
        o = outcome_of(res.error.code);
        out.resize(mark);  // roll back whatever the tool wrote
        c.env.tool_error_response(out, r.id, r.rev, res.error);
      }
      if (r.admitted) {
        h.settle(res.ok);
      }
      return r.admitted && !res.ok;
    }
  }
  return false;
}

// Replaces the host's header block [begin, end) of a finished response in `out` with one
// written now (error path only: an admitted call failed, and its figures must not count it).
void rewrite_headers(host& h, out_buffer& out, size_t begin, size_t end, out_buffer& scratch) {
  scratch.clear();
  h.write_headers(scratch);
  scratch.append(std::string_view(out.data() + end, out.size() - end));
  out.resize(begin);
  out.append(scratch.view());
  scratch.clear();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parsing one body: pass 1 for a single message or a batch.

namespace {

enum class body_shape : uint8_t { single, batch, not_json, too_large, not_request };

struct parsed {
  body_shape shape = body_shape::not_json;
  message single;
  bool batch_too_long = false;  ///< not_request: a batch of more than max_batch messages
};

parsed parse_body(endpoint::impl& im, std::string_view body, size_t max_batch) {
  parsed p;
  im.batch.clear();
  im.body_has_escape = std::memchr(body.data(), '\\', body.size()) != nullptr;
  auto err = im.parser.iterate(body.data(), body.size(), body.size() + body_padding).get(im.doc);
  if (err == simdjson::CAPACITY) {
    p.shape = body_shape::too_large;
    return p;
  }
  if (err) {
    return p;
  }
  od::json_type t;
  if (im.doc.type().get(t)) {
    return p;
  }
  if (t == od::json_type::object) {
    od::object o;
    if (im.doc.get_object().get(o) || scan_message(o, p.single, 1, im.names, im.params_names)) {
      return p;
    }
    p.shape = body_shape::single;
  } else if (t == od::json_type::array) {
    od::array a;
    if (im.doc.get_array().get(a)) {
      return p;
    }
    bool too_many = false;
    for (auto er : a) {
      od::value v;
      od::json_type et;
      if (er.get(v) || v.type().get(et)) {
        return p;
      }
      message m;
      if (et == od::json_type::object) {
        od::object o;
        if (v.get_object().get(o) || scan_message(o, m, 2, im.names, im.params_names)) {
          return p;
        }
      } else {
        if (walk(v, 1)) {
          return p;
        }
        m.invalid = true;
        m.invalid_reason = "Invalid Request: a batch element must be an object.";
      }
      if (im.batch.size() < max_batch) {
        im.batch.push_back(m);
      } else {
        too_many = true;
      }
    }
    p.shape = too_many || im.batch.empty() ? body_shape::not_request : body_shape::batch;
    p.batch_too_long = too_many;
  } else {
    // A scalar document: valid JSON but not a request (or not JSON at all).
    switch (t) {
      case od::json_type::string: {
        std::string_view s;
        if (im.doc.get_string().get(s)) return p;
        break;
      }
      case od::json_type::number: {
        double d;  // (consumes the token; any valid JSON number converts to a double)
        if (im.doc.get_double().get(d)) return p;
        break;
      }
      case od::json_type::boolean: {
        bool b;
        if (im.doc.get_bool().get(b)) return p;
        break;
      }
      default: {
        bool n = false;
        if (im.doc.is_null().get(n) || !n) return p;
        break;
      }
    }
    p.shape = body_shape::not_request;
  }
  const char* trailing = nullptr;
  if (!im.doc.current_location().get(trailing)) {  // an error here means: at the end
    p.shape = body_shape::not_json;
  }
  return p;
}

// The reply for a message pass 1 already classified (invalid / notification / response), or
// kind::none with `needs_decide` when it is a request.
// `scratch` holds the message naming a duplicated member until the reply is written.
bool classify(const message& m, reply& r, std::string& scratch) {
  if (m.invalid) {
    std::string_view reason = m.invalid_reason;
    if (!m.duplicate.empty()) {
      scratch.assign("Invalid Request: the member \"");
      scratch.append(m.duplicate);
      scratch.append("\" appears more than once in the message.");
      reason = scratch;
    }
    r = error_reply(m.has_id ? m.id : envelope::null_id,
                    rpc_error{rpc_error_kind::invalid_request, reason, {}, 0}, 400);
    return true;
  }
  if (!m.has_method || !m.has_id) {
    r = reply{};  // a response or a notification: no reply
    return true;
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// HTTP transport.

namespace {

http::response_info transport_error(const envelope::cache& env, host& h, out_buffer& out,
                                    int status, std::string_view message, bool close,
                                    std::string_view extra = {}) {
  env.head(out, status, close);
  out.append(extra);
  h.write_headers(out);
  envelope::body_mark bm = env.body_start(out);
  env.error_response(out, envelope::null_id, rpc_error{rpc_error_kind::invalid_request, message, {}, 0});
  env.body_end(out, bm);
  return {status, close};
}

}  // namespace

namespace {

// The request headers the transport reads; the parser indexed each (http::field).
constexpr http::field h_origin = http::field::origin;
constexpr http::field h_session = http::field::mcp_session_id;
constexpr http::field h_accept = http::field::accept;
constexpr http::field h_content_type = http::field::content_type;
constexpr http::field h_protocol = http::field::mcp_protocol_version;
constexpr http::field h_mcp_method = http::field::mcp_method;
constexpr http::field h_mcp_name = http::field::mcp_name;

struct known_headers {
  const http::request& req;
  bool has(http::field f) const noexcept { return req.field_line(f) != nullptr; }
  std::string_view value(http::field f) const noexcept { return req.field_value(f); }
};

}  // namespace

bool endpoint::origin_allowed(const http::request& req) const noexcept {
  const known_headers hd{req};
  if (!hd.has(h_origin)) {
    return true;
  }
  std::string_view origin = trim(hd.value(h_origin));
  bool ok = opts_.allow_loopback_origins && origin_is_loopback(origin);
  for (const auto& allowed : opts_.allowed_origins) {
    ok = ok || allowed == origin;
  }
  return ok;
}

http::response_info endpoint::handle_http(const http::request& req, host& h, out_buffer& out,
                                          int64_t now_ns) {
  const bool close = !req.keep_alive;
  impl& im = *impl_;
  const known_headers hd{req};

  // Origin: DNS-rebinding protection, before anything else.
  if (!origin_allowed(req)) {
    return transport_error(env_, h, out, 403, "Forbidden: this Origin is not allowed.", close);
  }

  if (req.method != "POST") {
    if (req.method == "DELETE" && opts_.sessions != nullptr) {
      std::string_view sid = trim(hd.value(h_session));
      if (sid.empty()) {
        return transport_error(env_, h, out, 400,
                               "Bad Request: DELETE needs an Mcp-Session-Id header.", close);
      }
      if (!opts_.sessions->end(sid)) {
        return transport_error(env_, h, out, 404,
                               "Session not found: it has ended or expired; start a new one with "
                               "initialize.",
                               close);
      }
      h.write_headers(im.scratch);  // headers are per response: write them via a bodiless reply
      env_.empty_response(out, 204, im.scratch.view(), close);
      im.scratch.clear();
      return {204, close};
    }
    return transport_error(env_, h, out, 405,
                           "Method Not Allowed: this server offers no server-initiated stream; "
                           "send JSON-RPC messages with POST.",
                           close, "Allow: POST\r\n");
  }

  if (!accept_ok(req, hd.value(h_accept))) {
    return transport_error(env_, h, out, 406,
                           "Not Acceptable: the client must accept both application/json and "
                           "text/event-stream.",
                           close);
  }
  if (!content_type_ok(hd.value(h_content_type))) {
    return transport_error(env_, h, out, 415,
                           "Unsupported Media Type: the body must be application/json.", close);
  }

  revision rev = revision::v2025_03_26;
  if (hd.has(h_protocol)) {
    std::string_view v = trim(hd.value(h_protocol));
    if (!envelope::parse_revision(v, rev)) {
      env_.head(out, 400, close);
      h.write_headers(out);
      envelope::body_mark bm = env_.body_start(out);
      env_.error_response(out, envelope::null_id,
                          rpc_error{rpc_error_kind::unsupported_version, v, {}, 0});
      env_.body_end(out, bm);
      return {400, close};
    }
  }

  if (req.body.size() > opts_.max_body_bytes) {
    return transport_error(env_, h, out, 413, "Content Too Large: the request body is too large.",
                           close);
  }

  http_facts facts;
  facts.is_http = true;
  facts.has_mcp_method = hd.has(h_mcp_method);
  facts.mcp_method = trim(hd.value(h_mcp_method));
  facts.has_mcp_name = hd.has(h_mcp_name);
  facts.mcp_name = trim(hd.value(h_mcp_name));
  dispatch_ctx c{tools_, env_, im, rev, facts, opts_.sessions != nullptr};

  parsed p = parse_body(im, req.body, opts_.max_batch);
  auto whole_error = [&](int status, rpc_error e, std::string_view id) {
    h.answered(answer_note{{}, nullptr, outcome_of(e)});
    env_.head(out, status, close);
    h.write_headers(out);
    envelope::body_mark bm = env_.body_start(out);
    env_.error_response(out, id, e);
    env_.body_end(out, bm);
    return http::response_info{status, close};
  };
  switch (p.shape) {
    case body_shape::too_large:
      return transport_error(env_, h, out, 413, "Content Too Large: the request body is too large.",
                             close);
    case body_shape::not_json:
      return whole_error(400, rpc_error{rpc_error_kind::parse_error, {}, {}, 0}, envelope::null_id);
    case body_shape::not_request:
      return whole_error(400,
                         rpc_error{rpc_error_kind::invalid_request,
                                   p.batch_too_long ? im.batch_limit_message : std::string_view(),
                                   {}, 0},
                         envelope::null_id);
    case body_shape::batch:
      if (rev != revision::v2025_03_26) {
        return whole_error(400,
                           rpc_error{rpc_error_kind::invalid_request,
                                     "Invalid Request: batches are only accepted under protocol "
                                     "revision 2025-03-26.",
                                     {}, 0},
                           envelope::null_id);
      }
      break;
    case body_shape::single:
      break;
  }

  // Sessions (legacy revisions): every request but initialize must name a live session.
  // Returns 0, or the status of the error response it wrote.
  auto session_gate = [&](bool is_initialize) -> int {
    if (opts_.sessions == nullptr || is_initialize || envelope::is_modern(rev)) {
      return 0;
    }
    std::string_view sid = trim(hd.value(h_session));
    if (sid.empty()) {
      return transport_error(env_, h, out, 400,
                             "Bad Request: the Mcp-Session-Id header is required after initialize.",
                             close)
          .status;
    }
    if (!opts_.sessions->touch(sid, now_ns)) {
      return transport_error(env_, h, out, 404,
                             "Session not found: it has ended or expired; start a new one with "
                             "initialize.",
                             close)
          .status;
    }
    return 0;
  };

  if (p.shape == body_shape::single) {
    const message& m = p.single;
    reply r;
    if (int st = session_gate(m.mid == method_id::initialize); st != 0) {
      return {st, close};
    }
    if (!classify(m, r, im.duplicate_message)) {
      im.doc.rewind();
      od::object o;
      if (im.doc.get_object().get(o)) {
        return whole_error(500, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, m.id);
      }
      decide(c, m, &o, r);
    }
    if (r.k == reply::kind::none) {
      if (im.rate_charged) {
        h.refund_rate();  // notifications and responses never count toward the rate limit
      }
      h.write_headers(im.scratch);
      env_.empty_response(out, 202, im.scratch.view(), close);
      im.scratch.clear();
      return {202, close};
    }
    prepare(r, h);
    env_.head(out, r.status, close);
    if (r.mint_session) {
      im.session_header = "Mcp-Session-Id: " + opts_.sessions->mint(r.rev, now_ns) + "\r\n";
      out.append(im.session_header);
    }
    const size_t headers_at = out.size();
    h.write_headers(out);
    const size_t headers_end = out.size();
    envelope::body_mark bm = env_.body_start(out);
    const bool unbilled = write_body(c, r, h, out, m.method);
    env_.body_end(out, bm);
    if (unbilled) {
      rewrite_headers(h, out, headers_at, headers_end, im.scratch);
    }
    return {r.status, close};
  }

  // Batch (2025-03-26): an array in, an array out; only notifications/responses → 202.
  bool any_initialize = false;
  for (const message& m : im.batch) {
    any_initialize = any_initialize || m.mid == method_id::initialize;
  }
  if (int st = session_gate(any_initialize); st != 0) {
    return {st, close};
  }
  im.doc.rewind();
  od::array arr;
  if (im.doc.get_array().get(arr)) {
    return whole_error(500, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, envelope::null_id);
  }
  out_buffer& body = im.scratch;
  body.clear();
  body.push_back('[');
  size_t i = 0;
  size_t written = 0;
  bool minted = false;
  bool rated = false;  // the HTTP request's own rating covers the batch's first request
  for (auto er : arr) {
    if (i >= im.batch.size()) {
      break;
    }
    const message& m = im.batch[i++];
    reply r;
    bool limited = false;
    if (m.has_id && m.has_method && !m.invalid) {
      if (rated) {
        if (admission a = h.rate_extra(); a.outcome == admission::kind::rate_limited) {
          r = error_reply(m.id,
                          rpc_error{rpc_error_kind::rate_limited, {}, {},
                                    a.retry_after_secs < 1 ? 1 : a.retry_after_secs},
                          200);
          limited = true;
        }
      }
      rated = true;
    }
    if (!limited && !classify(m, r, im.duplicate_message)) {
      od::value v;
      od::object o;
      if (er.get(v) || v.get_object().get(o)) {
        r = error_reply(m.id, rpc_error{rpc_error_kind::internal_error, {}, {}, 0}, 200);
      } else {
        decide(c, m, &o, r);
      }
    }
    if (r.k == reply::kind::none) {
      continue;
    }
    if (r.mint_session && !minted) {
      im.session_header = "Mcp-Session-Id: " + opts_.sessions->mint(r.rev, now_ns) + "\r\n";
      minted = true;
    }
    if (written++ != 0) {
      body.push_back(',');
    }
    prepare(r, h);
    write_body(c, r, h, body, m.method);
  }
  body.push_back(']');
  if (written == 0) {
    if (im.rate_charged) {
      h.refund_rate();  // notifications and responses never count toward the rate limit
    }
    body.clear();
    h.write_headers(body);
    env_.empty_response(out, 202, body.view(), close);
    body.clear();
    return {202, close};
  }
  env_.head(out, 200, close);
  if (minted) {
    out.append(im.session_header);
  }
  h.write_headers(out);
  envelope::body_mark bm = env_.body_start(out);
  out.append(body.view());
  env_.body_end(out, bm);
  body.clear();
  return {200, close};
}

http::response_info endpoint::render_unauthorized(const http::request& req, out_buffer& out,
                                                  bool key_presented) const {
  const bool close = !req.keep_alive;
  env_.unauthorized(out, close, key_presented);
  return {401, close};
}

http::response_info endpoint::render_rate_limited(const http::request& req, host& h,
                                                  out_buffer& out, int64_t retry_after_secs,
                                                  int64_t now_ns) {
  const bool close = !req.keep_alive;
  if (retry_after_secs < 1) {
    retry_after_secs = 1;
  }
  std::string_view id = envelope::null_id;
  if (req.body.size() <= opts_.max_body_bytes) {
    parsed p = parse_body(*impl_, req.body, opts_.max_batch);
    if (p.shape == body_shape::single && p.single.has_id && !p.single.invalid) {
      id = p.single.id;
    }
    // Only notifications and responses: they do not count, so they are not refused either;
    // answered as any POST is (its checks, then 202), with nothing charged to give back.
    bool exempt = p.shape == body_shape::single || p.shape == body_shape::batch;
    if (p.shape == body_shape::single) {
      exempt = !p.single.invalid && !(p.single.has_id && p.single.has_method);
    }
    for (const message& m : impl_->batch) {
      exempt = exempt && !m.invalid && !(m.has_id && m.has_method);
    }
    if (exempt) {
      impl_->rate_charged = false;
      http::response_info info = handle_http(req, h, out, now_ns);
      impl_->rate_charged = true;
      return info;
    }
  }
  env_.head(out, 429, close);
  out.append("Retry-After: ");
  fmt::format_int f(retry_after_secs);
  out.append(f.data(), f.size());
  out.append("\r\n");
  h.write_headers(out);
  envelope::body_mark bm = env_.body_start(out);
  env_.error_response(out, id, rpc_error{rpc_error_kind::rate_limited, {}, {}, retry_after_secs});
  env_.body_end(out, bm);
  return {429, close};
}

// ---------------------------------------------------------------------------------------------
// stdio messages.

void endpoint::handle_message(std::string_view msg, host& h, out_buffer& out) {
  impl& im = *impl_;
  http_facts facts;  // not HTTP: no header checks
  dispatch_ctx c{tools_, env_, im, stdio_rev_, facts, false};
  if (msg.size() > opts_.max_body_bytes) {
    env_.error_response(out, envelope::null_id,
                        rpc_error{rpc_error_kind::invalid_request,
                                  "Invalid Request: the message is too large.", {}, 0});
    return;
  }
  parsed p = parse_body(im, msg, opts_.max_batch);
  switch (p.shape) {
    case body_shape::too_large:
      env_.error_response(out, envelope::null_id,
                          rpc_error{rpc_error_kind::invalid_request,
                                    "Invalid Request: the message is too large.", {}, 0});
      return;
    case body_shape::not_json:
      env_.error_response(out, envelope::null_id, rpc_error{rpc_error_kind::parse_error, {}, {}, 0});
      return;
    case body_shape::not_request:
    case body_shape::batch:  // stdio is newline-delimited single messages
      env_.error_response(out, envelope::null_id,
                          rpc_error{rpc_error_kind::invalid_request, {}, {}, 0});
      return;
    case body_shape::single:
      break;
  }
  const message& m = p.single;
  reply r;
  if (!classify(m, r, im.duplicate_message)) {
    im.doc.rewind();
    od::object o;
    if (im.doc.get_object().get(o)) {
      env_.error_response(out, m.id, rpc_error{rpc_error_kind::internal_error, {}, {}, 0});
      return;
    }
    if (m.mid != method_id::tools_call) {
      admission a = h.rate_check();
      if (a.outcome == admission::kind::rate_limited) {
        env_.error_response(out, m.id,
                            rpc_error{rpc_error_kind::rate_limited, {}, {},
                                      a.retry_after_secs < 1 ? 1 : a.retry_after_secs});
        return;
      }
    }
    decide(c, m, &o, r);
    if (m.mid == method_id::initialize && r.k == reply::kind::result) {
      stdio_rev_ = r.rev;
    }
  }
  prepare(r, h);
  write_body(c, r, h, out, m.method);
}

}  // namespace tollgate::mcp
