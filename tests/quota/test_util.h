// Shared helpers for quota tests: temp data dirs, plans, a clock in nanoseconds.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tollgate/quota/civil.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/plan.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota::test {

constexpr int64_t kSec = 1000000000;

/// A fresh directory under /tmp, removed with its contents at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    char tmpl[] = "/tmp/tollgate-quota-XXXXXX";
    const char* p = mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "/tmp";
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Unix ns of a UTC civil time.
inline int64_t utc_ns(int64_t y, int mo, int d, int h = 0, int mi = 0, int s = 0) {
  return (days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * kSec;
}

inline plan make_plan(std::string name, double rate, int64_t burst, int64_t quota,
                      overage_policy o) {
  plan p;
  p.name = std::move(name);
  p.rate_per_sec = rate;
  p.burst = burst;
  p.monthly_quota = quota;
  p.overage = o;
  return p;
}

/// free: 10/s burst 20, 1000 a month, stop. pro: 1e6/s, 100 a month, bill. big: effectively
/// unlimited rate, 1e9 a month, stop.
inline plan_map default_plans() {
  plan_map m;
  m["free"] = make_plan("free", 10, 20, 1000, overage_policy::stop);
  m["pro"] = make_plan("pro", 1e6, 1000000, 100, overage_policy::bill);
  m["big"] = make_plan("big", 1e9, 1000000000, 1000000000, overage_policy::stop);
  return m;
}

inline service_options options(const std::string& dir, int cores = 1) {
  service_options o;
  o.data_dir = dir;
  o.plans = default_plans();
  o.cores = cores;
  return o;
}

inline created_key add_key(const std::string& dir, std::string_view account,
                           std::string_view plan_name, const plan_map& plans = default_plans()) {
  key_store store(dir);
  auto r = store.create_key(account, plan_name, plans, 1764633600);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? *r : created_key{};
}

inline std::unique_ptr<service> open_service(const service_options& o, int64_t now) {
  auto r = service::open(o, now);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error());
  return r ? std::move(*r) : nullptr;
}

/// Everything a stream held, from its start; closes it.
inline std::string slurp(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    s.append(buf, n);
  }
  std::fclose(f);
  return s;
}

/// A file's whole text ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A CLI entry point's exit code and what it wrote to its two streams.
struct cli_result {
  int code;
  std::string out, err;
};

/// Runs `entry(out, err)`, a CLI entry point writing to two FILE*s, with both captured.
template <class Entry>
cli_result capture_cli(Entry&& entry) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  const int code = entry(out, err);
  return {code, slurp(out), slurp(err)};
}

}  // namespace tollgate::quota::test
