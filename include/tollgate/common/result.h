// result<T, E>: a value or an error, the hot path's replacement for exceptions.
//
// API-compatible with the subset of std::expected (C++23) we use, so it can be swapped for it
// once the toolchain has it: has_value(), operator bool, value(), error(), operator*, operator->,
// value_or(). Construct errors with `unexpected(e)`.
#pragma once

#include <cstdlib>
#include <type_traits>
#include <utility>
#include <variant>

namespace tollgate {

template <class E>
struct unexpected {
  explicit constexpr unexpected(E e) : error_(std::move(e)) {}
  E error_;
};
template <class E>
unexpected(E) -> unexpected<E>;

template <class T, class E>
class [[nodiscard]] result {
 public:
  constexpr result() requires std::is_default_constructible_v<T> : v_(std::in_place_index<0>) {}
  constexpr result(T v) : v_(std::in_place_index<0>, std::move(v)) {}  // NOLINT: implicit
  template <class G>
  constexpr result(unexpected<G> e) : v_(std::in_place_index<1>, E(std::move(e.error_))) {}

  constexpr bool has_value() const noexcept { return v_.index() == 0; }
  constexpr explicit operator bool() const noexcept { return has_value(); }
  constexpr T& value() & { return *std::get_if<0>(&v_); }
  constexpr const T& value() const& { return *std::get_if<0>(&v_); }
  constexpr T&& value() && { return std::move(*std::get_if<0>(&v_)); }
  constexpr const E& error() const { return *std::get_if<1>(&v_); }
  constexpr T& operator*() & { return value(); }
  constexpr const T& operator*() const& { return value(); }
  constexpr T* operator->() { return &value(); }
  constexpr const T* operator->() const { return &value(); }
  template <class U>
  constexpr T value_or(U&& u) const& {
    return has_value() ? value() : static_cast<T>(std::forward<U>(u));
  }

 private:
  std::variant<T, E> v_;
};

// result<void, E>
template <class E>
class [[nodiscard]] result<void, E> {
 public:
  constexpr result() = default;
  template <class G>
  constexpr result(unexpected<G> e) : err_(E(std::move(e.error_))), ok_(false) {}
  constexpr bool has_value() const noexcept { return ok_; }
  constexpr explicit operator bool() const noexcept { return ok_; }
  constexpr const E& error() const { return err_; }

 private:
  E err_{};
  bool ok_ = true;
};

}  // namespace tollgate
