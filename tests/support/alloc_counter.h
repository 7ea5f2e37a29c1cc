// Counting allocator for test and bench binaries only: replaces global operator new/delete and
// counts allocations per thread, so a test can assert that a steady-state path allocates nothing.
#pragma once

#include <cstdint>

namespace tollgate::test {

/// Allocations made by operator new on the calling thread since it started.
uint64_t thread_allocations() noexcept;

/// Counts allocations on this thread within its lifetime.
class alloc_scope {
 public:
  alloc_scope() noexcept : start_(thread_allocations()) {}
  uint64_t count() const noexcept { return thread_allocations() - start_; }

 private:
  uint64_t start_;
};

}  // namespace tollgate::test
