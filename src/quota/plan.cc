// Plan validation: every field checked with a message naming the plan and the field.
#include "tollgate/quota/plan.h"

#include <fmt/format.h>

#include <cmath>

namespace tollgate::quota {

result<overage_policy, std::string> parse_overage(std::string_view s) {
  if (s == "stop") {
    return overage_policy::stop;
  }
  if (s == "bill") {
    return overage_policy::bill;
  }
  return unexpected(fmt::format("overage must be \"stop\" or \"bill\" (got \"{}\")", s));
}

std::string_view to_string(overage_policy p) noexcept {
  return p == overage_policy::bill ? "bill" : "stop";
}

result<void, std::string> validate_plan(const plan& p) {
  if (!valid_name(p.name)) {
    return unexpected(fmt::format(
        "plan \"{}\": the name must be 1-64 characters of letters, digits, '.', '_' or '-'",
        p.name));
  }
  if (!std::isfinite(p.rate_per_sec) || p.rate_per_sec < min_rate_per_sec ||
      p.rate_per_sec > max_rate_per_sec) {
    return unexpected(fmt::format("plan \"{}\": rate_per_sec must be between {} and {} (got {})",
                                  p.name, min_rate_per_sec, max_rate_per_sec, p.rate_per_sec));
  }
  if (p.burst < 1 || p.burst > max_burst) {
    return unexpected(fmt::format("plan \"{}\": burst must be between 1 and {} (got {})", p.name,
                                  max_burst, p.burst));
  }
  // burst * emission interval must fit the GCRA arithmetic comfortably (< ~31 years).
  const double tolerance_ns = static_cast<double>(p.burst) * (1e9 / p.rate_per_sec);
  if (tolerance_ns > max_burst_ns) {
    return unexpected(
        fmt::format("plan \"{}\": burst / rate_per_sec is too large (burst {} at {} per second)",
                    p.name, p.burst, p.rate_per_sec));
  }
  if (p.monthly_quota < 1 || p.monthly_quota > max_monthly_quota) {
    return unexpected(fmt::format("plan \"{}\": monthly_quota must be between 1 and {} (got {})",
                                  p.name, max_monthly_quota, p.monthly_quota));
  }
  return {};
}

result<void, std::string> validate_plans(const plan_map& plans) {
  for (const auto& [name, p] : plans) {
    if (name != p.name) {
      return unexpected(
          fmt::format("plan \"{}\": name field \"{}\" differs from its key", name, p.name));
    }
    auto r = validate_plan(p);
    if (!r) {
      return r;
    }
  }
  return {};
}

}  // namespace tollgate::quota
