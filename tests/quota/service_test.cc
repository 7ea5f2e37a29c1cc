// The quota service (service.cc): month rollover of usage and the closed months.
#include "tollgate/quota/service.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "quota/service_fixture.h"
#include "quota/state.h"

namespace tollgate::quota {
namespace {

using test::bill;
using test::fixture;
using test::kMid;
using test::kSec;
using test::small_plans;
using test::temp_dir;
using test::utc_ns;

TEST(quota_service_test, month_rollover_resets_usage_and_keeps_closed_totals) {
  // Verifies Dec -> Jan: a stop key exhausted on Dec 31 is admitted again on Jan 1, with
  // December's total kept for billing and January counting from zero.
  fixture f(small_plans(), 1, utc_ns(2026, 12, 31, 23, 59, 59));
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket t;
  ASSERT_EQ(bill(s, *r, f.now, 5), 5);
  ASSERT_EQ(s.admit(*r, f.now, fig, t), admit_verdict::quota_exceeded);
  EXPECT_EQ(fig.retry_after_secs, 1);
  const int64_t jan = utc_ns(2027, 1, 1);
  ASSERT_EQ(s.admit(*r, jan, fig, t), admit_verdict::ok);
  s.settle(t, true);
  EXPECT_EQ(fig.quota_reset_secs, 31 * 86400);
  s.reconcile(jan);
  const uint32_t dec_idx = month_index_of_ns(f.now);
  EXPECT_EQ(f.svc->month(), dec_idx + 1);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx).used, 5);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx + 1).used, 1);
  f.svc->persist(jan);
  std::ifstream closed(f.dir.path() + "/usage/month-2026-12.txt");
  std::string text((std::istreambuf_iterator<char>(closed)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(k.key_id + " 5 0"), std::string::npos) << text;
}

TEST(quota_service_test, call_admitted_before_rollover_bills_the_old_month) {
  // Verifies a call admitted in December and settled after the core rolled into January is
  // billed to December.
  fixture f(small_plans(), 1, utc_ns(2026, 12, 31, 23, 59, 59));
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  ticket dec_ticket, t;
  ASSERT_EQ(s.admit(*r, f.now, fig, dec_ticket), admit_verdict::ok);
  const int64_t jan = utc_ns(2027, 1, 1);
  ASSERT_EQ(s.admit(*r, jan, fig, t), admit_verdict::ok);
  s.settle(t, true);
  s.settle(dec_ticket, true);
  s.reconcile(jan);
  const uint32_t dec_idx = month_index_of_ns(f.now);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx).used, 1);
  EXPECT_EQ(f.svc->usage(r->key_id, dec_idx + 1).used, 1);
}

TEST(quota_service_test, leap_february_lasts_29_days) {
  // Verifies quota_reset_secs on 2028-02-28T00:00:00Z is two days (29-day February).
  fixture f(small_plans(), 1, utc_ns(2028, 2, 28));
  auto k = f.key("a", "tiny");
  f.open();
  core_ledger& s = f.svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures fig;
  s.fill_quota(*r, f.now, fig);
  EXPECT_EQ(fig.quota_reset_secs, 2 * 86400);
  EXPECT_EQ(fig.quota_remaining, 5);
}

}  // namespace
}  // namespace tollgate::quota
