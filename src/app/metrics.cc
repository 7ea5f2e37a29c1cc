#include "metrics.h"

#include <fmt/format.h>

#include <cstring>
#include <iterator>
#include <map>
#include <utility>

namespace tollgate::app {

std::string_view route_name(route r) noexcept {
  switch (r) {
    case route::healthz:
      return "healthz";
    case route::readyz:
      return "readyz";
    case route::metrics:
      return "metrics";
    case route::mcp:
      return "mcp";
    case route::rest_search:
      return "v1_stories";
    case route::rest_story:
      return "v1_story";
    case route::rest_usage:
      return "v1_usage";
    case route::oauth:
      return "oauth";
    case route::well_known:
      return "well_known";
    case route::webhook:
      return "stripe_webhook";
    case route::shard:
      return "shard";
    case route::not_found:
      return "unmatched";
    case route::count_:
      break;
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
    rows_[c].read_aheads.store(0, std::memory_order_relaxed);
    rows_[c].read_ahead_errors.store(0, std::memory_order_relaxed);
  }
}

void request_counters::count_read_ahead(int core, int64_t res) noexcept {
  auto& v = res < 0 ? rows_[core].read_ahead_errors : rows_[core].read_aheads;
  v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
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
  uint64_t reads = 0, errors = 0;
  for (int c = 0; c < cores_; ++c) {
    reads += rows_[c].read_aheads.load(std::memory_order_relaxed);
    errors += rows_[c].read_ahead_errors.load(std::memory_order_relaxed);
  }
  fmt::format_to(it,
                 "# HELP tollgate_story_read_aheads_total Stories' texts read into the page cache "
                 "on a core's ring for a get_story parked meanwhile (not cached when asked for).\n"
                 "# TYPE tollgate_story_read_aheads_total counter\n"
                 "tollgate_story_read_aheads_total {}\n"
                 "# HELP tollgate_story_read_ahead_errors_total Those reads that failed.\n"
                 "# TYPE tollgate_story_read_ahead_errors_total counter\n"
                 "tollgate_story_read_ahead_errors_total {}\n",
                 reads, errors);
}

namespace {

// Single writer per row: a relaxed load+store is enough and avoids a locked instruction.
inline void add(std::atomic<uint64_t>& v, uint64_t n) noexcept {
  v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace

request_metrics::request_metrics(int cores, std::vector<std::string_view> tool_names)
    : cores_(cores), tools_(std::move(tool_names)), rows_(new row[static_cast<size_t>(cores)]) {
  if (tools_.size() > max_tools) {
    tools_.resize(max_tools);
  }
  for (int c = 0; c < cores; ++c) {
    row& w = rows_[static_cast<size_t>(c)];
    for (auto& per_route : w.outcomes) {
      for (auto& v : per_route) {
        v.store(0, std::memory_order_relaxed);
      }
    }
    for (auto& per_route : w.hist) {
      for (auto& per_tool : per_route) {
        for (auto& v : per_tool) {
          v.store(0, std::memory_order_relaxed);
        }
      }
    }
    for (auto& per_route : w.sum_ns) {
      for (auto& v : per_route) {
        v.store(0, std::memory_order_relaxed);
      }
    }
    for (plan_slot& p : w.plans) {
      p.len = 0;
      p.billed.store(0, std::memory_order_relaxed);
      p.overage.store(0, std::memory_order_relaxed);
    }
    std::memcpy(w.plans[max_plans].name, "other", 5);
    w.plans[max_plans].len = 5;
    w.plans_used.store(0, std::memory_order_relaxed);
    w.log_lines.store(0, std::memory_order_relaxed);
    w.log_dropped.store(0, std::memory_order_relaxed);
  }
}

void request_metrics::observe(int core, route r, size_t tool_slot, outcome o,
                              int64_t latency_ns) noexcept {
  row& w = rows_[static_cast<size_t>(core)];
  const auto ri = static_cast<size_t>(r);
  add(w.outcomes[ri][static_cast<size_t>(o)], 1);
  if (tool_slot >= tool_slots) {
    tool_slot = 0;
  }
  if (latency_ns < 0) {
    latency_ns = 0;
  }
  size_t b = 0;
  while (b < latency_bounds_ns.size() && latency_ns > latency_bounds_ns[b]) {
    ++b;
  }
  add(w.hist[ri][tool_slot][b], 1);
  add(w.sum_ns[ri][tool_slot], static_cast<uint64_t>(latency_ns));
}

void request_metrics::bill(int core, std::string_view plan, uint64_t billed,
                           uint64_t overage) noexcept {
  row& w = rows_[static_cast<size_t>(core)];
  const uint32_t used = w.plans_used.load(std::memory_order_relaxed);  // this core wrote it
  plan_slot* slot = nullptr;
  for (uint32_t i = 0; i < used; ++i) {
    if (std::string_view(w.plans[i].name, w.plans[i].len) == plan) {
      slot = &w.plans[i];
      break;
    }
  }
  if (slot == nullptr) {
    if (used < max_plans && plan.size() <= sizeof(slot->name)) {
      slot = &w.plans[used];
      std::memcpy(slot->name, plan.data(), plan.size());
      slot->len = static_cast<uint8_t>(plan.size());
      // Release: a scraper that sees the new count sees the slot's name.
      w.plans_used.store(used + 1, std::memory_order_release);
    } else {
      slot = &w.plans[max_plans];
    }
  }
  add(slot->billed, billed);
  add(slot->overage, overage);
}

void request_metrics::log_written(int core, uint64_t lines) noexcept {
  add(rows_[static_cast<size_t>(core)].log_lines, lines);
}

void request_metrics::log_dropped(int core, uint64_t lines) noexcept {
  add(rows_[static_cast<size_t>(core)].log_dropped, lines);
}

template <class Field>
uint64_t request_metrics::sum(Field field) const {
  uint64_t n = 0;
  for (int c = 0; c < cores_; ++c) {
    n += field(rows_[static_cast<size_t>(c)]).load(std::memory_order_relaxed);
  }
  return n;
}

void request_metrics::render_answers(out_buffer& out) const {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP tollgate_answers_total Requests answered, by route and outcome (the error "
                 "model's codes: ok, invalid_key, rate_limited, quota_exceeded, suspended, "
                 "unavailable, not_found, invalid_argument, ...).\n"
                 "# TYPE tollgate_answers_total counter\n");
  for (size_t r = 0; r < routes; ++r) {
    for (size_t o = 0; o < num_outcomes; ++o) {
      const uint64_t n = sum([&](const row& w) -> const auto& { return w.outcomes[r][o]; });
      if (n != 0) {
        fmt::format_to(it, "tollgate_answers_total{{route=\"{}\",outcome=\"{}\"}} {}\n",
                       route_name(static_cast<route>(r)), name_of(static_cast<outcome>(o)), n);
      }
    }
  }
}

void request_metrics::render_durations(out_buffer& out) const {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP tollgate_request_duration_seconds Time from the event-loop pass that read "
                 "a request to the pass that queued its answer, by route and MCP tool.\n"
                 "# TYPE tollgate_request_duration_seconds histogram\n");
  for (size_t r = 0; r < routes; ++r) {
    for (size_t t = 0; t < tool_slots; ++t) {
      uint64_t counts[buckets];
      uint64_t total = 0;
      for (size_t b = 0; b < buckets; ++b) {
        counts[b] = sum([&](const row& w) -> const auto& { return w.hist[r][t][b]; });
        total += counts[b];
      }
      if (total == 0) {
        continue;
      }
      const std::string_view rn = route_name(static_cast<route>(r));
      const std::string_view tn = t == 0 || t > tools_.size() ? std::string_view() : tools_[t - 1];
      uint64_t cum = 0;
      for (size_t b = 0; b < buckets; ++b) {
        cum += counts[b];
        if (b < latency_bounds_ns.size()) {
          fmt::format_to(it,
                         "tollgate_request_duration_seconds_bucket{{route=\"{}\",tool=\"{}\","
                         "le=\"{}\"}} {}\n",
                         rn, tn, static_cast<double>(latency_bounds_ns[b]) / 1e9, cum);
        } else {
          fmt::format_to(it,
                         "tollgate_request_duration_seconds_bucket{{route=\"{}\",tool=\"{}\","
                         "le=\"+Inf\"}} {}\n",
                         rn, tn, cum);
        }
      }
      const uint64_t ns = sum([&](const row& w) -> const auto& { return w.sum_ns[r][t]; });
      fmt::format_to(it,
                     "tollgate_request_duration_seconds_sum{{route=\"{}\",tool=\"{}\"}} {}\n"
                     "tollgate_request_duration_seconds_count{{route=\"{}\",tool=\"{}\"}} {}\n",
                     rn, tn, static_cast<double>(ns) / 1e9, rn, tn, total);
    }
  }
}

void request_metrics::render_plans(out_buffer& out) const {
  std::map<std::string, std::pair<uint64_t, uint64_t>> plans;  // billed, overage
  for (int c = 0; c < cores_; ++c) {
    const row& w = rows_[static_cast<size_t>(c)];
    const uint32_t used = w.plans_used.load(std::memory_order_acquire);
    auto take = [&](const plan_slot& p) {
      auto& v = plans[std::string(p.name, p.len)];
      v.first += p.billed.load(std::memory_order_relaxed);
      v.second += p.overage.load(std::memory_order_relaxed);
    };
    for (uint32_t i = 0; i < used; ++i) {
      take(w.plans[i]);
    }
    if (w.plans[max_plans].billed.load(std::memory_order_relaxed) != 0) {
      take(w.plans[max_plans]);
    }
  }
  struct series {
    std::string_view name;
    std::string_view help;
    uint64_t std::pair<uint64_t, uint64_t>::*figure;
  };
  constexpr series by_plan[] = {
      {"tollgate_billed_calls_total",
       "Calls billed (successful search_stories and get_story calls, REST searches and story "
       "reads), by plan.",
       &std::pair<uint64_t, uint64_t>::first},
      {"tollgate_overage_calls_total",
       "Billed calls past the monthly quota (plans with overage = \"bill\"), by plan.",
       &std::pair<uint64_t, uint64_t>::second},
  };
  auto it = std::back_inserter(out);
  for (const series& m : by_plan) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} counter\n", m.name, m.help, m.name);
    for (const auto& [name, v] : plans) {
      fmt::format_to(it, "{}{{plan=\"{}\"}} {}\n", m.name, name, v.*m.figure);
    }
  }
}

void request_metrics::render(out_buffer& out) const {
  render_answers(out);
  render_durations(out);
  render_plans(out);
  fmt::format_to(std::back_inserter(out),
                 "# HELP tollgate_access_log_lines_total Access-log lines written.\n"
                 "# TYPE tollgate_access_log_lines_total counter\n"
                 "tollgate_access_log_lines_total {}\n"
                 "# HELP tollgate_access_log_dropped_lines_total Access-log lines dropped because "
                 "they could not be written (disk full, I/O error) or the core's buffer was "
                 "full.\n"
                 "# TYPE tollgate_access_log_dropped_lines_total counter\n"
                 "tollgate_access_log_dropped_lines_total {}\n",
                 sum([](const row& w) -> const auto& { return w.log_lines; }),
                 sum([](const row& w) -> const auto& { return w.log_dropped; }));
}

}  // namespace tollgate::app
