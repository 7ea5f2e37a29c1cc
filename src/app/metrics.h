// Request counters for /metrics: requests by route and status, per core.
//
// Each core writes only its own row (relaxed atomics: a single writer, readers on other cores
// only need eventually-consistent figures), so counting costs one uncontended increment and
// touches no line shared with another core. render_requests() sums all cores at scrape time.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/common/outcome.h"

namespace tollgate::app {

/// The routes we count (the label value of `route`).
enum class route : uint8_t {
  healthz,
  readyz,
  metrics,
  mcp,
  rest_search,
  rest_story,
  rest_usage,
  well_known,
  oauth,    ///< the authorization server's routes (/register, /authorize, /token, /revoke)
  webhook,  ///< the Stripe webhook on the public listener ([stripe] public_webhook)
  shard,
  not_found,
  count_
};
std::string_view route_name(route r) noexcept;

inline constexpr std::array<int, 18> counted_statuses = {
    100, 200, 202, 400, 401, 403, 404, 405, 406, 413, 415, 429, 431, 500, 501, 503, 505, 0};

/// Per-core request counters. Thread-safe for one writer (the owning core) and any readers.
class request_counters {
 public:
  explicit request_counters(int cores);
  void count(int core, route r, int status) noexcept;
  /// A story's text read into the page cache for a request parked for it (`res`: bytes read or
  /// -errno).
  void count_read_ahead(int core, int64_t res) noexcept;
  /// Appends the Prometheus text of `tollgate_requests_total{route,status}`, then
  /// tollgate_story_read_aheads_total and tollgate_story_read_ahead_errors_total.
  void render(out_buffer& out) const;

 private:
  static constexpr size_t statuses = counted_statuses.size();
  struct alignas(64) row {
    std::atomic<uint64_t> n[static_cast<size_t>(route::count_)][statuses];
    std::atomic<uint64_t> read_aheads;
    std::atomic<uint64_t> read_ahead_errors;
  };
  int cores_;
  std::unique_ptr<row[]> rows_;
};

/// Upper bounds of tollgate_request_duration_seconds's buckets, in ns: 50 µs to 10 s.
inline constexpr std::array<int64_t, 17> latency_bounds_ns = {
    50'000,      100'000,       250'000,       500'000,       1'000'000,     2'500'000,
    5'000'000,   10'000'000,    25'000'000,    50'000'000,    100'000'000,   250'000'000,
    500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};

/// Per-core answers by outcome, latency histograms by route and tool, and billed and overage
/// calls by plan. Each core writes only its own row (single-writer relaxed atomics, no lock, no
/// shared line); render() sums the rows at scrape time.
class request_metrics {
 public:
  /// Tools get slots 1..max_tools (registry index + 1); slot 0 is "no tool".
  static constexpr size_t max_tools = 7;
  /// Plans a core tells apart; billed calls of any further plan count under plan="other".
  static constexpr size_t max_plans = 62;

  /// `tool_names[i]` labels tool slot i + 1 (at most max_tools; the strings must outlive this).
  request_metrics(int cores, std::vector<std::string_view> tool_names);

  /// One answered request: its outcome, and its latency under (route, tool slot).
  void observe(int core, route r, size_t tool_slot, outcome o, int64_t latency_ns) noexcept;
  /// `billed` calls of plan `plan`, `overage` of them past the quota (the owning core only).
  void bill(int core, std::string_view plan, uint64_t billed, uint64_t overage) noexcept;
  /// Access-log lines written and dropped (a full disk, an I/O error).
  void log_written(int core, uint64_t lines) noexcept;
  void log_dropped(int core, uint64_t lines) noexcept;

  /// Appends tollgate_answers_total, tollgate_request_duration_seconds,
  /// tollgate_billed_calls_total, tollgate_overage_calls_total and the access log's counters.
  void render(out_buffer& out) const;

 private:
  static constexpr size_t routes = static_cast<size_t>(route::count_);
  static constexpr size_t tool_slots = max_tools + 1;
  static constexpr size_t buckets = latency_bounds_ns.size() + 1;  // the last: +Inf
  struct plan_slot {
    char name[64];
    uint8_t len;
    std::atomic<uint64_t> billed;
    std::atomic<uint64_t> overage;
  };
  struct alignas(64) row {
    std::atomic<uint64_t> outcomes[routes][num_outcomes];
    std::atomic<uint64_t> hist[routes][tool_slots][buckets];
    std::atomic<uint64_t> sum_ns[routes][tool_slots];
    plan_slot plans[max_plans + 1];    // [max_plans]: "other"
    std::atomic<uint32_t> plans_used;  // published with release after a slot's name
    std::atomic<uint64_t> log_lines;
    std::atomic<uint64_t> log_dropped;
  };
  // render()'s steps. sum(): `field` of every core's row, added up.
  template <class Field>
  uint64_t sum(Field field) const;
  void render_answers(out_buffer& out) const;
  void render_durations(out_buffer& out) const;
  void render_plans(out_buffer& out) const;

  int cores_;
  std::vector<std::string_view> tools_;
  std::unique_ptr<row[]> rows_;
};

}  // namespace tollgate::app
