// Logging to stderr (stdout belongs to stdio mode's JSON-RPC stream and to key printing).
// Not for the request path: start-up, shutdown, errors worth an operator's attention.
#pragma once

#include <fmt/core.h>

#include <cstdio>

namespace tollgate {

template <class... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "tollgate: ");
  fmt::print(stderr, f, std::forward<Args>(args)...);
  std::fputc('\n', stderr);
}

template <class... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "tollgate: error: ");
  fmt::print(stderr, f, std::forward<Args>(args)...);
  std::fputc('\n', stderr);
}

}  // namespace tollgate
