#include <gtest/gtest.h>

#include "quota/test_util.h"

namespace tollgate::quota {
namespace {

TEST(plan_test, accepts_the_default_plans) {
  // Verifies sane plans validate.
  EXPECT_TRUE(validate_plans(test::default_plans()).has_value());
}

TEST(plan_test, names_plan_and_field_of_a_bad_value) {
  // Verifies each bad field is reported with the plan's name and the field's name.
  plan_map m = test::default_plans();
  m["free"].burst = 0;
  auto r = validate_plans(m);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("plan \"free\""), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("burst"), std::string::npos) << r.error();

  m = test::default_plans();
  m["pro"].rate_per_sec = -1;
  r = validate_plans(m);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("rate_per_sec"), std::string::npos) << r.error();

  m = test::default_plans();
  m["big"].monthly_quota = 0;
  r = validate_plans(m);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("plan \"big\": monthly_quota"), std::string::npos) << r.error();
}

TEST(plan_test, parses_overage) {
  // Verifies "stop"/"bill" parse and anything else is an error naming the field.
  EXPECT_EQ(*parse_overage("stop"), overage_policy::stop);
  EXPECT_EQ(*parse_overage("bill"), overage_policy::bill);
  auto r = parse_overage("maybe");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("overage"), std::string::npos);
}

}  // namespace
}  // namespace tollgate::quota
