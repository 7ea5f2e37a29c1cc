// JSON Lines loading into in-process shards (simdjson DOM: every line is fully validated), the
// parallel seal of the shards, and the embedded sample.
#include <fcntl.h>
#include <fmt/format.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <unordered_set>

#include "search/corpus_text.h"
#include "search/index_file.h"
#include "search/local_shard.h"
#include "search/map_guard.h"
#include "search/shard_impl.h"
#include "tollgate/common/assert.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

constexpr size_t max_id_bytes = 256;

// The "id" field (a string, or a non-negative integer written into id_buf) into `id`; false
// with `reason` set.
bool parse_id(simdjson::dom::element v, char (&id_buf)[24], std::string_view& id,
              std::string& reason) {
  uint64_t num;
  if (v.is_string()) {
    if (v.get_string().get(id)) {
      reason = "field \"id\" must be a string";
      return false;
    }
  } else if (!v.get_uint64().get(num)) {
    auto end = fmt::format_to(id_buf, "{}", num);
    id = std::string_view(id_buf, static_cast<size_t>(end - id_buf));
  } else {
    reason = "field \"id\" must be a string or a non-negative integer";
    return false;
  }
  if (id.empty() || id.size() > max_id_bytes) {
    reason = "field \"id\" must be 1 to 256 bytes long";
    return false;
  }
  return true;
}

// The "tags" field into `tags` (duplicates dropped, the first kept); false with `reason` set.
bool parse_tags(simdjson::dom::element v, std::vector<std::string_view>& tags,
                std::string& reason) {
  simdjson::dom::array arr;
  if (v.get_array().get(arr)) {
    reason = "field \"tags\" must be an array of strings";
    return false;
  }
  tags.clear();
  // Duplicates are dropped, first one kept. A scan of the tags so far is fastest for the
  // handful a story has; past that a set, so a line of 100k tags costs 100k look-ups rather
  // than 5e9 comparisons (it held the start for 13 s).
  constexpr size_t scan_limit = 32;
  std::unordered_set<std::string_view> seen;
  for (simdjson::dom::element t : arr) {
    std::string_view tv;
    if (t.get_string().get(tv) || tv.empty()) {
      reason = "field \"tags\" must be an array of non-empty strings";
      return false;
    }
    if (tags.size() < scan_limit) {
      if (std::find(tags.begin(), tags.end(), tv) == tags.end()) {
        tags.push_back(tv);
      }
      continue;
    }
    if (seen.empty()) {
      seen.insert(tags.begin(), tags.end());
    }
    if (seen.insert(tv).second) {
      tags.push_back(tv);
    }
  }
  return true;
}

// Parses one line into `s`. Views point into the parser (valid until the next parse) or id_buf.
// simdjson reads up to SIMDJSON_PADDING bytes past the end of its input (their content does not
// matter): a line with that much of the text after it (before `readable_end`) is parsed in place,
// the last lines of the text are copied into `pad` first. (Long: one flat branch per field.)
bool parse_line(std::string_view line, const char* readable_end, simdjson::dom::parser& parser,
                std::vector<char>& pad, std::vector<std::string_view>& tags, char (&id_buf)[24],
                story_in& s, std::string& reason) {
  const char* in = line.data();
  if (static_cast<size_t>(readable_end - line.data()) < line.size() + simdjson::SIMDJSON_PADDING) {
    pad.resize(line.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(pad.data(), line.data(), line.size());
    in = pad.data();
  }
  simdjson::dom::element root;
  if (auto err = parser.parse(in, line.size(), false).get(root)) {
    reason = fmt::format("invalid JSON: {}", simdjson::error_message(err));
    return false;
  }
  simdjson::dom::object obj;
  if (root.get_object().get(obj)) {
    reason = "not a JSON object";
    return false;
  }
  s = story_in{};
  tags.clear();
  bool have_id = false, have_title = false, have_time = false;
  for (simdjson::dom::key_value_pair kv : obj) {
    std::string_view key = kv.key;
    simdjson::dom::element v = kv.value;
    auto want_string = [&](std::string_view& out) {
      if (v.get_string().get(out)) {
        reason = fmt::format("field \"{}\" must be a string", key);
        return false;
      }
      return true;
    };
    auto want_int = [&](int64_t& out) {
      if (v.get_int64().get(out)) {
        reason = fmt::format("field \"{}\" must be an integer", key);
        return false;
      }
      return true;
    };
    if (key == "id") {
      if (!parse_id(v, id_buf, s.id, reason)) {
        return false;
      }
      have_id = true;
    } else if (key == "title") {
      if (!want_string(s.title)) {
        return false;
      }
      have_title = true;
    } else if (key == "url") {
      if (!want_string(s.url)) {
        return false;
      }
    } else if (key == "by") {
      if (!want_string(s.by)) {
        return false;
      }
    } else if (key == "text") {
      if (!want_string(s.text)) {
        return false;
      }
    } else if (key == "time") {
      if (!want_int(s.time)) {
        return false;
      }
      have_time = true;
    } else if (key == "score") {
      if (!want_int(s.score)) {
        return false;
      }
    } else if (key == "comments") {
      if (!want_int(s.comments)) {
        return false;
      }
    } else if (key == "tags") {
      if (!parse_tags(v, tags, reason)) {
        return false;
      }
    }
    // other fields are ignored
  }
  if (!have_id || !have_title || !have_time) {
    reason = fmt::format("missing required field \"{}\"", !have_id      ? "id"
                                                          : !have_title ? "title"
                                                                        : "time");
    return false;
  }
  s.tags = tags;
  return true;
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Below this size a piece is not worth a thread.
constexpr size_t min_piece_bytes = 4096;

// What one parse thread produced from its piece of the text (line numbers relative to it).
struct piece_result {
  std::vector<std::unique_ptr<local_shard>> shards;
  uint64_t lines = 0, loaded = 0, skipped = 0;
  std::vector<load_issue> issues;  // the first max_issues; on failure, the failing line only
  bool failed = false;
};

void parse_piece(std::string_view data, const char* whole_begin, const char* readable_end,
                 const load_options& opts, uint32_t n, piece_result& pr) {
  simdjson::dom::parser parser;
  std::vector<char> pad;
  std::vector<std::string_view> tags;
  char id_buf[24];
  std::string reason;
  uint64_t line_no = 0;
  size_t at = 0;
  size_t reported_at = 0;  // progress: bytes and stories told so far
  uint64_t reported_loaded = 0;
  auto report_progress = [&] {
    if (opts.bytes_parsed != nullptr) {
      opts.bytes_parsed->fetch_add(std::min(at, data.size()) - reported_at,
                                   std::memory_order_relaxed);
    }
    if (opts.stories_parsed != nullptr) {
      opts.stories_parsed->fetch_add(pr.loaded - reported_loaded, std::memory_order_relaxed);
    }
    reported_at = std::min(at, data.size());
    reported_loaded = pr.loaded;
  };
  while (at < data.size()) {
    if (at - reported_at >= (size_t{1} << 20)) {
      report_progress();
    }
    size_t nl = data.find('\n', at);
    size_t end = nl == std::string_view::npos ? data.size() : nl;
    std::string_view line = data.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (blank(line)) {
      continue;
    }
    story_in s;
    if (!parse_line(line, readable_end, parser, pad, tags, id_buf, s, reason)) {
      if (!opts.skip_bad_lines) {
        pr.failed = true;
        pr.issues.assign(1, load_issue{line_no, reason});
        return;
      }
      ++pr.skipped;
      if (pr.issues.size() < opts.max_issues) {
        pr.issues.push_back({line_no, reason});
      }
      continue;
    }
    s.line_at = static_cast<uint64_t>(line.data() - whole_begin);
    s.line_len = line.size();
    pr.shards[shard_of(s.id, n)]->add(s, line_no);
    ++pr.loaded;
  }
  report_progress();
  pr.lines = line_no;
}

}  // namespace

namespace {

// Parse: the text is cut at line ends into pieces (pieces_per_thread per thread, each at least
// min_piece_bytes); a thread takes the next piece when done with one and parses it into shards
// of its own, with line numbers relative to the piece. Pieces of equal bytes do not parse in
// equal time (a thread's first touches of fresh memory cost it more at times): with one piece
// per thread, one thread stood idle up to 0.9 s of a 1.5 s parse while the other finished; with
// four, the last piece (~0.3 s at 1M) still ran alone. The pieces' join is cheap (~0.02 s).
constexpr size_t pieces_per_thread = 8;

std::vector<piece_result> parse_pieces(std::string_view data, const load_options& opts, uint32_t n,
                                       uint32_t threads) {
  const size_t per_thread = threads > 1 ? pieces_per_thread : 1;
  size_t pieces =
      std::max<size_t>(1, std::min<size_t>(threads * per_thread, data.size() / min_piece_bytes));
  std::vector<std::string_view> piece_text;
  for (size_t at = 0, k = 0; at < data.size(); ++k) {
    size_t end = k + 1 == pieces ? data.size() : data.size() * (k + 1) / pieces;
    if (end < at) {
      end = at;
    }
    if (end < data.size()) {
      size_t nl = data.find('\n', end == 0 ? 0 : end - 1);
      end = nl == std::string_view::npos ? data.size() : nl + 1;
    }
    piece_text.push_back(data.substr(at, end - at));
    at = end;
  }
  std::vector<piece_result> parsed(piece_text.size());
  std::atomic<size_t> next{0};
  auto parse_work = [&] {
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < parsed.size();) {
      piece_result& pr = parsed[k];
      for (uint32_t i = 0; i < n; ++i) {
        pr.shards.push_back(std::make_unique<local_shard>());
      }
      parse_piece(piece_text[k], data.data(), data.data() + data.size(), opts, n, pr);
    }
  };
  const size_t workers = std::min<size_t>(threads, parsed.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < workers; ++t) {
    pool.emplace_back(parse_work);
  }
  parse_work();
  for (std::thread& th : pool) {
    th.join();
  }
  return parsed;
}

// The pieces' shards absorbed in piece order (line numbers made absolute), their counts and
// issues added to the report; the first failing line when a piece failed.
result<std::vector<std::unique_ptr<local_shard>>, load_issue> join_pieces(
    std::vector<piece_result>& parsed, const load_options& opts, uint32_t n, load_report& report) {
  std::vector<std::unique_ptr<local_shard>> shards;
  uint64_t line_base = 0;
  for (piece_result& pr : parsed) {
    if (pr.failed) {
      return unexpected(load_issue{line_base + pr.issues.front().line, pr.issues.front().reason});
    }
    report.loaded += pr.loaded;
    report.skipped += pr.skipped;
    for (load_issue& issue : pr.issues) {
      if (report.issues.size() < opts.max_issues) {
        report.issues.push_back({line_base + issue.line, std::move(issue.reason)});
      }
    }
    if (shards.empty()) {
      shards = std::move(pr.shards);
    } else {
      for (uint32_t i = 0; i < n; ++i) {
        shards[i]->absorb(std::move(*pr.shards[i]), line_base);
      }
      pr.shards.clear();
    }
    line_base += pr.lines;
  }
  if (shards.empty()) {
    for (uint32_t i = 0; i < n; ++i) {
      shards.push_back(std::make_unique<local_shard>());
    }
  }
  return shards;
}

// Seal (sort, dedupe, index) the shards in parallel, then finalize them with the average length
// of them all; the duplicate ids found, by line. A thread takes the next shard to seal when it is
// done with one; once none is left, it finalizes every sealed shard no thread has taken yet,
// as soon as every shard is tokenized (the average is known then, while the last seals lay out
// their postings): a core that is done sealing does not stand idle beside the last seal. The
// thread that seals the last shard finalizes it (and any other left).
std::vector<load_issue> seal_all(
    std::vector<std::unique_ptr<local_shard>>& shards, uint32_t n, uint32_t threads,
    std::atomic<uint64_t>* steps, const std::function<void(uint32_t, const local_shard&)>& sealed,
    const std::function<void(uint32_t, const local_shard&)>& finalized) {
  std::vector<std::vector<load_issue>> dups(n);
  threads = std::min(threads, n);
  std::atomic<uint32_t> next_seal{0};
  std::atomic<uint32_t> counted{0};     // shards whose stats() are final
  std::atomic<uint32_t> seals_done{0};  // shards sealed
  enum : uint8_t { unsealed, ready, taken };
  std::unique_ptr<std::atomic<uint8_t>[]> state(new std::atomic<uint8_t>[n]);
  for (uint32_t i = 0; i < n; ++i) {
    state[i].store(unsealed, std::memory_order_relaxed);
  }
  auto work = [&]() {
    out_buffer records;  // one per thread: its pages are faulted in once, not per shard
    for (uint32_t i; (i = next_seal.fetch_add(1, std::memory_order_relaxed)) < n;) {
      shards[i]->seal(dups[i], &records, steps, &counted);
      if (sealed) {
        sealed(i, *shards[i]);
      }
      state[i].store(ready, std::memory_order_release);
      if (seals_done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
        // No seal is left to take the story arenas' pages: freed before any finalize
        // allocates, so that its tables reuse them (mimalloc keeps them during a build)
        // instead of faulting fresh memory in (+2-4 s of CPU at 1M on one core when freed
        // after the finalizes).
        detail::drop_spare_build_pages();
      }
    }
    records = out_buffer();  // not held through the finalizes
    for (uint32_t c; (c = counted.load(std::memory_order_acquire)) < n;) {
      counted.wait(c, std::memory_order_acquire);
    }
    shard_stats global;
    for (uint32_t i = 0; i < n; ++i) {
      global += shards[i]->stats();
    }
    for (uint32_t i = 0; i < n; ++i) {
      uint8_t was = ready;
      if (state[i].compare_exchange_strong(was, taken, std::memory_order_acquire)) {
        shards[i]->finalize(global);
        if (steps != nullptr) {
          steps->fetch_add(shards[i]->stats().docs * build_steps_ranked, std::memory_order_relaxed);
        }
        if (finalized) {
          finalized(i, *shards[i]);
        }
      }
    }
  };
  // The story arenas the seals gave back and no later seal took: freed (after the last seal, or
  // here should a seal throw).
  struct drop_spare {
    ~drop_spare() { detail::drop_spare_build_pages(); }
  } drop;
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) {
      pool.emplace_back(work);
    }
    for (std::thread& th : pool) {
      th.join();
    }
  }
  std::vector<load_issue> all_dups;  // unsorted
  for (auto& d : dups) {
    for (auto& issue : d) {
      all_dups.push_back(std::move(issue));
    }
  }
  return all_dups;
}

}  // namespace

result<std::vector<std::unique_ptr<shard_source>>, load_issue> build_shards(
    std::string_view data, const load_options& opts, load_report& report) {
  return build_shards(data, opts, report, nullptr);
}

result<std::vector<std::unique_ptr<shard_source>>, load_issue> build_shards(
    std::string_view data, const load_options& opts, load_report& report,
    const std::shared_ptr<const corpus_file>& file,
    const std::function<void(uint32_t, const local_shard&)>& sealed,
    const std::function<void(uint32_t, const local_shard&)>& finalized) {
  report = load_report{};
  const uint32_t n = std::max<uint32_t>(1, opts.shards);
  uint32_t threads = opts.threads ? opts.threads : usable_cpus();
  std::vector<piece_result> parsed = parse_pieces(data, opts, n, threads);
  auto joined = join_pieces(parsed, opts, n, report);
  if (!joined) {
    return unexpected(joined.error());
  }
  std::vector<std::unique_ptr<local_shard>> shards = std::move(*joined);
  if (file != nullptr && texts_from_corpus) {
    TOLLGATE_CHECK(data.size() == file->size());  // the text is the file's, from offset 0
    for (auto& s : shards) {
      s->texts_in(file);
    }
  }
  std::vector<load_issue> all_dups =
      seal_all(shards, n, threads, opts.build_steps, sealed, finalized);
  if (!all_dups.empty()) {
    std::sort(all_dups.begin(), all_dups.end(),
              [](const load_issue& a, const load_issue& b) { return a.line < b.line; });
    if (!opts.skip_bad_lines) {
      return unexpected(all_dups.front());
    }
    report.skipped += all_dups.size();
    report.loaded -= all_dups.size();
    for (auto& d : all_dups) {
      report.issues.push_back(std::move(d));
    }
    std::sort(report.issues.begin(), report.issues.end(),
              [](const load_issue& a, const load_issue& b) { return a.line < b.line; });
    if (report.issues.size() > opts.max_issues) {
      report.issues.resize(opts.max_issues);
    }
  }
  std::vector<std::unique_ptr<shard_source>> out;
  for (auto& s : shards) {
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
// The one live map_guard's range and message, read by the SIGBUS handler. Written before the
// handler is installed and cleared after it is removed.
std::atomic<const char*> g_map_begin{nullptr};
std::atomic<const char*> g_map_end{nullptr};
std::atomic<const std::string*> g_map_message{nullptr};
struct sigaction g_map_previous {};  // the action the guard replaced

void on_sigbus(int, siginfo_t* info, void*) {
  const char* a = static_cast<const char*>(info->si_addr);
  const char* begin = g_map_begin.load(std::memory_order_relaxed);
  const char* end = g_map_end.load(std::memory_order_relaxed);
  const std::string* msg = g_map_message.load(std::memory_order_relaxed);
  if (msg != nullptr && a >= begin && a < end) {
    // Only async-signal-safe calls: write(2) and _exit(2).
    size_t off = 0;
    while (off < msg->size()) {
      const ssize_t n = ::write(STDERR_FILENO, msg->data() + off, msg->size() - off);
      if (n <= 0) {
        break;
      }
      off += static_cast<size_t>(n);
    }
    ::_exit(2);
  }
  // Not a read of the guarded mapping: put back the action the guard replaced and return, so
  // the faulting access runs again and is handled as it would have been (by default, a core).
  ::sigaction(SIGBUS, &g_map_previous, nullptr);
}
}  // namespace

map_guard::map_guard(const void* begin, size_t size, std::string message)
    : message_(std::move(message)) {
  g_map_begin.store(static_cast<const char*>(begin), std::memory_order_relaxed);
  g_map_end.store(static_cast<const char*>(begin) + size, std::memory_order_relaxed);
  g_map_message.store(&message_, std::memory_order_release);
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, nullptr, &g_map_previous);
  ::sigaction(SIGBUS, &sa, nullptr);
}

map_guard::~map_guard() {
  ::sigaction(SIGBUS, &g_map_previous, nullptr);
  g_map_message.store(nullptr, std::memory_order_release);
  g_map_begin.store(nullptr, std::memory_order_relaxed);
  g_map_end.store(nullptr, std::memory_order_relaxed);
}

result<std::unique_ptr<backend>, load_issue> load_jsonl(std::string_view jsonl,
                                                        const load_options& opts,
                                                        load_report& report) {
  auto shards = build_shards(jsonl, opts, report);
  if (!shards) {
    return unexpected(shards.error());
  }
  return std::make_unique<backend>(std::move(*shards), opts.remote_slots);
}

double build_share(const load_options& opts, uint64_t whole) noexcept {
  if (whole == 0 || opts.bytes_parsed == nullptr) {
    return -1;
  }
  // The parse's share of the build's time at 1M stories on one core (~2.8 of ~22 s).
  constexpr double parse_share = 0.1;
  const double parsed =
      std::min(1.0, static_cast<double>(opts.bytes_parsed->load(std::memory_order_relaxed)) /
                        static_cast<double>(whole));
  double built = 0;
  if (opts.stories_parsed != nullptr && opts.build_steps != nullptr) {
    const uint64_t stories = opts.stories_parsed->load(std::memory_order_relaxed);
    const uint64_t steps = opts.build_steps->load(std::memory_order_relaxed);
    built = stories == 0 ? 0
                         : std::min(1.0, static_cast<double>(steps) /
                                             static_cast<double>(stories * build_steps_total));
  }
  return parse_share * parsed + (1 - parse_share) * built;
}

std::shared_ptr<const corpus_file> corpus_file::adopt(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return nullptr;
  }
  return std::shared_ptr<const corpus_file>(
      new corpus_file(fd, static_cast<uint64_t>(st.st_size), path, probe_nowait_reads(fd, path)));
}

std::shared_ptr<const corpus_file> corpus_file::open(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = fmt::format("cannot open {}: {}", path, std::strerror(errno));
    return nullptr;
  }
  auto file = adopt(fd, path);
  if (!file) {
    ::close(fd);
    why = fmt::format("{} is not a regular file", path);
  }
  return file;
}

corpus_file::~corpus_file() { ::close(fd_); }

bool corpus_file::read(uint64_t at, size_t n, void* out, pending_read* nowait) const noexcept {
  return read_fully(fd_, at, n, out, nowait_ ? nowait : nullptr);
}

void corpus_file::reads_are_random() const noexcept {
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);  // advice only: a refusal changes nothing
}

result<void, load_issue> with_corpus_text(
    const std::shared_ptr<const corpus_file>& file,
    const std::function<void(std::string_view, const std::shared_ptr<const corpus_file>&)>& use) {
  // Mapped read-only and prefaulted in one call: the text comes straight from the page cache,
  // without an 800 MB copy into a growing string (its page faults were a large part of the
  // 1M-story load's system time). Stories are copied out of the text while loading (their
  // texts only until the shard is sealed), so the mapping is dropped when `use` returns.
  if (file->size() == 0) {
    use(std::string_view(), file);
    return {};
  }
  const size_t n = static_cast<size_t>(file->size());
  void* m = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file->fd(), 0);
  if (m == MAP_FAILED) {
    return unexpected(
        load_issue{0, fmt::format("cannot map {}: {}", file->path(), std::strerror(errno))});
  }
  {
    // A file shrunk while it is read here would end the process with SIGBUS: say why.
    const map_guard guard(m, n,
                          fmt::format("tollgate: error: {}: the corpus file shrank while it was "
                                      "being loaded (truncated or rewritten in place); not "
                                      "started\n",
                                      file->path()));
    use(std::string_view(static_cast<const char*>(m), n), file);
  }
  ::munmap(m, n);
  file->reads_are_random();
  return {};
}

result<void, load_issue> with_corpus_text(
    const std::string& path,
    const std::function<void(std::string_view, const std::shared_ptr<const corpus_file>&)>& use) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return unexpected(load_issue{0, fmt::format("cannot open {}: {}", path, std::strerror(errno))});
  }
  if (auto file = corpus_file::adopt(fd, path)) {
    return with_corpus_text(file, use);
  }
  // Not a regular file (a pipe): read whole. Its texts are kept by the shards.
  std::string data;
  char buf[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got > 0) {
      data.append(buf, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      const int saved = errno;
      ::close(fd);
      return unexpected(
          load_issue{0, fmt::format("cannot read {}: {}", path, std::strerror(saved))});
    }
    break;
  }
  ::close(fd);
  use(data, nullptr);
  return {};
}

result<std::unique_ptr<backend>, load_issue> load_jsonl_file(const std::string& path,
                                                             const load_options& opts,
                                                             load_report& report) {
  result<std::unique_ptr<backend>, load_issue> b = unexpected(load_issue{});
  if (auto r = with_corpus_text(
          path,
          [&](std::string_view text, const std::shared_ptr<const corpus_file>& file) {
            auto shards = build_shards(text, opts, report, file);
            if (!shards) {
              b = unexpected(shards.error());
              return;
            }
            b = std::make_unique<backend>(std::move(*shards), opts.remote_slots);
          });
      !r) {
    return unexpected(r.error());
  }
  return b;
}

std::unique_ptr<backend> load_sample(uint32_t shards, uint32_t remote_slots) {
  std::string data;
  generate_corpus(sample_count, sample_seed, [&data](std::string_view chunk) { data += chunk; });
  load_options opts;
  opts.shards = shards;
  opts.skip_bad_lines = false;
  opts.remote_slots = remote_slots;
  load_report report;
  auto b = load_jsonl(data, opts, report);
  TOLLGATE_CHECK(b.has_value());
  return std::move(*b);
}

}  // namespace tollgate::search
