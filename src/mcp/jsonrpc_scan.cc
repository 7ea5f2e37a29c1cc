// Pass 1 of the JSON-RPC decoder (see endpoint.cc): one walk over the whole body that validates
// every byte, records each message's id and method as raw views into the body, and refuses a
// member name given twice (in the message object or in its params object).
#include <algorithm>
#include <cstring>

#include "mcp/endpoint_impl.h"

namespace tollgate::mcp {

namespace {

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

}  // namespace

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

namespace {

// The deepest nesting of arrays and objects a message may have: walk() recurses once per
// level, so an unbounded depth would overflow a core's stack (a 400 KB body of '[' is 200,000
// levels). A deeper message is refused as a parse error, as RFC 8259 §9 allows; MCP messages
// nest a handful of levels.
constexpr int max_json_depth = 128;

// Reads the next member of an object being walked: its field, its name unescaped (as compared)
// and where the name is written in the body (to name it in an error).
inline simdjson::error_code read_member(simdjson::simdjson_result<od::field> fr, od::field& f,
                                        member_name& name) {
  if (auto err = std::move(fr).get(f)) {
    return err;
  }
  name.raw = f.key().raw();
  return f.unescaped_key().get(name.key);
}

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
        member_name name;
        if ((err = read_member(fr, f, name))) {
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

// Walks the members of params._meta (validating every value) and sets m.meta_duplicate when a
// name appears twice (which protocol version, which capabilities would depend on the reader). A
// _meta that is not an object is walked as any value (the dispatcher decides what it means).
simdjson::error_code scan_meta(od::value v, message& m, int depth,
                               std::vector<member_name>& names) {
  od::json_type t;
  simdjson::error_code err;
  if ((err = v.type().get(t))) {
    return err;
  }
  if (t != od::json_type::object) {
    return walk(v, depth);
  }
  if (depth >= max_json_depth) {
    return simdjson::DEPTH_ERROR;
  }
  od::object o;
  if ((err = v.get_object().get(o))) {
    return err;
  }
  names.clear();
  for (auto fr : o) {
    od::field f;
    member_name name;
    if ((err = read_member(fr, f, name))) {
      return err;
    }
    names.push_back(name);
    if ((err = walk(f.value(), depth + 1))) {
      return err;
    }
  }
  if (names.size() > 1) {
    m.meta_duplicate = find_duplicate(names);
  }
  return simdjson::SUCCESS;
}

// Walks the members of a params object (validating every value) and sets m.params_duplicate
// when a name appears twice (m.meta_duplicate for one inside _meta).
simdjson::error_code scan_params(od::value v, message& m, int depth,
                                 std::vector<member_name>& names,
                                 std::vector<member_name>& meta_names) {
  od::object o;
  simdjson::error_code err;
  if ((err = v.get_object().get(o))) {
    return err;
  }
  names.clear();
  uint32_t seen = 0;
  for (auto fr : o) {
    od::field f;
    member_name name;
    if ((err = read_member(fr, f, name))) {
      return err;
    }
    const std::string_view key = name.key;
    if (key == "name") {
      once(seen, 1, "name", m.params_duplicate);
    } else if (key == "arguments") {
      once(seen, 2, "arguments", m.params_duplicate);
    } else if (key == "_meta") {
      once(seen, 4, "_meta", m.params_duplicate);
      if ((err = scan_meta(f.value(), m, depth + 1, meta_names))) {
        return err;
      }
      continue;
    } else {
      names.push_back(name);
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

// What scan_message carries from one member of a message object to the next.
struct message_scan {
  bool jsonrpc_ok = false;
  uint32_t seen = 0;                       // once() bits of the members JSON-RPC defines
  std::vector<member_name>& names;         // the other members' names
  std::vector<member_name>& params_names;  // scratch for scan_params
  std::vector<member_name>& meta_names;    // and for its _meta
};

// One member of a message object: records what a member JSON-RPC defines says in `m` (any
// other member's name goes to s.names) and walks its value, validating it.
simdjson::error_code scan_member(const member_name& name, od::value v, message& m, int depth,
                                 message_scan& s) {
  simdjson::error_code err;
  od::json_type t;
  if ((err = v.type().get(t))) {
    return err;
  }
  const std::string_view key = name.key;
  if (key == "jsonrpc") {
    once(s.seen, 1, "jsonrpc", m.duplicate);
    if (t == od::json_type::string) {
      std::string_view str;
      if ((err = v.get_string().get(str))) {
        return err;
      }
      s.jsonrpc_ok = str == "2.0";
      return simdjson::SUCCESS;
    }
    s.jsonrpc_ok = false;
  } else if (key == "id") {
    once(s.seen, 2, "id", m.duplicate);
    m.has_id = true;
    if (t == od::json_type::string || t == od::json_type::number) {
      m.id = trim(v.raw_json_token());
      return walk(v, depth);
    }
    m.id = envelope::null_id;
    m.invalid = true;
    m.invalid_reason = "Invalid Request: id must be a string or a number.";
  } else if (key == "method") {
    once(s.seen, 4, "method", m.duplicate);
    if (t == od::json_type::string) {
      std::string_view raw = trim(v.raw_json_token());
      m.method = raw.substr(1, raw.size() - 2);
      m.has_method = true;
      return walk(v, depth);
    }
    m.invalid = true;
    m.invalid_reason = "Invalid Request: method must be a string.";
  } else if (key == "params") {
    once(s.seen, 8, "params", m.duplicate);
    m.has_params = true;
    if (t == od::json_type::object) {
      return scan_params(v, m, depth, s.params_names, s.meta_names);
    }
    if (t != od::json_type::array) {
      m.invalid = true;
      m.invalid_reason = "Invalid Request: params must be an object.";
    }
  } else if (key == "result" || key == "error") {
    once(s.seen, key == "result" ? 16 : 32, key == "result" ? "result" : "error", m.duplicate);
    m.has_result_or_error = true;
  } else {
    s.names.push_back(name);
  }
  return walk(v, depth);
}

// After the last member of a message object: a repeated member name, a missing or wrong
// jsonrpc, or no method (and not a response) makes the message invalid.
void finish_message(message& m, const message_scan& s) {
  if (m.duplicate.empty() && s.names.size() > 1) {
    m.duplicate = find_duplicate(s.names);
  }
  if (!m.duplicate.empty()) {
    m.invalid = true;
    if (m.duplicate == "id") {
      m.id = envelope::null_id;  // which one the client meant is not known
    }
  }
  if (!s.jsonrpc_ok && !m.invalid) {
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
}

// Pass 1 over one message object: validates it and fills `m`. `depth`: the arrays and objects
// its members are inside of (1 for a single message, 2 in a batch). A member name given twice
// (e.g. two ids or two methods: which one counts would depend on the reader, and a proxy in
// front that reads the other would see a different request) makes the message invalid.
// `names`, `params_names`: scratch (the endpoint's, reserved: no allocation for real messages).
simdjson::error_code scan_message(od::object o, message& m, int depth,
                                  std::vector<member_name>& names,
                                  std::vector<member_name>& params_names,
                                  std::vector<member_name>& meta_names) {
  message_scan s{false, 0, names, params_names, meta_names};
  names.clear();
  for (auto fr : o) {
    od::field f;
    member_name name;
    if (auto err = read_member(fr, f, name)) {
      return err;
    }
    if (auto err = scan_member(name, f.value(), m, depth, s)) {
      return err;
    }
  }
  finish_message(m, s);
  return simdjson::SUCCESS;
}

}  // namespace

namespace {

// The elements of a batch (the document is an array): each object is scanned into im.batch, any
// other element is an invalid message. False: the body is not valid JSON.
bool scan_batch(endpoint::impl& im, size_t max_batch, parsed& p) {
  od::array a;
  if (im.doc.get_array().get(a)) {
    return false;
  }
  bool too_many = false;
  for (auto er : a) {
    od::value v;
    od::json_type et;
    if (er.get(v) || v.type().get(et)) {
      return false;
    }
    message m;
    if (et == od::json_type::object) {
      od::object o;
      if (v.get_object().get(o) ||
          scan_message(o, m, 2, im.names, im.params_names, im.meta_names)) {
        return false;
      }
    } else {
      if (walk(v, 1)) {
        return false;
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
  return true;
}

// Consumes a scalar document of type `t`. False: it is not valid JSON.
bool scan_scalar(od::document& doc, od::json_type t) {
  switch (t) {
    case od::json_type::string: {
      std::string_view s;
      return !doc.get_string().get(s);
    }
    case od::json_type::number: {
      double d;  // (consumes the token; any valid JSON number converts to a double)
      return !doc.get_double().get(d);
    }
    case od::json_type::boolean: {
      bool b;
      return !doc.get_bool().get(b);
    }
    default: {
      bool n = false;
      return !doc.is_null().get(n) && n;
    }
  }
}

}  // namespace

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
    if (im.doc.get_object().get(o) ||
        scan_message(o, p.single, 1, im.names, im.params_names, im.meta_names)) {
      return p;
    }
    p.shape = body_shape::single;
  } else if (t == od::json_type::array) {
    if (!scan_batch(im, max_batch, p)) {
      return p;
    }
  } else {
    // A scalar document: valid JSON but not a request (or not JSON at all).
    if (!scan_scalar(im.doc, t)) {
      return p;
    }
    p.shape = body_shape::not_request;
  }
  const char* trailing = nullptr;
  if (!im.doc.current_location().get(trailing)) {  // an error here means: at the end
    p.shape = body_shape::not_json;
  }
  return p;
}

}  // namespace tollgate::mcp
