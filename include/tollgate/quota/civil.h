// Civil-date arithmetic for the quota month (the calendar month in UTC).
//
// Month indexes count months since year 0: index = year * 12 + (month - 1), so consecutive
// months have consecutive indexes and December -> January is just +1. All functions are pure
// and take unix time; they handle leap years (divisible by 4, except centuries not divisible by
// 400) and times before 1970.
#pragma once

#include <cstdint>
#include <string>

namespace tollgate::quota {

struct civil_date {
  int64_t year;
  int month;  ///< 1..12
  int day;    ///< 1..31
};

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
int64_t days_from_civil(int64_t year, int month, int day) noexcept;
/// The civil date of a day count since 1970-01-01.
civil_date civil_from_days(int64_t days) noexcept;
bool is_leap_year(int64_t year) noexcept;
int days_in_month(int64_t year, int month) noexcept;

/// Month index (year * 12 + month - 1) of a unix time in seconds.
uint32_t month_index_of_secs(int64_t unix_secs) noexcept;
/// Month index of a unix time in nanoseconds.
inline uint32_t month_index_of_ns(int64_t unix_ns) noexcept {
  int64_t s = unix_ns / 1000000000;
  if (unix_ns < 0 && s * 1000000000 != unix_ns) {
    --s;
  }
  return month_index_of_secs(s);
}
/// Unix seconds of 00:00:00 UTC on the first day of month `index`.
int64_t month_start_secs(uint32_t index) noexcept;
/// Unix seconds of the first instant after month `index` (the start of the next month).
inline int64_t month_end_secs(uint32_t index) noexcept { return month_start_secs(index + 1); }
inline int64_t month_year(uint32_t index) noexcept { return index / 12; }
inline int month_of_year(uint32_t index) noexcept { return static_cast<int>(index % 12) + 1; }
/// Month `index` as "YYYY-MM" (archive file names, exports, Stripe identifiers, logs).
std::string month_label(uint32_t index);

}  // namespace tollgate::quota
