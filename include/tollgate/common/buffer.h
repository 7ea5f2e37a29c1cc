// out_buffer: a contiguous, growable byte buffer that keeps its capacity across clear().
//
// Responses, journal records and payloads are written into out_buffers owned by a core; after
// warm-up the capacity has reached its working size and writing allocates nothing. Core-local:
// not thread-safe.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tollgate {

class out_buffer {
 public:
  out_buffer() = default;
  explicit out_buffer(size_t capacity) { reserve(capacity); }
  out_buffer(const out_buffer&) = delete;
  out_buffer& operator=(const out_buffer&) = delete;
  out_buffer(out_buffer&& o) noexcept : data_(o.data_), size_(o.size_), cap_(o.cap_) {
    o.data_ = nullptr;
    o.size_ = o.cap_ = 0;
  }
  out_buffer& operator=(out_buffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = o.data_;
      size_ = o.size_;
      cap_ = o.cap_;
      o.data_ = nullptr;
      o.size_ = o.cap_ = 0;
    }
    return *this;
  }
  ~out_buffer() { std::free(data_); }

  char* data() noexcept { return data_; }
  const char* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  size_t capacity() const noexcept { return cap_; }
  bool empty() const noexcept { return size_ == 0; }
  std::string_view view() const noexcept { return {data_, size_}; }
  void clear() noexcept { size_ = 0; }
  // Drops the first n bytes (after a partial send), moving the rest to the front.
  void consume(size_t n) noexcept {
    if (n >= size_) {
      size_ = 0;
      return;
    }
    std::memmove(data_, data_ + n, size_ - n);
    size_ -= n;
  }
  void resize(size_t n) {
    reserve(n);
    size_ = n;
  }

  void reserve(size_t n) {
    if (n <= cap_) {
      return;
    }
    size_t c = cap_ ? cap_ : 256;
    while (c < n) {
      c *= 2;
    }
    void* p = std::realloc(data_, c);
    if (p == nullptr) {  // ENOMEM is fatal (no exceptions on the data plane)
      std::fputs("tollgate: out of memory\n", stderr);
      std::abort();
    }
    data_ = static_cast<char*>(p);
    cap_ = c;
  }
  // Returns space for at least n more bytes; call commit() with what was written.
  char* prepare(size_t n) {
    reserve(size_ + n);
    return data_ + size_;
  }
  void commit(size_t n) noexcept { size_ += n; }

  void append(const char* p, size_t n) {
    if (n == 0) {
      return;
    }
    std::memcpy(prepare(n), p, n);
    size_ += n;
  }
  void append(std::string_view s) { append(s.data(), s.size()); }
  void push_back(char c) {
    *prepare(1) = c;
    ++size_;
  }

  // fmt::format_to support: out_buffer works as an output iterator target via back_inserter.
  using value_type = char;

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = 0;
};

}  // namespace tollgate
