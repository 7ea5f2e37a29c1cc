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

#include "tollgate/common/buffer.h"

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
  /// Appends the Prometheus text of `tollgate_requests_total{route,status}`.
  void render(out_buffer& out) const;

 private:
  static constexpr size_t statuses = counted_statuses.size();
  struct alignas(64) row {
    std::atomic<uint64_t> n[static_cast<size_t>(route::count_)][statuses];
  };
  int cores_;
  std::unique_ptr<row[]> rows_;
};

}  // namespace tollgate::app
