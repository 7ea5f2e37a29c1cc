// Quota core microbenchmarks: ns per admitted request (GCRA rate check + quota admit + billing
// settle + the journal write amortised over a 64-request loop pass), with 1 thread, 2 threads
// on distinct keys, and 2 threads on one hot key; key lookup (SHA-256) on its own; and the
// effective vs configured rate of a rate-limited key under a simulated clock.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include "support/alloc_counter.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/service.h"

namespace {

using namespace tollgate;
using namespace tollgate::quota;

constexpr int64_t kSec = 1000000000;
constexpr int kPass = 64;  // requests per simulated loop pass (one journal write each)

struct env {
  std::string dir;
  std::unique_ptr<service> svc;
  created_key distinct[2];
  created_key hot;
  created_key rated;
  int64_t t0 = 0;
  plan rated_plan;

  env() {
    char tmpl[] = "/tmp/tollgate-quota-bench-XXXXXX";
    dir = mkdtemp(tmpl);
    plan_map plans;
    plan big;
    big.name = "big";
    big.rate_per_sec = 1e9;
    big.burst = 1000000000;
    big.monthly_quota = int64_t{1} << 40;
    big.overage = overage_policy::stop;
    plans["big"] = big;
    rated_plan.name = "rated";
    rated_plan.rate_per_sec = 1000;
    rated_plan.burst = 100;
    rated_plan.monthly_quota = int64_t{1} << 40;
    plans["rated"] = rated_plan;
    key_store store(dir);
    distinct[0] = *store.create_key("a0", "big", plans, 0);
    distinct[1] = *store.create_key("a1", "big", plans, 0);
    hot = *store.create_key("hot", "big", plans, 0);
    rated = *store.create_key("rated", "rated", plans, 0);
    service_options o;
    o.data_dir = dir;
    o.plans = plans;
    o.cores = 2;
    o.reconcile_ms = 1000;
    t0 = (days_from_civil(2026, 12, 2) * 86400 + 43200) * kSec;
    auto opened = service::open(o, t0);
    if (!opened) {
      std::fprintf(stderr, "quota_bench: %s\n", opened.error().c_str());
      std::abort();
    }
    svc = std::move(*opened);
  }
  ~env() {
    svc.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

env& the_env() {
  static env e;
  return e;
}

// One admitted billable request; returns false if anything refused it.
inline bool one_request(core_ledger& s, const key_record& r, int64_t now) {
  figures f;
  ticket t;
  if (s.check_rate(r, now, f) != rate_verdict::ok) {
    return false;
  }
  if (s.admit(r, now, f, t) != admit_verdict::ok) {
    return false;
  }
  s.settle(t, true);
  benchmark::DoNotOptimize(f);
  return true;
}

void run_admit(benchmark::State& state, const created_key& key) {
  env& e = the_env();
  core_ledger& s = e.svc->ledger(state.thread_index());
  const key_record* r = s.authenticate(key.secret);
  if (r == nullptr || !one_request(s, *r, e.t0)) {
    state.SkipWithError("setup: key refused");
    return;
  }
  int64_t now = e.t0;
  int n = 0;
  test::alloc_scope allocs;
  for (auto _ : state) {
    if (!one_request(s, *r, now)) {
      state.SkipWithError("request refused");
      break;
    }
    if (++n == kPass) {
      n = 0;
      s.before_send(now);              // one write(2) of the pass's journal records
      r = s.authenticate(key.secret);  // the table may have changed at the quiescent point
      now += 1000;
    }
  }
  s.before_send(now);
  state.SetItemsProcessed(state.iterations());
  state.counters["allocs_per_op"] = benchmark::Counter(
      static_cast<double>(allocs.count()) /
      static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations())));
}

void BM_admit_distinct_keys(benchmark::State& state) {
  run_admit(state, the_env().distinct[state.thread_index() % 2]);
}
BENCHMARK(BM_admit_distinct_keys)->Threads(1)->Threads(2)->UseRealTime();

void BM_admit_hot_key(benchmark::State& state) { run_admit(state, the_env().hot); }
BENCHMARK(BM_admit_hot_key)->Threads(1)->Threads(2)->UseRealTime();

void BM_authenticate(benchmark::State& state) {
  env& e = the_env();
  core_ledger& s = e.svc->ledger(0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.authenticate(e.hot.secret));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_authenticate);

// A 1000/s burst-100 key driven at 10000 attempts per simulated second from 1 or 2 threads
// sharing one simulated clock: the effective rate should equal the configured one. Counters
// are summed over threads, so each thread adds its share of (admitted - burst) / sim_seconds.
std::atomic<int64_t> g_attempts{0};
constexpr int64_t kRateIters = 200000;
constexpr int64_t kAttemptsPerSec = 10000;

std::atomic<int64_t> g_run{0};

// Each run (and repetition) starts on a fresh simulated clock far past the previous one, so the
// key's bucket is full again.
void reset_rate_clock(const benchmark::State&) {
  g_attempts = 0;
  ++g_run;
}

void BM_effective_rate(benchmark::State& state) {
  env& e = the_env();
  core_ledger& s = e.svc->ledger(state.thread_index());
  const key_record* r = s.authenticate(e.rated.secret);
  constexpr int64_t kStep = kSec / kAttemptsPerSec;
  const int64_t base = e.t0 + 1000 * kSec * g_run.load();
  int64_t mine = 0;
  for (auto _ : state) {
    const int64_t now = base + g_attempts.fetch_add(1, std::memory_order_relaxed) * kStep;
    figures f;
    mine += s.check_rate(*r, now, f) == rate_verdict::ok;
  }
  const double sim_secs =
      static_cast<double>(kRateIters * state.threads()) / static_cast<double>(kAttemptsPerSec);
  const double burst_share = static_cast<double>(e.rated_plan.burst) / state.threads();
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] = static_cast<double>(mine);
  state.counters["effective_rate"] = (static_cast<double>(mine) - burst_share) / sim_secs;
  state.counters["configured_rate"] = e.rated_plan.rate_per_sec / state.threads();
}
BENCHMARK(BM_effective_rate)
    ->Setup(reset_rate_clock)
    ->Threads(1)
    ->Threads(2)
    ->Iterations(kRateIters)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
