// A tools/call result as the server writes it, shared by the check and engine tests.
#pragma once

#include <cstdint>
#include <string>

namespace tollgate::loadgen::test {

inline std::string tool_result(std::int64_t id, bool is_error, const std::string& text_escaped) {
  return "{\"jsonrpc\":\"2.0\",\"id\":" + std::to_string(id) +
         ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" + text_escaped +
         "\"}],\"isError\":" + (is_error ? "true" : "false") + "}}";
}

}  // namespace tollgate::loadgen::test
