#include "support/alloc_counter.h"

#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
thread_local uint64_t t_allocs = 0;

void* counted_alloc(std::size_t n, std::size_t align) {
  ++t_allocs;
  if (n == 0) {
    n = 1;
  }
  void* p = nullptr;
  if (align > alignof(std::max_align_t)) {
    if (posix_memalign(&p, align, (n + align - 1) / align * align) != 0) {
      p = nullptr;
    }
  } else {
    p = std::malloc(n);
  }
  return p;
}
}  // namespace

namespace tollgate::test {
uint64_t thread_allocations() noexcept { return t_allocs; }
}  // namespace tollgate::test

void* operator new(std::size_t n) {
  void* p = counted_alloc(n, alignof(std::max_align_t));
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  return p;
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n, alignof(std::max_align_t));
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n, alignof(std::max_align_t));
}
void* operator new(std::size_t n, std::align_val_t a) {
  void* p = counted_alloc(n, static_cast<std::size_t>(a));
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  return p;
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
