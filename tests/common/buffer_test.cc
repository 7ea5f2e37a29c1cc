#include "tollgate/common/buffer.h"

#include <gtest/gtest.h>

#include "support/alloc_counter.h"

namespace tollgate {
namespace {

TEST(buffer_test, clear_keeps_capacity_so_reuse_does_not_allocate) {
  // Verifies the steady-state property every response path relies on.
  out_buffer b;
  b.append(std::string(5000, 'x'));
  b.clear();
  test::alloc_scope scope;
  size_t before = b.capacity();
  for (int i = 0; i < 100; ++i) {
    b.clear();
    b.append(std::string_view("0123456789", 10));
  }
  EXPECT_EQ(b.capacity(), before);
  EXPECT_EQ(b.view(), "0123456789");
}

TEST(buffer_test, consume_drops_prefix) {
  // Verifies consume() after a partial send keeps the unsent tail in order.
  out_buffer b;
  b.append("abcdef");
  b.consume(2);
  EXPECT_EQ(b.view(), "cdef");
  b.consume(10);
  EXPECT_TRUE(b.empty());
}

}  // namespace
}  // namespace tollgate
