#include "metrics.h"

#include <fmt/format.h>

#include <iterator>

namespace tollgate::app {

std::string_view route_name(route r) noexcept {
  switch (r) {
    case route::healthz: return "healthz";
    case route::readyz: return "readyz";
    case route::metrics: return "metrics";
    case route::mcp: return "mcp";
    case route::rest_search: return "v1_stories";
    case route::rest_story: return "v1_story";
    case route::rest_usage: return "v1_usage";
    case route::well_known: return "well_known";
    case route::shard: return "shard";
    case route::not_found: return "unmatched";
    case route::count_: break;
  }
  return "unknown";
}

request_counters::request_counters(int cores) : cores_(cores), rows_(new row[cores]) {
  for (int c = 0; c < cores; ++c) {
    for (auto& per_route : rows_[c].n) {
      for (auto& v : per_route) {
        v.store(0, std::memory_order_relaxed);
      }
    }
  }
}

void request_counters::count(int core, route r, int status) noexcept {
  size_t s = statuses - 1;  // the last slot (0) collects statuses we do not list
  for (size_t i = 0; i + 1 < statuses; ++i) {
    if (counted_statuses[i] == status) {
      s = i;
      break;
    }
  }
  // Single writer per row: a relaxed load+store is enough and avoids a locked instruction.
  auto& v = rows_[core].n[static_cast<size_t>(r)][s];
  v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void request_counters::render(out_buffer& out) const {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP tollgate_requests_total HTTP requests answered, by route and status.\n"
                 "# TYPE tollgate_requests_total counter\n");
  for (size_t r = 0; r < static_cast<size_t>(route::count_); ++r) {
    for (size_t s = 0; s < statuses; ++s) {
      uint64_t sum = 0;
      for (int c = 0; c < cores_; ++c) {
        sum += rows_[c].n[r][s].load(std::memory_order_relaxed);
      }
      if (sum == 0) {
        continue;
      }
      if (counted_statuses[s] == 0) {
        fmt::format_to(it, "tollgate_requests_total{{route=\"{}\",status=\"other\"}} {}\n",
                       route_name(static_cast<route>(r)), sum);
      } else {
        fmt::format_to(it, "tollgate_requests_total{{route=\"{}\",status=\"{}\"}} {}\n",
                       route_name(static_cast<route>(r)), counted_statuses[s], sum);
      }
    }
  }
}

}  // namespace tollgate::app
