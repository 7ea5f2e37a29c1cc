// The load generator's latency histogram (histogram.h): exact below 256, within 1% above.
#include "histogram.h"

#include <gtest/gtest.h>

namespace tollgate::loadgen {
namespace {

TEST(loadgen_histogram_test, exact_below_256_and_within_one_percent_above) {
  // Verifies every value maps to a bucket whose highest equivalent value is >= it and within
  // 1/128 of it, and that bucket indices never decrease as values grow.
  std::size_t last = 0;
  for (std::uint64_t v = 0; v < 2'000'000; v += (v < 1000 ? 1 : 997)) {
    std::size_t i = histogram::index_of(v);
    ASSERT_GE(i, last);
    last = i;
    std::uint64_t hi = histogram::highest_equivalent(i);
    ASSERT_GE(hi, v);
    if (v < 256) {
      ASSERT_EQ(hi, v);
    } else {
      ASSERT_LE(static_cast<double>(hi - v), static_cast<double>(v) / 128.0);
    }
  }
}

TEST(loadgen_histogram_test, quantiles_of_uniform_samples) {
  // Verifies p50/p99/max of 1..100000 within the histogram's precision, and merge adds counts.
  histogram a;
  histogram b;
  for (std::uint64_t v = 1; v <= 100000; v++) {
    (v % 2 ? a : b).record(v);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), 100000u);
  EXPECT_NEAR(static_cast<double>(a.quantile(0.5)), 50000.0, 50000.0 / 100);
  EXPECT_NEAR(static_cast<double>(a.quantile(0.99)), 99000.0, 99000.0 / 100);
  EXPECT_EQ(a.quantile(1.0), 100000u);
  EXPECT_EQ(a.max(), 100000u);
  EXPECT_EQ(a.min(), 1u);
}

}  // namespace
}  // namespace tollgate::loadgen
