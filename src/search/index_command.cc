// `tollgate index build`: writes a corpus' index file ahead of time (a deploy pipeline), so the
// servers that start on it map it instead of building it.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tollgate/common/progress.h"
#include "tollgate/search/index_file.h"

namespace tollgate::search {

namespace {

constexpr std::string_view index_usage =
    "usage: tollgate index build --corpus FILE.jsonl [--out FILE] [--shards N]\n"
    "\n"
    "Builds the index of a JSON Lines corpus and writes it atomically. `tollgate serve` and\n"
    "`stdio` map it at start when it lies beside the corpus (FILE.jsonl.tollgate-index) and\n"
    "matches it: the same corpus bytes, size and mtime (copy the corpus with its mtime, e.g.\n"
    "cp -p or rsync -t), and the same corpus.shards. Bad lines are skipped and reported.\n"
    "\n"
    "  --corpus FILE   the stories, JSON Lines (required)\n"
    "  --out FILE      where to write (default: FILE.jsonl.tollgate-index beside the corpus)\n"
    "  --shards N      in-process shards, as corpus.shards of the servers (1-256, default 4)\n"
    "  --help          this text\n";

constexpr std::string_view index_flags[] = {"--corpus", "--out", "--shards", "--help"};

int usage_error(std::string_view msg) {
  fmt::print(stderr, "tollgate index: {}\n{}", msg, index_usage);
  return 2;
}

}  // namespace

std::span<const std::string_view> index_build_flags() { return index_flags; }
std::string_view index_usage_text() { return index_usage; }

int run_index_command(int argc, char** argv) {
  int i = 1;
  if (i < argc && (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h")) {
    std::fwrite(index_usage.data(), 1, index_usage.size(), stdout);
    return 0;
  }
  if (i >= argc) {
    return usage_error("missing subcommand (expected \"build\")");
  }
  if (std::string_view(argv[i]) != "build") {
    return usage_error(fmt::format("unknown subcommand \"{}\" (expected \"build\")", argv[i]));
  }
  std::string corpus, out;
  uint32_t shards = 4;
  for (++i; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fwrite(index_usage.data(), 1, index_usage.size(), stdout);
      return 0;
    }
    if (std::find(std::begin(index_flags), std::end(index_flags), a) == std::end(index_flags)) {
      return usage_error(fmt::format("unknown option \"{}\"", a));
    }
    if (i + 1 >= argc || std::string_view(argv[i + 1]).empty()) {
      return usage_error(fmt::format("{} needs a value", a));
    }
    const std::string v = argv[++i];
    if (a == "--corpus") {
      corpus = v;
    } else if (a == "--out") {
      out = v;
    } else {
      const bool digits = v.size() <= 3 && std::all_of(v.begin(), v.end(),
                                                       [](char c) { return c >= '0' && c <= '9'; });
      shards = digits ? static_cast<uint32_t>(std::stoul(v)) : 0;
      if (shards < 1 || shards > 256) {
        return usage_error(
            fmt::format("--shards: '{}' is not a whole number between 1 and 256", v));
      }
    }
  }
  if (corpus.empty()) {
    return usage_error("--corpus FILE is required");
  }
  if (out.empty()) {
    out = index_paths(corpus, "").front();
  }
  load_options opts;
  opts.shards = shards;
  std::atomic<uint64_t> stories{0}, bytes{0}, steps{0};
  opts.stories_parsed = &stories;
  opts.bytes_parsed = &bytes;
  opts.build_steps = &steps;
  std::error_code ec;
  const auto size = std::filesystem::file_size(corpus, ec);
  const auto t0 = std::chrono::steady_clock::now();
  load_report report;
  index_parts parts;
  auto r = [&] {
    const uint64_t whole = ec ? 0 : static_cast<uint64_t>(size);
    progress_watch progress("indexing " + corpus, "stories", stories,
                            [&opts, whole] { return build_share(opts, whole); });
    return build_index_file(corpus, out, opts, report, &parts);
  }();
  for (const load_issue& issue : report.issues) {
    fmt::print(stderr, "tollgate index: {}:{}: {}\n", corpus, issue.line, issue.reason);
  }
  if (!r) {
    if (r.error().line > 0) {
      fmt::print(stderr, "tollgate index: {}:{}: {}\n", corpus, r.error().line, r.error().reason);
    } else {
      fmt::print(stderr, "tollgate index: {}\n", r.error().reason);
    }
    return 1;
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  fmt::print(stderr, "tollgate index: wrote {} ({} stories, {} skipped, {} shards) in {} ms\n", out,
             report.loaded, report.skipped, shards, ms);
  fmt::print(stderr, "tollgate index: {}\n", parts.per_story(report.loaded));
  return 0;
}

}  // namespace tollgate::search
