// Private: a clear error instead of "Bus error" when a mapped corpus file shrinks under the
// start-up load.
#pragma once

#include <cstddef>
#include <string>

namespace tollgate::search {

/// While alive, a SIGBUS at an address inside [begin, begin + size) (a read of a mapped page past
/// the end of a file that was truncated, or rewritten in place, after it was mapped) writes
/// `message` to stderr and ends the process with exit code 2, as other corpus errors do, instead
/// of the default "Bus error" and core dump. A SIGBUS anywhere else keeps its default action.
/// One guard at a time; the handler is process-wide, so threads the load starts are covered.
class map_guard {
 public:
  map_guard(const void* begin, size_t size, std::string message);
  ~map_guard();
  map_guard(const map_guard&) = delete;
  map_guard& operator=(const map_guard&) = delete;

 private:
  std::string message_;
};

}  // namespace tollgate::search
