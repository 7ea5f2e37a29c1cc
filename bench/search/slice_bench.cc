// slice_bench: the total work of a search run in small slices against the same search run whole
// (issue 33, "resumable evaluation": a search that yields keeps its cursors, heaps and counts,
// so slicing it must cost next to nothing).
//
// For each query class (one term, two and three terms, phrases, filters, date order, deep
// pages), every query of the class is run, side by side in each iteration: whole
// (backend::search, as an unsliced server runs it) and as a search_job in slices of
// TOLLGATE_BENCH_SLICE postings (default 512; backend::start + backend::run until done). Each
// side's thread CPU time is summed over the class; the counters are the per-query means and the
// ratio sliced / whole. Before the timed loop every sliced answer is rendered and compared with
// the whole one byte for byte (SkipWithError on a difference), and the longest slice of the
// class is timed (longest_slice_us: what runs whole inside a slice shows there).
//
// Corpus: TOLLGATE_BENCH_STORIES generated stories (default 200,000), 4 shards.
//   build/release/bench/search/slice_bench --benchmark_repetitions=10
//     --benchmark_report_aggregates_only=true   (one command line)
// and compare the medians of `whole_us` and `sliced_us` (and of `ratio`).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "support/alloc_counter.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {
namespace {

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

uint64_t env_or(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : dflt;
}

// A query with its arguments' storage (query_args holds views).
struct bench_query {
  explicit bench_query(std::string q) : text(std::move(q)) {}
  std::string text;
  std::vector<std::string> tags;
  int64_t since = query_args{}.since;
  int64_t until = query_args{}.until;
  sort_order sort = sort_order::relevance;
  uint32_t offset = 0;

  query_args args() const {
    query_args a;
    a.query = text;
    a.sort = sort;
    a.offset = offset;
    a.limit = 10;
    a.since = since;
    a.until = until;
    for (const std::string& t : tags) {
      a.add_tag(t);
    }
    return a;
  }
};

enum query_class { one_term, two_terms, three_terms, phrases, filters, by_date, deep, classes };

struct world {
  std::unique_ptr<backend> b;
  std::vector<bench_query> queries[classes];
  uint64_t stories = 0;

  world() {
    stories = env_or("TOLLGATE_BENCH_STORIES", 200000);
    std::string data;
    data.reserve(stories * 1000);
    generate_corpus(stories, 1, [&data](std::string_view c) { data += c; });
    // Title words of every (n/40)-th story make the drawn queries: frequencies follow the corpus.
    const size_t step = std::max<uint64_t>(1, stories / 40);
    size_t at = 0;
    for (uint64_t i = 0; at < data.size(); ++i) {
      const size_t nl = data.find('\n', at);
      if (i % step == 0) {
        std::string_view line(data.data() + at, nl - at);
        const size_t t = line.find("\"title\":\"") + 9;
        std::string_view title = line.substr(t, line.find('"', t) - t);
        std::vector<std::string> w;
        token_stream ts(title);
        std::string_view tok;
        while (ts.next(tok)) {
          w.emplace_back(tok);
        }
        if (w.size() >= 3) {
          const size_t k = i / step;
          const size_t s = w.size() > 3 ? k % (w.size() - 3) : 0;
          add(one_term, w[s]);
          add(two_terms, w[s] + " " + w[s + 1]);
          add(three_terms, w[s] + " " + w[s + 1] + " " + w[s + 2]);
          add(phrases, "\"" + w[s] + " " + w[s + 1] + "\"");
          bench_query f{w[s]};
          f.since = 1546300800 + static_cast<int64_t>(k % 5) * 365 * 86400;
          f.until = f.since + 365 * 86400;
          queries[filters].push_back(f);
          f = bench_query{w[s] + " " + w[s + 1]};
          f.tags = {k % 2 == 0 ? "programming" : "linux"};
          queries[filters].push_back(f);
          bench_query d{w[s]};
          d.sort = sort_order::date;
          queries[by_date].push_back(d);
          bench_query p{w[s]};
          p.offset = 1000;
          queries[deep].push_back(p);
        }
      }
      at = nl + 1;
    }
    // and the heavy ones: the commonest words, alone and together, as phrases (http-1m.sh's
    // heavy class), filtered, by date, deep
    for (const char* q : {"the", "a", "of"}) {
      add(one_term, q);
    }
    for (const char* q : {"of the", "the a", "a new"}) {
      add(two_terms, q);
    }
    for (const char* q : {"of the a", "the a new", "new the a"}) {
      add(three_terms, q);
    }
    for (const char* q :
         {"\"of the a\"", "\"the a the\"", "new \"the a\"", "\"of the\" \"the a\""}) {
      add(phrases, q);
    }
    bench_query f{"the a"};
    f.since = 1546300800 + 2 * 365 * 86400;
    f.until = f.since + 2 * 365 * 86400;
    queries[filters].push_back(f);
    f = bench_query{"of the"};
    f.tags = {"rust"};
    queries[filters].push_back(f);
    for (const char* q : {"the a", "of", "new the"}) {
      bench_query d{q};
      d.sort = sort_order::date;
      queries[by_date].push_back(d);
      bench_query p{q};
      p.offset = 1000;
      queries[deep].push_back(p);
    }
    load_options o;
    o.shards = 4;
    o.skip_bad_lines = false;
    load_report rep;
    auto r = load_jsonl(data, o, rep);
    if (!r) {
      std::fprintf(stderr, "load failed: line %lu: %s\n",
                   static_cast<unsigned long>(r.error().line), r.error().reason.c_str());
      std::abort();
    }
    b = std::move(*r);
  }

  void add(query_class c, std::string q) { queries[c].push_back(bench_query{std::move(q)}); }
};

world& get_world() {
  static world w;
  return w;
}

void render(const backend& b, const result<search_result, errc>& r, out_buffer& out) {
  out.clear();
  if (!r) {
    out.append("error");
    return;
  }
  json_out j(out, false);
  b.render(*r, j);
}

void BM_sliced_vs_whole(benchmark::State& state, query_class c) {
  world& w = get_world();
  const backend& b = *w.b;
  const uint64_t budget = env_or("TOLLGATE_BENCH_SLICE", 512);
  auto s = b.make_scratch();
  search_job job(b);
  const std::vector<bench_query>& qs = w.queries[c];
  std::vector<query_args> args;
  for (const bench_query& q : qs) {
    args.push_back(q.args());
  }
  // verification (and warm-up): the sliced answer is the whole one, byte for byte
  out_buffer want(1 << 16), got(1 << 16);
  // ... and the longest slice of the class (thread CPU): what a light call may wait behind
  // (and of those, the longest first and last slices of a query: a search's start and end)
  uint64_t slices = 0;
  double longest_us = 0, longest_first_us = 0, longest_last_us = 0;
  for (const query_args& a : args) {
    render(b, b.search(a, *s), want);
    b.start(a, job);
    bool done = false;
    for (uint64_t i = 0; !done; ++i) {
      const double t0 = thread_cpu_us();
      done = b.run(job, budget);
      const double us = thread_cpu_us() - t0;
      longest_us = std::max(longest_us, us);
      longest_first_us = std::max(longest_first_us, i == 0 ? us : 0.0);
      longest_last_us = std::max(longest_last_us, done ? us : 0.0);
      ++slices;
    }
    render(b, job.outcome(), got);
    if (got.view() != want.view()) {
      state.SkipWithError(("sliced answer differs: " + std::string(a.query)).c_str());
      return;
    }
  }
  // Each side runs over the whole class in turn (so that every query meets the caches as the
  // previous query of its own side left them), the side that goes first alternating.
  double whole_us = 0, sliced_us = 0;
  uint64_t n = 0, allocs = 0, iteration = 0;
  auto whole = [&] {
    const double t0 = thread_cpu_us();
    for (const query_args& a : args) {
      benchmark::DoNotOptimize(b.search(a, *s).has_value());
    }
    whole_us += thread_cpu_us() - t0;
  };
  auto sliced = [&] {
    const double t0 = thread_cpu_us();
    for (const query_args& a : args) {
      b.start(a, job);
      while (!b.run(job, budget)) {
      }
      benchmark::DoNotOptimize(job.outcome().has_value());
    }
    sliced_us += thread_cpu_us() - t0;
  };
  for (auto _ : state) {
    test::alloc_scope scope;
    if (iteration++ % 2 == 0) {
      whole();
      sliced();
    } else {
      sliced();
      whole();
    }
    allocs += scope.count();
    n += args.size();
  }
  const double nq = static_cast<double>(n);
  state.counters["whole_us"] = whole_us / nq;
  state.counters["sliced_us"] = sliced_us / nq;
  state.counters["ratio"] = whole_us > 0 ? sliced_us / whole_us : 0;
  state.counters["slices_per_query"] = static_cast<double>(slices) / static_cast<double>(qs.size());
  state.counters["queries"] = static_cast<double>(qs.size());
  state.counters["longest_slice_us"] = longest_us;
  state.counters["longest_first_us"] = longest_first_us;
  state.counters["longest_last_us"] = longest_last_us;
  state.counters["allocs_per_op"] = static_cast<double>(allocs) / nq;
  state.SetItemsProcessed(static_cast<int64_t>(n));
}

BENCHMARK_CAPTURE(BM_sliced_vs_whole, one_term, one_term)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_sliced_vs_whole, two_terms, two_terms)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_sliced_vs_whole, three_terms, three_terms)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_sliced_vs_whole, phrases, phrases)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_sliced_vs_whole, filters, filters)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_sliced_vs_whole, by_date, by_date)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_sliced_vs_whole, deep, deep)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tollgate::search

BENCHMARK_MAIN();
