#include "tollgate/quota/civil.h"

#include <gtest/gtest.h>

#include "quota/test_util.h"

namespace tollgate::quota {
namespace {

using test::utc_ns;

// A naive day count (year by year, month by month) to check the closed-form one against.
int64_t naive_days(int64_t y, int m, int d) {
  int64_t days = 0;
  for (int64_t yy = 1970; yy < y; ++yy) {
    days += is_leap_year(yy) ? 366 : 365;
  }
  for (int mm = 1; mm < m; ++mm) {
    days += days_in_month(y, mm);
  }
  return days + d - 1;
}

TEST(civil_test, matches_naive_day_count_for_every_day_1970_to_2100) {
  // Verifies days_from_civil/civil_from_days agree with day-by-day counting over 130 years.
  int64_t expected = 0;
  for (int64_t y = 1970; y <= 2100; ++y) {
    for (int m = 1; m <= 12; ++m) {
      for (int d = 1; d <= days_in_month(y, m); ++d) {
        ASSERT_EQ(days_from_civil(y, m, d), expected) << y << "-" << m << "-" << d;
        civil_date c = civil_from_days(expected);
        ASSERT_EQ(c.year, y);
        ASSERT_EQ(c.month, m);
        ASSERT_EQ(c.day, d);
        ++expected;
      }
    }
  }
  EXPECT_EQ(naive_days(2024, 2, 29), days_from_civil(2024, 2, 29));
}

TEST(civil_test, knows_leap_years) {
  // Verifies the Gregorian leap rule, including centuries.
  EXPECT_TRUE(is_leap_year(2024));
  EXPECT_FALSE(is_leap_year(2025));
  EXPECT_FALSE(is_leap_year(1900));
  EXPECT_FALSE(is_leap_year(2100));
  EXPECT_TRUE(is_leap_year(2000));
  EXPECT_EQ(days_in_month(2024, 2), 29);
  EXPECT_EQ(days_in_month(2026, 2), 28);
  EXPECT_EQ(days_in_month(2000, 2), 29);
  EXPECT_EQ(days_in_month(2100, 2), 28);
}

TEST(civil_test, month_index_changes_exactly_at_midnight_utc_on_the_first) {
  // Verifies the last nanosecond of a month belongs to it and the next one starts the next.
  const int64_t end = utc_ns(2026, 3, 1);
  EXPECT_EQ(month_index_of_ns(end - 1), 2026u * 12 + 1);  // February
  EXPECT_EQ(month_index_of_ns(end), 2026u * 12 + 2);      // March
}

TEST(civil_test, month_lengths_28_29_30_31) {
  // Verifies month_end - month_start for a 28-, 29-, 30- and 31-day month.
  auto len_days = [](int64_t y, int m) {
    uint32_t idx = static_cast<uint32_t>(y * 12 + m - 1);
    return (month_end_secs(idx) - month_start_secs(idx)) / 86400;
  };
  EXPECT_EQ(len_days(2026, 2), 28);
  EXPECT_EQ(len_days(2028, 2), 29);
  EXPECT_EQ(len_days(2000, 2), 29);
  EXPECT_EQ(len_days(2100, 2), 28);
  EXPECT_EQ(len_days(2026, 4), 30);
  EXPECT_EQ(len_days(2026, 1), 31);
}

TEST(civil_test, december_rolls_into_january_of_the_next_year) {
  // Verifies Dec -> Jan: the index increments by one and the new year starts on Jan 1st.
  const uint32_t dec = month_index_of_ns(utc_ns(2026, 12, 31, 23, 59, 59));
  EXPECT_EQ(month_year(dec), 2026);
  EXPECT_EQ(month_of_year(dec), 12);
  EXPECT_EQ(month_end_secs(dec) * test::kSec, utc_ns(2027, 1, 1));
  const uint32_t jan = month_index_of_ns(utc_ns(2027, 1, 1));
  EXPECT_EQ(jan, dec + 1);
  EXPECT_EQ(month_year(jan), 2027);
  EXPECT_EQ(month_of_year(jan), 1);
}

TEST(civil_test, handles_times_before_the_epoch) {
  // Verifies floor semantics for negative unix times (1969-12-31T23:59:59Z is December 1969).
  EXPECT_EQ(month_index_of_secs(-1), 1969u * 12 + 11);
  EXPECT_EQ(month_index_of_ns(-1), 1969u * 12 + 11);
  EXPECT_EQ(month_start_secs(1970u * 12), 0);
}

}  // namespace
}  // namespace tollgate::quota
