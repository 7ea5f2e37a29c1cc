// Placeholder replaced below.
#include <gtest/gtest.h>
TEST(loadgen_test, builds) {
  // Verifies the test binary links.
  SUCCEED();
}
