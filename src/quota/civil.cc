// Civil-date arithmetic (proleptic Gregorian, UTC). The day-count conversions shift the year to
// start on March 1st so the leap day is the last day of a "year"; a 400-year era then has a fixed
// 146097 days and every month's length follows a linear formula (153 days per 5 months).
#include "tollgate/quota/civil.h"

#include <fmt/format.h>

namespace tollgate::quota {

namespace {
int64_t floor_div(int64_t a, int64_t b) noexcept {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    --q;
  }
  return q;
}
}  // namespace

bool is_leap_year(int64_t y) noexcept { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int days_in_month(int64_t year, int month) noexcept {
  static constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (month == 2 && is_leap_year(year)) {
    return 29;
  }
  return kDays[month - 1];
}

int64_t days_from_civil(int64_t year, int month, int day) noexcept {
  // 1. Count years from March: January and February belong to the previous year.
  const int64_t y = month <= 2 ? year - 1 : year;
  // 2. Split into 400-year eras (146097 days each) and the year within the era.
  const int64_t era = floor_div(y, 400);
  const int64_t yoe = y - era * 400;  // [0, 399]
  // 3. Day of the March-based year: months Mar..Feb map to 0..11; 153 days every 5 months.
  const int64_t mp = month > 2 ? month - 3 : month + 9;
  const int64_t doy = (153 * mp + 2) / 5 + day - 1;  // [0, 365]
  // 4. Day of the era: 365 per year plus one every 4 years, minus centuries, plus every 400.
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  // 5. 719468 days separate 0000-03-01 from 1970-01-01.
  return era * 146097 + doe - 719468;
}

civil_date civil_from_days(int64_t days) noexcept {
  const int64_t z = days + 719468;  // days since 0000-03-01
  const int64_t era = floor_div(z, 146097);
  const int64_t doe = z - era * 146097;  // [0, 146096]
  // Years within the era: undo the leap-day corrections before dividing by 365.
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // [0, 399]
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);                // [0, 365]
  const int64_t mp = (5 * doy + 2) / 153;                                     // [0, 11]
  const int day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  const int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  return {year, month, day};
}

uint32_t month_index_of_secs(int64_t unix_secs) noexcept {
  const civil_date d = civil_from_days(floor_div(unix_secs, 86400));
  return static_cast<uint32_t>(d.year * 12 + (d.month - 1));
}

int64_t month_start_secs(uint32_t index) noexcept {
  return days_from_civil(index / 12, static_cast<int>(index % 12) + 1, 1) * 86400;
}

std::string month_label(uint32_t index) {
  return fmt::format("{:04}-{:02}", month_year(index), month_of_year(index));
}

}  // namespace tollgate::quota
