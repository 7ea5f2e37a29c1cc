// search benchmarks: index build time and memory on a generated corpus, then one-core latency
// (p50/p99) of 1-, 2- and 3-term and phrase queries, search + render (limit 10, nested).
//
// Corpus size: TOLLGATE_BENCH_STORIES (default 1,000,000). Queries are drawn from the titles of
// stories spread over the corpus, so every one has matches and frequencies follow the corpus.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "search/local_shard.h"
#include "support/alloc_counter.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {
namespace {

uint64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// CPU time of the calling thread: per-query figures that contention on a shared machine does
// not inflate the way wall-clock time is inflated.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

double secs_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct world {
  std::unique_ptr<backend> b;
  std::string data;                     // the corpus
  std::unique_ptr<backend> from_file;   // corpus_backend()
  std::vector<std::string> queries[4];  // 1, 2, 3 terms, phrase
  uint64_t stories = 0;
  double gen_s = 0, build_s = 0, build_cpu_s = 0;
  uint64_t rss_index = 0;

  world() {
    const char* env = std::getenv("TOLLGATE_BENCH_STORIES");
    stories = env ? std::strtoull(env, nullptr, 10) : 1000000;
    auto t0 = std::chrono::steady_clock::now();
    data.reserve(stories * 1000);
    generate_corpus(stories, 1, [this](std::string_view c) { data += c; });
    gen_s = secs_since(t0);
    // Queries from titles of every (n/200)-th story.
    size_t step = std::max<uint64_t>(1, stories / 200);
    size_t line_start = 0;
    for (uint64_t i = 0; line_start < data.size(); ++i) {
      size_t nl = data.find('\n', line_start);
      if (i % step == 0) {
        std::string_view line(data.data() + line_start, nl - line_start);
        size_t t = line.find("\"title\":\"") + 9;
        std::string_view title = line.substr(t, line.find('"', t) - t);
        std::vector<std::string> toks;
        token_stream ts(title);
        std::string_view tok;
        while (ts.next(tok)) {
          toks.emplace_back(tok);
        }
        size_t k = i / step;
        size_t s = toks.size() > 3 ? k % (toks.size() - 3) : 0;
        if (toks.size() >= 3) {
          queries[0].push_back(toks[s]);
          queries[1].push_back(toks[s] + " " + toks[s + 1]);
          queries[2].push_back(toks[s] + " " + toks[s + 1] + " " + toks[s + 2]);
          queries[3].push_back("\"" + toks[s] + " " + toks[s + 1] + "\"");
        }
      }
      line_start = nl + 1;
    }
    uint64_t rss0 = rss_bytes();
    auto t1 = std::chrono::steady_clock::now();
    std::clock_t c1 = std::clock();
    load_options o;
    o.shards = 4;
    o.skip_bad_lines = false;
    load_report rep;
    auto r = load_jsonl(data, o, rep);
    build_s = secs_since(t1);
    build_cpu_s = double(std::clock() - c1) / CLOCKS_PER_SEC;
    if (!r) {
      std::fprintf(stderr, "load failed: line %lu: %s\n",
                   static_cast<unsigned long>(r.error().line), r.error().reason.c_str());
      std::abort();
    }
    b = std::move(*r);
    rss_index = rss_bytes() - rss0;
    std::fprintf(stderr,
                 "corpus: %lu stories, %.1f MB JSONL; generate %.2f s; load+index %.2f s wall, "
                 "%.2f s CPU (all threads); RSS growth %.0f MB (%.0f bytes/story)\n",
                 static_cast<unsigned long>(stories), data.size() / 1e6, gen_s, build_s,
                 build_cpu_s, rss_index / 1e6, double(rss_index) / stories);
  }
};

world& get_world() {
  static world w;
  return w;
}

// The same corpus loaded from a file, as `serve --corpus` loads it: its shards leave the texts in
// the file (get_story reads and parses a story's line) where `b`'s, built from memory, pack
// them. The file is unlinked once loaded (the shards hold it open).
const backend& corpus_backend() {
  world& w = get_world();
  if (!w.from_file) {
    char path[] = "/tmp/tollgate-search-bench-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0 ||
        ::write(fd, w.data.data(), w.data.size()) != static_cast<ssize_t>(w.data.size())) {
      std::fprintf(stderr, "cannot write %s\n", path);
      std::abort();
    }
    ::close(fd);
    load_options o;
    o.shards = 4;
    o.skip_bad_lines = false;
    load_report rep;
    auto r = load_jsonl_file(path, o, rep);
    ::unlink(path);
    if (!r) {
      std::fprintf(stderr, "load of %s failed: %s\n", path, r.error().reason.c_str());
      std::abort();
    }
    w.from_file = std::move(*r);
  }
  return *w.from_file;
}

void run_queries(benchmark::State& state, int kind) {
  world& w = get_world();
  auto s = w.b->make_scratch();
  out_buffer out(1 << 16);
  const auto& qs = w.queries[kind];
  auto one = [&](const std::string& q) {
    query_args a;
    a.query = q;
    out.clear();
    auto r = w.b->search_stories(a, *s, out, true);
    return r.has_value();
  };
  for (const auto& q : qs) {  // warm-up and verification
    if (!one(q)) {
      state.SkipWithError("search failed");
      return;
    }
  }
  std::vector<double> lat, cpu;
  lat.reserve(1 << 20);
  cpu.reserve(1 << 20);
  uint64_t allocs = 0, n = 0;
  for (auto _ : state) {
    for (const auto& q : qs) {
      test::alloc_scope scope;
      auto t = std::chrono::steady_clock::now();
      double c0 = thread_cpu_us();
      benchmark::DoNotOptimize(one(q));
      double cus = thread_cpu_us() - c0;
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
      allocs += scope.count();
      if (lat.size() < lat.capacity()) {
        lat.push_back(us);
        cpu.push_back(cus);
      }
      ++n;
    }
  }
  std::sort(lat.begin(), lat.end());
  std::sort(cpu.begin(), cpu.end());
  state.counters["cpu_p50_us"] = cpu[cpu.size() / 2];
  state.counters["cpu_p99_us"] = cpu[cpu.size() * 99 / 100];
  state.counters["p50_us"] = lat[lat.size() / 2];
  state.counters["p99_us"] = lat[lat.size() * 99 / 100];
  state.counters["max_us"] = lat.back();
  state.counters["allocs_per_op"] = double(allocs) / double(n);
  state.counters["stories"] = double(w.stories);
  state.counters["build_s"] = w.build_s;
  state.counters["build_cpu_s"] = w.build_cpu_s;
  state.counters["bytes_per_story"] = double(w.rss_index) / double(w.stories);
  state.SetItemsProcessed(static_cast<int64_t>(n));
}

void BM_one_term(benchmark::State& s) { run_queries(s, 0); }
void BM_two_terms(benchmark::State& s) { run_queries(s, 1); }
void BM_three_terms(benchmark::State& s) { run_queries(s, 2); }
void BM_phrase(benchmark::State& s) { run_queries(s, 3); }
BENCHMARK(BM_one_term)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_two_terms)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_three_terms)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_phrase)->Unit(benchmark::kMicrosecond);

// get_story of the first 50 hits of "the", round robin, from `b`.
void get_stories(benchmark::State& state, const backend& b) {
  auto s = b.make_scratch();
  query_args a;
  a.query = "the";
  a.limit = 50;
  auto r = b.search(a, *s);
  if (!r || r->stories.empty()) {
    state.SkipWithError("no stories");
    return;
  }
  std::vector<std::string> ids;
  for (const hit& h : r->stories) {
    ids.emplace_back(h.id);
  }
  out_buffer out(1 << 16);
  size_t i = 0;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(b.get_story(ids[i++ % ids.size()], out, true).has_value());
  }
  state.SetItemsProcessed(state.iterations());
}

// Texts packed (a build from memory: zstd frames).
void BM_get_story(benchmark::State& state) { get_stories(state, *get_world().b); }
BENCHMARK(BM_get_story);

// Texts left in the corpus file (a build from a file, as `serve --corpus` does).
void BM_get_story_from_corpus(benchmark::State& state) { get_stories(state, corpus_backend()); }
BENCHMARK(BM_get_story_from_corpus);

}  // namespace
}  // namespace tollgate::search

BENCHMARK_MAIN();
