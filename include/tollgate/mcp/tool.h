// Tools and the tool registry: what a tool is (name, title, a description written for a model,
// argument specs from which `inputSchema` is rendered once; never an `outputSchema`), the
// validated arguments handed to it (views and ints in a fixed-capacity struct, no allocation),
// and the tool interface.
//
// The registry is built at start-up and then immutable: thread-safe for concurrent readers.
// Tool objects are called from every core at once: a tool must be thread-safe or keep per-core
// state behind the call_context (its tool_env, which the host hands over per core).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/json_out.h"
#include "tollgate/envelope/envelope.h"

namespace tollgate::mcp {

/// The JSON type of an argument.
enum class arg_type : uint8_t {
  string,        ///< JSON string; min/max = length bounds in bytes
  integer,       ///< JSON integer; min/max = value bounds
  string_array,  ///< JSON array of strings; min/max = item count bounds (≤ max_array_items)
  enumeration,   ///< JSON string, one of `choices`
  timestamp,     ///< JSON integer (unix seconds) or string (e.g. RFC 3339, parsed by the tool);
                 ///< no bounds. The integer form sets `num` and `is_number`.
};

inline constexpr size_t max_args = 12;         ///< arguments per tool
inline constexpr size_t max_array_items = 16;  ///< items of one string_array argument

/// One argument of a tool, as declared at registration.
struct arg_spec {
  std::string name;
  arg_type type = arg_type::string;
  std::string description;  ///< for the model: what it means, units, limits
  bool required = false;
  int64_t min = 0;  ///< see arg_type; `has_min` says whether it applies
  int64_t max = 0;
  bool has_min = false;
  bool has_max = false;
  std::vector<std::string> choices;  ///< enumeration only
  /// Default value rendered into the schema and handed to the tool when the argument is absent:
  /// integer → default_int; string/enumeration → default_string. `has_default` says if one exists.
  bool has_default = false;
  int64_t default_int = 0;
  std::string default_string;
};

/// One validated argument value. Views point into the parser's buffers and are valid only for
/// the duration of the tool call.
struct arg_value {
  bool present = false;    ///< sent by the client (false: absent; a default may still be filled in)
  bool has_value = false;  ///< present, or absent with a default
  std::string_view str;    ///< string / enumeration
  int64_t num = 0;         ///< integer, or timestamp given as a number
  bool is_number = false;  ///< timestamp: given as a JSON integer (num) rather than a string
  uint8_t num_items = 0;   ///< string_array
  std::string_view items[max_array_items];
};

/// The validated arguments of one call, indexed like the tool's arg_specs.
struct arguments {
  arg_value values[max_args];
  const arg_value& operator[](size_t i) const { return values[i]; }
};

/// What an application gives its tools, lent to the endpoint once (endpoint::lend) and passed
/// to each call untouched: the endpoint never reads it. The application derives its own context
/// from it and gets that back in a tool by one checked downcast (the app's:
/// app::tool_context::of). `kind` is an address unique to the derived type, so the check is one
/// comparison. Outlives the endpoint's use of it.
class tool_env {
 public:
  tool_env(const tool_env&) = delete;
  tool_env& operator=(const tool_env&) = delete;
  const void* kind() const noexcept { return kind_; }

 protected:
  explicit tool_env(const void* kind) noexcept : kind_(kind) {}
  ~tool_env() = default;

 private:
  const void* kind_;
};

/// Per-call context a tool may use.
struct call_context {
  tool_env* env = nullptr;  ///< the tools' context lent to the endpoint; null when none was
  envelope::revision revision = envelope::revision::v2025_03_26;
};

/// What a tool returns: ok (it wrote its payload) or a tool error (whatever it wrote is rolled
/// back by the caller).
struct tool_result {
  bool ok = true;
  envelope::tool_error error;
  /// A rule the schema cannot express was broken (e.g. a date format): answered as JSON-RPC
  /// -32602 naming `argument` and `rule` (static strings or views valid during the call).
  bool invalid = false;
  std::string_view argument;
  std::string_view rule;
  static tool_result success() { return {}; }
  static tool_result failure(envelope::tool_error e) { return {false, e, false, {}, {}}; }
  static tool_result invalid_argument(std::string_view argument, std::string_view rule) {
    return {false, {}, true, argument, rule};
  }
};

/// A tool implementation. Thread-safe: one object serves all cores.
class tool {
 public:
  virtual ~tool() = default;
  /// Writes the payload (the exact REST body) through `out`, or returns a tool error.
  /// `out` is nested (escaped for the text block) for MCP. Must not allocate in steady state.
  virtual tool_result call(const arguments& args, json_out& out, call_context& ctx) = 0;
};

/// A registered tool.
struct tool_def {
  std::string name;
  std::string title;
  std::string description;  ///< written for a model
  std::vector<arg_spec> args;
  bool billable = true;  ///< admitted and settled through the host (get_usage is not)
  std::shared_ptr<tool> impl;
};

/// Immutable after finish(); thread-safe for readers.
class registry {
 public:
  /// Adds a tool. Fails fast (TOLLGATE_CHECK) on a duplicate name or more than max_args args.
  void add(tool_def def);
  /// Renders the tools/list results once. Call after the last add().
  void finish();

  /// The tool named `name`, or nullptr.
  const tool_def* find(std::string_view name) const noexcept;
  size_t size() const noexcept { return tools_.size(); }
  const tool_def& at(size_t i) const { return tools_[i]; }
  /// The pre-rendered tools/list result for revision `r`.
  std::string_view list_result(envelope::revision r) const {
    return envelope::is_modern(r) ? list_modern_ : list_legacy_;
  }
  /// The inputSchema JSON of tool i (for tests and docs).
  std::string_view input_schema(size_t i) const { return schemas_[i]; }
  size_t index_of(const tool_def* t) const noexcept {
    return static_cast<size_t>(t - tools_.data());
  }

  /// Pre-rendered rule texts for -32602 `data.rule` (rendered by finish()).
  struct rules {
    std::string unknown;             ///< "is not an argument of this tool (...)"
    std::vector<std::string> type;   ///< per argument: "must be a string", ...
    std::vector<std::string> range;  ///< per argument: "must be between 1 and 50", ...
  };
  const rules& rules_of(size_t i) const { return rules_[i]; }

 private:
  std::vector<tool_def> tools_;
  std::vector<std::string> schemas_;
  std::vector<rules> rules_;
  std::string list_legacy_;
  std::string list_modern_;
  bool finished_ = false;
};

}  // namespace tollgate::mcp
