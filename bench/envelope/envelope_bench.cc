// Envelope benchmarks: a whole HTTP success response around a 2 KB payload (payload written
// through json_out nested, i.e. escaped once in the same pass, and pre-escaped bytes copied), and
// each tool-error response. Each verifies its output once and reports allocs_per_op.
#include <benchmark/benchmark.h>

#include <string>

#include "support/alloc_counter.h"
#include "tollgate/common/json_out.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/envelope/reference.h"

namespace {

using namespace tollgate;
using namespace tollgate::envelope;

const cache& env() {
  static const cache c{server_identity{}};
  return c;
}

template <class F>
double allocs_per_op(F&& f) {
  test::alloc_scope scope;
  for (int i = 0; i < 1000; ++i) {
    f();
  }
  return static_cast<double>(scope.count()) / 1000.0;
}

constexpr std::string_view kHeaders =
    "X-RateLimit-Limit: 10\r\nX-RateLimit-Remaining: 9\r\nX-Quota-Used: 10\r\n";

// A 2 KB search payload: ~12 stories with a quote and a newline in each title.
std::string payload_2k() {
  std::string s = R"({"total":12,"stories":[)";
  for (int i = 0; s.size() < 2000; ++i) {
    s +=
        (i ? "," : "") + std::string(R"({"id":"s)") + std::to_string(i) +
        R"(","title":"A \"quoted\" title\nabout io_uring","url":"https://example.com/x","score":42})";
  }
  return s + "]}";
}

void BM_success_2k_payload_via_json_out(benchmark::State& state) {
  // The payload producer's structural writes are modelled by one raw() of the whole text.
  const std::string payload = payload_2k();
  out_buffer out(16 * 1024);
  auto once = [&] {
    out.clear();
    env().head(out, 200, false);
    out.append(kHeaders);
    body_mark m = env().body_start(out);
    env().success_prefix(out, "42", revision::v2025_06_18);
    json_out j(out, true);
    j.raw(payload);
    env().success_suffix(out);
    env().body_end(out, m);
  };
  once();
  std::string want = reference::http(200, false, kHeaders,
                                     reference::success("42", revision::v2025_06_18, payload));
  if (out.view() != want) {
    state.SkipWithError("mismatch with reference");
    return;
  }
  for (auto _ : state) {
    once();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(out.size()));
  state.counters["allocs_per_op"] = allocs_per_op(once);
}
BENCHMARK(BM_success_2k_payload_via_json_out);

void BM_success_2k_envelope_only(benchmark::State& state) {
  // Envelope cost alone: the already-escaped payload is copied in.
  const std::string payload = reference::escape(payload_2k());
  out_buffer out(16 * 1024);
  auto once = [&] {
    out.clear();
    env().head(out, 200, false);
    out.append(kHeaders);
    body_mark m = env().body_start(out);
    env().success_prefix(out, "42", revision::v2025_06_18);
    out.append(payload);
    env().success_suffix(out);
    env().body_end(out, m);
  };
  once();
  for (auto _ : state) {
    once();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["allocs_per_op"] = allocs_per_op(once);
}
BENCHMARK(BM_success_2k_envelope_only);

void BM_tool_error(benchmark::State& state) {
  const auto code = static_cast<tool_error_code>(state.range(0));
  tool_error e{code, -1, -1, -1, -1, {}};
  if (code == tool_error_code::quota_exceeded) {
    e = {code, 394200, 1000, 1000, 0, {}};
  } else if (code == tool_error_code::rate_limited) {
    e.retry_after_secs = 1;
  }
  out_buffer out(4096);
  auto once = [&] {
    out.clear();
    env().head(out, 200, false);
    out.append(kHeaders);
    body_mark m = env().body_start(out);
    env().tool_error_response(out, "42", revision::v2025_06_18, e);
    env().body_end(out, m);
  };
  once();
  if (out.view() !=
      reference::http(200, false, kHeaders,
                      reference::tool_error_response("42", revision::v2025_06_18, e))) {
    state.SkipWithError("mismatch with reference");
    return;
  }
  for (auto _ : state) {
    once();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(name_of(code)));
  state.SetItemsProcessed(state.iterations());
  state.counters["allocs_per_op"] = allocs_per_op(once);
}
BENCHMARK(BM_tool_error)->DenseRange(0, num_tool_error_codes - 1);

}  // namespace
BENCHMARK_MAIN();
