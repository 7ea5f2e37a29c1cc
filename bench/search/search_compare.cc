// search_compare: the tollgate side of perf/search/fts5-compare. Loads a JSON Lines corpus,
// runs a query file through backend::search_stories (limit 10, nested rendering, one core) and
// prints, for the comparison script:
//   R <index> <total> <id>,<id>,...        top-10 ids of each query (first round)
//   T <class> <qps> <p50_us> <p99_us>      per class: median round throughput and latency, in
//                                          thread CPU time (on a shared machine, wall time
//                                          measures the other jobs as much as the query)
//   B <stories> <build_s>                  load + index time
//   Q <index> <us>                          per query: median latency over the rounds
// Query file: one query per line, "<class>\t<query>" or "<class>\t<query>\t<params>", params
// being the REST parameters besides q (sort, since, until, tags, offset, limit), e.g.
// "sort=date&since=2021-03-01T00:00:00Z&offset=1000".
//
// Usage: search_compare CORPUS.jsonl QUERIES.tsv [ROUNDS] [--indexed]
// --indexed: serve from the corpus' index file, mapped, as `tollgate serve` does (built and
// written beside the corpus when missing or stale); without it, from the shards built in memory.
//        search_compare corpus generate --count N [--seed S]   (same as `tollgate corpus ...`)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/index_file.h"
#include "tollgate/search/query.h"

namespace {

using clock_type = std::chrono::steady_clock;

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

}  // namespace

// Over 80 lines on purpose: the steps of one comparison run (load, warm up, time) in order.
int main(int argc, char** argv) {
  using namespace tollgate;
  using namespace tollgate::search;
  if (argc >= 2 && std::string_view(argv[1]) == "corpus") {
    return run_corpus_command(argc - 1, argv + 1);
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: search_compare CORPUS.jsonl QUERIES.tsv [ROUNDS] [--indexed]\n");
    return 2;
  }
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  const bool indexed = argc > 4 && std::string_view(argv[4]) == "--indexed";
  std::vector<std::string> classes, queries, params;
  {
    std::ifstream f(argv[2]);
    std::string line;
    while (std::getline(f, line)) {
      size_t tab = line.find('\t');
      if (tab == std::string::npos) {
        continue;
      }
      classes.push_back(line.substr(0, tab));
      const size_t tab2 = line.find('\t', tab + 1);
      queries.push_back(line.substr(tab + 1, tab2 == std::string::npos ? tab2 : tab2 - tab - 1));
      params.push_back(tab2 == std::string::npos ? "" : line.substr(tab2 + 1));
    }
  }
  // Each query's arguments, parsed once (the parsers hold the decoded tags the args view).
  std::vector<query_args> args(queries.size());
  std::vector<std::unique_ptr<query_string_parser>> parsers;
  for (size_t i = 0; i < queries.size(); ++i) {
    parsers.push_back(std::make_unique<query_string_parser>());
    const std::string qs = params[i].empty() ? "q=x" : "q=x&" + params[i];
    if (auto pr = parsers.back()->parse(qs, args[i]); !pr) {
      std::fprintf(stderr, "query %zu: bad parameters %s: %.*s\n", i, params[i].c_str(),
                   static_cast<int>(pr.error().argument.size()), pr.error().argument.data());
      return 2;
    }
    args[i].query = queries[i];
  }
  auto t0 = clock_type::now();
  load_options o;
  o.shards = 4;
  load_report rep;
  index_use use;
  auto r = indexed ? load_indexed(argv[1], index_paths(argv[1], ""), o, rep, use)
                   : load_jsonl_file(argv[1], o, rep);
  if (!r) {
    std::fprintf(stderr, "load failed: line %lu: %s\n", static_cast<unsigned long>(r.error().line),
                 r.error().reason.c_str());
    return 1;
  }
  double build_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  auto& b = **r;
  std::printf("B %lu %.3f\n", static_cast<unsigned long>(b.story_count()), build_s);
  auto s = b.make_scratch();
  out_buffer out(1 << 16);
  // Top-10 ids, and warm-up.
  for (size_t i = 0; i < queries.size(); ++i) {
    auto res = b.search(args[i], *s);
    if (!res) {
      std::printf("R %zu 0 \n", i);
      continue;
    }
    std::printf("R %zu %lu ", i, static_cast<unsigned long>(res->total));
    for (size_t j = 0; j < res->stories.size(); ++j) {
      std::printf("%s%.*s", j ? "," : "", static_cast<int>(res->stories[j].id.size()),
                  res->stories[j].id.data());
    }
    std::printf("\n");
  }
  // Per class: `rounds` rounds over its queries, each timed query = search + render.
  std::vector<std::vector<double>> per_query(queries.size());
  std::map<std::string, std::vector<size_t>> by_class;
  for (size_t i = 0; i < queries.size(); ++i) {
    by_class[classes[i]].push_back(i);
  }
  for (const auto& [cls, idx] : by_class) {
    std::vector<double> qps, lat;
    for (int round = 0; round < rounds; ++round) {
      double rs = thread_cpu_us();
      for (size_t i : idx) {
        double q0 = thread_cpu_us();
        out.clear();
        (void)b.search_stories(args[i], *s, out, true);
        lat.push_back(thread_cpu_us() - q0);
        per_query[i].push_back(lat.back());
      }
      qps.push_back(static_cast<double>(idx.size()) * 1e6 / (thread_cpu_us() - rs));
    }
    std::sort(qps.begin(), qps.end());
    std::sort(lat.begin(), lat.end());
    std::printf("T %s %.1f %.1f %.1f\n", cls.c_str(), qps[qps.size() / 2], lat[lat.size() / 2],
                lat[std::min(lat.size() - 1, lat.size() * 99 / 100)]);
  }
  for (size_t i = 0; i < queries.size(); ++i) {
    std::vector<double>& l = per_query[i];
    if (!l.empty()) {
      std::sort(l.begin(), l.end());
      std::printf("Q %zu %.1f\n", i, l[l.size() / 2]);
    }
  }
  return 0;
}
