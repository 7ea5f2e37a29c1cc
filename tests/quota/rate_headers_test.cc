// The rate/quota response headers (rate_headers.cc) against the figures and a reference
// rendering.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "quota/service_fixture.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {
namespace {

using test::bill;
using test::fixture;
using test::kMid;
using test::kSec;
using test::small_plans;
using test::temp_dir;
using test::utc_ns;

TEST(quota_service_test, headers_carry_the_same_numbers_as_the_figures) {
  // Verifies write_rate_headers writes every header from one figures snapshot.
  figures f;
  f.rate_limit = 20;
  f.rate_remaining = 7;
  f.rate_reset_secs = 2;
  f.rate_window_secs = 2;
  f.quota_limit = 1000;
  f.quota_used = 1000;
  f.quota_remaining = 0;
  f.quota_reset_secs = 394200;
  f.retry_after_secs = 394200;
  out_buffer out;
  write_rate_headers(out, f);
  EXPECT_EQ(out.view(),
            "X-RateLimit-Limit: 20\r\n"
            "X-RateLimit-Remaining: 7\r\n"
            "X-RateLimit-Reset: 2\r\n"
            "X-Quota-Limit: 1000\r\n"
            "X-Quota-Used: 1000\r\n"
            "X-Quota-Remaining: 0\r\n"
            "X-Quota-Reset: 394200\r\n"
            "RateLimit-Policy: \"burst\";q=20;w=2, \"monthly\";q=1000;w=2592000\r\n"
            "RateLimit: \"burst\";r=7;t=2, \"monthly\";r=0;t=394200\r\n"
            "Retry-After: 394200\r\n");
  f.retry_after_secs = 0;
  out.clear();
  write_rate_headers(out, f);
  EXPECT_EQ(out.view().find("Retry-After"), std::string_view::npos);
}

TEST(quota_service_test, headers_match_a_reference_rendering_for_any_figures) {
  // Verifies write_rate_headers (which converts each repeated value once and copies its digits
  // for the second use) writes exactly what a plain std::to_string rendering writes, for values
  // of every digit count, 0, negatives and the int64 extremes, with and without Retry-After,
  // appended after existing output, and never past its reservation.
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> values = {0, 1, -1, 9, 10, 99, 100, kMax, kMin, kMin + 1, -kMax};
  int64_t p = 1;
  for (int digits = 1; digits <= 18; ++digits) {  // p = 10^digits, up to 10^18 (no overflow)
    p *= 10;
    values.push_back(p - 1);
    values.push_back(p);
    values.push_back(-p);
  }
  auto ref = [](const figures& f) {
    auto n = [](int64_t v) { return std::to_string(v); };
    std::string r = "X-RateLimit-Limit: " + n(f.rate_limit) +
                    "\r\nX-RateLimit-Remaining: " + n(f.rate_remaining) +
                    "\r\nX-RateLimit-Reset: " + n(f.rate_reset_secs) +
                    "\r\nX-Quota-Limit: " + n(f.quota_limit) +
                    "\r\nX-Quota-Used: " + n(f.quota_used) +
                    "\r\nX-Quota-Remaining: " + n(f.quota_remaining) +
                    "\r\nX-Quota-Reset: " + n(f.quota_reset_secs) +
                    "\r\nRateLimit-Policy: \"burst\";q=" + n(f.rate_limit) +
                    ";w=" + n(f.rate_window_secs) + ", \"monthly\";q=" + n(f.quota_limit) +
                    ";w=2592000\r\nRateLimit: \"burst\";r=" + n(f.rate_remaining) +
                    ";t=" + n(f.rate_reset_secs) + ", \"monthly\";r=" + n(f.quota_remaining) +
                    ";t=" + n(f.quota_reset_secs) + "\r\n";
    if (f.retry_after_secs > 0) {
      r += "Retry-After: " + n(f.retry_after_secs) + "\r\n";
    }
    return r;
  };
  size_t checked = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    figures f;
    // Each field takes a different value of the list, so neighbours differ in length.
    f.rate_limit = values[i];
    f.rate_remaining = values[(i + 1) % values.size()];
    f.rate_reset_secs = values[(i + 2) % values.size()];
    f.rate_window_secs = values[(i + 3) % values.size()];
    f.quota_limit = values[(i + 4) % values.size()];
    f.quota_used = values[(i + 5) % values.size()];
    f.quota_remaining = values[(i + 6) % values.size()];
    f.quota_reset_secs = values[(i + 7) % values.size()];
    f.retry_after_secs = values[(i + 8) % values.size()];
    out_buffer out;
    out.append("HTTP/1.1 200 OK\r\n");
    write_rate_headers(out, f);
    EXPECT_EQ(out.view(), "HTTP/1.1 200 OK\r\n" + ref(f)) << "case " << i;
    ++checked;
  }
  // The longest output: every number 20 characters, Retry-After included.
  figures worst;
  worst.rate_limit = worst.rate_remaining = worst.rate_reset_secs = worst.rate_window_secs =
      worst.quota_limit = worst.quota_used = worst.quota_remaining = worst.quota_reset_secs = kMin;
  worst.retry_after_secs = kMax;
  out_buffer out;
  write_rate_headers(out, worst);
  EXPECT_EQ(out.view(), ref(worst));
  EXPECT_EQ(checked, values.size());
}

}  // namespace
}  // namespace tollgate::quota
