// Plans: the rate limit, burst, monthly quota and overage policy a key is sold on.
//
// The app parses the TOML config and hands the quota module a plan_map; validate_plans() checks
// every value and names the plan and field of the first bad one. A running service takes a
// new set only whole, through service::replace_plans (SIGHUP, the admin reload call).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "tollgate/common/names.h"
#include "tollgate/common/result.h"

namespace tollgate::quota {

/// What happens once a key's monthly quota is used up.
enum class overage_policy : uint8_t {
  stop,  ///< refuse billable calls with quota_exceeded until the month ends
  bill,  ///< keep serving; successes past the quota are counted as overage
};

/// The range of each plan field validate_plan() accepts. The config module reads [plans.NAME]
/// with the same limits (config.h mirrors them: neither module depends on the other; a test
/// holds the two together), so a bad value is reported there with its file, line and key.
inline constexpr double min_rate_per_sec = 0.001;
inline constexpr double max_rate_per_sec = 1e9;
inline constexpr int64_t max_burst = 1000000000;
inline constexpr int64_t max_monthly_quota = int64_t{1} << 40;
/// burst x emission interval (1e9 / rate_per_sec) must stay below this many ns (~31 years) for
/// the GCRA arithmetic.
inline constexpr double max_burst_ns = 1e18;

struct plan {
  std::string name;
  double rate_per_sec = 10;      ///< sustained requests per second (0.001 .. 1e9)
  int64_t burst = 20;            ///< requests allowed at once from an idle key (1 .. 1e9)
  int64_t monthly_quota = 1000;  ///< billable successes per UTC calendar month (1 .. 2^40)
  overage_policy overage = overage_policy::stop;
};

/// Plans by name (the TOML table key, e.g. "free" for [plans.free]).
using plan_map = std::map<std::string, plan, std::less<>>;

/// Parses "stop" / "bill".
result<overage_policy, std::string> parse_overage(std::string_view s);
std::string_view to_string(overage_policy p) noexcept;

/// Checks one plan. The error is a full sentence naming the plan and the field, e.g.
/// `plan "free": burst must be between 1 and 1000000000 (got 0)`.
result<void, std::string> validate_plan(const plan& p);
/// Checks every plan (names must be 1-64 chars of [A-Za-z0-9._-] and equal their map key).
result<void, std::string> validate_plans(const plan_map& plans);

/// True for names usable as plan and account names: 1-64 chars of [A-Za-z0-9._-]
/// (common/names.h, the one rule config and the key stores share).
inline bool valid_name(std::string_view s) noexcept { return is_plain_name(s); }

}  // namespace tollgate::quota
