// The quota service tests' shared fixture: a service over a temp data dir, small plans, a
// mid-month clock, and `bill` (admit + settle in a loop). Used by the tests of service.cc,
// core_ledger.cc, reload.cc and rate_headers.cc.
#pragma once

#include <memory>
#include <string_view>

#include "quota/test_util.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota::test {

inline const int64_t kMid = utc_ns(2026, 12, 2, 12, 0, 0);  // mid-month "now"

struct fixture {
  explicit fixture(plan_map plans = test::default_plans(), int cores = 1, int64_t now = kMid) {
    opt = test::options(dir.path(), cores);
    opt.plans = std::move(plans);
    this->now = now;
  }
  created_key key(std::string_view account, std::string_view plan_name) {
    return test::add_key(dir.path(), account, plan_name, opt.plans);
  }
  void open() { svc = test::open_service(opt, now); }
  temp_dir dir;
  service_options opt;
  std::unique_ptr<service> svc;
  int64_t now;
};

inline plan_map small_plans() {
  plan_map m;
  m["tiny"] = test::make_plan("tiny", 1e9, 1000000000, 5, overage_policy::stop);
  m["rated"] = test::make_plan("rated", 10, 20, 1000000, overage_policy::stop);
  m["slow"] = test::make_plan("slow", 2, 1, 1000000, overage_policy::stop);
  m["billed"] = test::make_plan("billed", 1e9, 1000000000, 100, overage_policy::bill);
  m["k1000"] = test::make_plan("k1000", 1e9, 1000000000, 1000, overage_policy::stop);
  return m;
}

// Admits and settles up to `n` calls of `r` on `s` at `now` (billed when `success`), stopping at
// the first refusal; returns how many were admitted.
inline int bill(core_ledger& s, const key_record& r, int64_t now, int n, bool success = true) {
  int admitted = 0;
  figures fig;
  ticket t;
  while (admitted < n && s.admit(r, now, fig, t) == admit_verdict::ok) {
    s.settle(t, success);
    ++admitted;
  }
  return admitted;
}

}  // namespace tollgate::quota::test
