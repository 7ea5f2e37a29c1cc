// Where index files live and when they are used: the corpus fingerprint, the candidate paths,
// load_indexed (map a matching file, else build and write one) and build_index_file. See
// include/tollgate/search/index_file.h.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "search/corpus_text.h"
#include "search/index_file.h"
#include "search/local_shard.h"
#include "tollgate/common/alloc_hold.h"

namespace tollgate::search {

namespace {

constexpr uint32_t kFileIssues = section_tag(0, 1);  // the load report's issues
constexpr size_t kSampleBlocks = 16;
constexpr size_t kSampleBlockBytes = size_t{64} << 10;

uint32_t thread_count(const load_options& opts) {
  return opts.threads ? opts.threads : usable_cpus();
}

// Whether a build writes its index file as it goes (overlapped_write's thread): with a core
// to spare for it, and not in a load that fails on bad lines. Such a load finds duplicate ids
// only once the shards are sealed, then fails and drops them, while the writer thread could
// still be reading them; it writes the file once built instead.
bool overlap_write(const load_options& opts) {
  return thread_count(opts) > 1 && opts.skip_bad_lines;
}

// Issues as {u64 line, u32 length, reason bytes}.
void save_issues(index_writer& w, const std::vector<load_issue>& issues) {
  w.begin_section(kFileIssues);
  for (const load_issue& i : issues) {
    const uint32_t len = static_cast<uint32_t>(i.reason.size());
    w.append(&i.line, sizeof i.line);
    w.append(&len, sizeof len);
    w.append(i.reason.data(), len);
  }
  w.end_section();
}

bool load_issues(const index_reader& r, size_t max, std::vector<load_issue>& out) {
  std::span<const uint8_t> b;
  if (!r.bytes(kFileIssues, b)) {
    return false;
  }
  for (size_t at = 0; at < b.size();) {
    load_issue i;
    uint32_t len;
    if (b.size() - at < 12) {
      return false;
    }
    std::memcpy(&i.line, b.data() + at, 8);
    std::memcpy(&len, b.data() + at + 8, 4);
    at += 12;
    if (len > b.size() - at) {
      return false;
    }
    i.reason.assign(reinterpret_cast<const char*>(b.data() + at), len);
    at += len;
    if (out.size() < max) {
      out.push_back(std::move(i));
    }
  }
  return true;
}

// The shards of a verified index file, or why they cannot be used.
result<std::vector<std::unique_ptr<shard_source>>, std::string> open_index(
    const std::string& path, const corpus_fingerprint& fp, const load_options& opts,
    load_report& report, index_parts& parts, bool& checked,
    const std::shared_ptr<const corpus_file>& corpus, const file_identity* written = nullptr) {
  const uint32_t n = std::max<uint32_t>(1, opts.shards);
  auto r = index_reader::open(path, fp, n, std::min(thread_count(opts), 4u), written);
  if (!r) {
    return unexpected(r.error());
  }
  if (!opts.skip_bad_lines && r->skipped() > 0) {
    return unexpected(
        fmt::format("built with {} bad lines skipped, and bad lines are not to be "
                    "skipped",
                    r->skipped()));
  }
  // Shards load in parallel (each copies its tables out of the mapping and reads nothing of
  // another's): the first start's remap and every later start. The first failing shard's
  // reason is reported, as a serial load would.
  std::vector<std::unique_ptr<local_shard>> loaded(n);
  std::vector<std::string> why(n);
  const uint32_t threads = std::min(thread_count(opts), n);
  auto work = [&](uint32_t t) {
    for (uint32_t i = t; i < n; i += threads) {
      loaded[i] = std::make_unique<local_shard>();
      why[i] = loaded[i]->load(*r, i, corpus);
    }
  };
  if (threads <= 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    for (uint32_t t = 1; t < threads; ++t) {
      pool.emplace_back(work, t);
    }
    work(0);
    for (std::thread& th : pool) {
      th.join();
    }
  }
  std::vector<std::unique_ptr<shard_source>> shards;
  for (uint32_t i = 0; i < n; ++i) {
    if (!why[i].empty()) {
      return unexpected(why[i]);
    }
    shards.push_back(std::move(loaded[i]));
  }
  load_report rep;
  rep.loaded = r->loaded();
  rep.skipped = r->skipped();
  if (!load_issues(*r, opts.max_issues, rep.issues)) {
    return unexpected(std::string("corrupt list of bad lines"));
  }
  report = std::move(rep);
  parts = r->parts();
  checked = r->checked();
  return shards;
}

// Removes the temporary files `path`.tmp.PID that writers which are no longer running left
// behind (a crash or kill mid-write): each can be as large as the index.
void remove_stale_temps(const std::filesystem::path& dir, const std::string& path) {
  namespace fs = std::filesystem;
  const std::string prefix = fs::path(path).filename().string() + ".tmp.";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix)) {
      continue;
    }
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 ||
        !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH) {
      fs::remove(e.path(), ec);
    }
  }
}

// A temporary file beside the index file `path` that a writer fills, then commit_temp renames
// over `path`.
struct temp_file {
  std::string path, tmp;
  int fd = -1;
};

// Creates `path`'s temporary file (and its directory): false with `why` set when it cannot.
bool create_temp(const std::string& path, temp_file& t, std::string& why) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);  // the data dir's index/ (an existing dir is no error)
  remove_stale_temps(dir, path);
  t.path = path;
  t.tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  t.fd = ::open(t.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (t.fd < 0) {
    why = fmt::format("cannot create {}: {}", t.tmp, std::strerror(errno));
    return false;
  }
  return true;
}

// Ends a temporary file its writer filled (`err`: the writer's error, or ""): fsync, rename over
// the index file, fsync of the directory. "" or why not (the temporary file is then removed).
// `written`: the file's identity once synced (what index_reader::open trusts as this
// process' own).
std::string commit_temp(temp_file& t, std::string err, file_identity& written) {
  if (err.empty() && ::fsync(t.fd) != 0) {
    err = std::strerror(errno);
  }
  bool renamed = false;
  if (err.empty()) {
    renamed = ::rename(t.tmp.c_str(), t.path.c_str()) == 0;
    if (!renamed) {
      err = std::strerror(errno);
    }
  }
  // Taken after the rename, which sets the file's status-change time on some file systems. None
  // (fstat failed): the remap checks the file in full.
  if (!renamed || !identity_of(t.fd, written)) {
    written = file_identity{};
  }
  if (::close(t.fd) != 0 && err.empty()) {
    err = std::strerror(errno);
  }
  t.fd = -1;
  if (!err.empty()) {
    ::unlink(renamed ? t.path.c_str() : t.tmp.c_str());
    return fmt::format("cannot write {}: {}", t.path, err);
  }
  namespace fs = std::filesystem;
  const fs::path target(t.path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);  // the rename itself survives a crash
    ::close(dfd);
  }
  return {};
}

// The very end of every index file: the load report's issues, the directory and the header. ""
// or the writer's error.
std::string write_end(index_writer& w, const backend& b, const corpus_fingerprint& fp,
                      const load_report& report, index_parts& parts) {
  save_issues(w, report.issues);
  std::string err =
      w.finish({fp, static_cast<uint32_t>(b.local_count()), report.loaded, report.skipped});
  parts = w.parts();
  return err;
}

// The end of every index file: what finalize() derived, shard by shard, then write_end's.
std::string write_tail(index_writer& w, const backend& b, const corpus_fingerprint& fp,
                       const load_report& report, index_parts& parts) {
  for (uint32_t i = 0; i < b.local_count(); ++i) {
    static_cast<const local_shard&>(b.local_shard(i)).save_derived(w, i);
  }
  return write_end(w, b, fp, report, parts);
}

// Writes `b`'s shards to `path` atomically: a temporary file beside it, fsync, rename, fsync of
// the directory. The sections seal() made come first, shard by shard, then write_tail's (the
// order overlapped_write writes them in, so both give the same bytes). "" or why not (the
// temporary file is removed).
std::string write_index(const std::string& path, const backend& b, const corpus_fingerprint& fp,
                        const load_report& report, index_parts& parts, std::atomic<uint64_t>* steps,
                        file_identity& written) {
  temp_file t;
  std::string why;
  if (!create_temp(path, t, why)) {
    return why;
  }
  std::string err;
  {
    index_writer w(t.fd);
    for (uint32_t i = 0; i < b.local_count(); ++i) {
      const auto& shard = static_cast<const local_shard&>(b.local_shard(i));
      shard.save_sealed(w, i);
      if (steps != nullptr) {
        steps->fetch_add(shard.stats().docs * build_steps_written, std::memory_order_relaxed);
      }
    }
    err = write_tail(w, b, fp, report, parts);
  }
  return commit_temp(t, std::move(err), written);
}

// A build's index file written while the build goes on: a thread writes each shard's sealed
// sections as soon as seal() is done with it (in slot order, so the bytes are write_index's),
// while the other shards seal and all finalize: the file's bulk (stories, postings, positions)
// goes to the disk during the build instead of after it, when one core or none would be at
// work (perf/notes/search-2026-12-06-memory.md). A sealed shard's sections are only read, by
// this thread and by finalize(), which writes other members. Then, in slot order again, what
// each shard's finalize() derived, as soon as it is finalized (the build finalizes shards
// while the last ones seal); finish() writes the rest of the tail.
// Without `overlap` (a build on one CPU: no core for the thread to take, its work would only
// interleave with the build's) nothing is written before finish(), which writes it all.
class overlapped_write {
 public:
  overlapped_write() : shards_(0), steps_(nullptr) {}  // writes nothing
  overlapped_write(const std::string& path, uint32_t shards, std::atomic<uint64_t>* steps,
                   bool overlap)
      : ready_(new std::atomic<const local_shard*>[shards]),
        done_(new std::atomic<const local_shard*>[shards]),
        shards_(shards),
        steps_(steps) {
    for (uint32_t i = 0; i < shards; ++i) {
      ready_[i].store(nullptr, std::memory_order_relaxed);
      done_[i].store(nullptr, std::memory_order_relaxed);
    }
    if (!create_temp(path, t_, why_)) {
      return;
    }
    w_ = std::make_unique<index_writer>(t_.fd);
    if (overlap) {
      thread_ = std::thread([this] { run(); });
    }
  }
  ~overlapped_write() { abandon(); }
  overlapped_write(const overlapped_write&) = delete;
  overlapped_write& operator=(const overlapped_write&) = delete;

  /// Whether it writes (its temporary file was created); else why not.
  bool active() const noexcept { return w_ != nullptr; }
  /// Whether it wants sealed() and finalized() calls (it writes during the build).
  bool overlaps() const noexcept { return thread_.joinable(); }
  const std::string& why() const noexcept { return why_; }
  const std::string& path() const noexcept { return t_.path; }
  /// From a seal thread: shard `slot` is sealed (and stays where it is until finish()).
  void sealed(uint32_t slot, const local_shard& s) {
    ready_[slot].store(&s, std::memory_order_release);  // the shard's sealed state with it
    ready_[slot].notify_one();
  }
  /// From the thread that finalized it: shard `slot` is finalized (and not changed again).
  void finalized(uint32_t slot, const local_shard& s) {
    done_[slot].store(&s, std::memory_order_release);
    done_[slot].notify_one();
  }
  /// Once every shard was sealed() and finalized(), and `b` holds the same shards: the tail,
  /// then the file committed. "" or why not (the temporary file removed).
  std::string finish(const backend& b, const corpus_fingerprint& fp, const load_report& report,
                     index_parts& parts, file_identity& written) {
    std::string err;
    if (thread_.joinable()) {
      thread_.join();
      err = write_end(*w_, b, fp, report, parts);
    } else {
      for (uint32_t i = 0; i < b.local_count(); ++i) {
        write_sealed(static_cast<const local_shard&>(b.local_shard(i)), i);
      }
      err = write_tail(*w_, b, fp, report, parts);
    }
    w_.reset();
    return commit_temp(t_, std::move(err), written);
  }
  /// Not to be used (the build failed, or the corpus changed): the thread stopped, the
  /// temporary file removed.
  void abandon() {
    if (thread_.joinable()) {
      for (uint32_t i = 0; i < shards_; ++i) {  // a shard not yet written is not written
        ready_[i].store(stop_mark(), std::memory_order_release);
        ready_[i].notify_one();
        done_[i].store(stop_mark(), std::memory_order_release);
        done_[i].notify_one();
      }
      thread_.join();
    }
    if (w_) {
      w_.reset();
      ::close(t_.fd);
      ::unlink(t_.tmp.c_str());
    }
  }

 private:
  // What abandon() puts in every slot: an address that is no shard's (a static byte's).
  static const local_shard* stop_mark() noexcept {
    static const char byte = 0;
    return reinterpret_cast<const local_shard*>(&byte);
  }
  void run() {
    for (uint32_t i = 0; i < shards_; ++i) {
      ready_[i].wait(nullptr, std::memory_order_acquire);
      const local_shard* s = ready_[i].load(std::memory_order_acquire);
      if (s == stop_mark()) {
        return;
      }
      write_sealed(*s, i);
    }
    for (uint32_t i = 0; i < shards_; ++i) {
      done_[i].wait(nullptr, std::memory_order_acquire);
      const local_shard* s = done_[i].load(std::memory_order_acquire);
      if (s == stop_mark()) {
        return;
      }
      s->save_derived(*w_, i);
    }
  }
  void write_sealed(const local_shard& s, uint32_t slot) {
    s.save_sealed(*w_, slot);
    if (steps_ != nullptr) {
      steps_->fetch_add(s.stats().docs * build_steps_written, std::memory_order_relaxed);
    }
  }

  temp_file t_;
  std::string why_;
  std::unique_ptr<index_writer> w_;
  std::unique_ptr<std::atomic<const local_shard*>[]> ready_;  // sealed(), by slot
  std::unique_ptr<std::atomic<const local_shard*>[]> done_;   // finalized(), by slot
  uint32_t shards_;
  std::atomic<uint64_t>* steps_;
  std::thread thread_;
};

// The shards of `corpus`; `out`, when active, writes each as it is sealed.
result<std::vector<std::unique_ptr<shard_source>>, load_issue> build_from_corpus(
    const std::shared_ptr<const corpus_file>& corpus, const load_options& opts, load_report& report,
    overlapped_write& out) {
  result<std::vector<std::unique_ptr<shard_source>>, load_issue> shards = unexpected(load_issue{});
  std::function<void(uint32_t, const local_shard&)> sealed, finalized;
  if (out.overlaps()) {
    sealed = [&out](uint32_t slot, const local_shard& s) { out.sealed(slot, s); };
    finalized = [&out](uint32_t slot, const local_shard& s) { out.finalized(slot, s); };
  }
  if (auto r = with_corpus_text(
          corpus,
          [&](std::string_view text, const std::shared_ptr<const corpus_file>& file) {
            shards = build_shards(text, opts, report, file, sealed, finalized);
          });
      !r) {
    return unexpected(r.error());
  }
  return shards;
}

}  // namespace

result<corpus_fingerprint, std::string> fingerprint_of(const std::string& path) {
  std::string why;
  auto file = corpus_file::open(path, why);
  if (!file) {
    return unexpected(why);
  }
  return fingerprint_of(*file);
}

result<corpus_fingerprint, std::string> fingerprint_of(const corpus_file& file) {
  const int fd = file.fd();
  const std::string& path = file.path();
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return unexpected(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  }
  corpus_fingerprint fp;
  fp.size = static_cast<uint64_t>(st.st_size);
  fp.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  // Blocks at evenly spaced offsets from the first byte to the last block (all of a small file).
  index_checksum sum;
  std::vector<char> buf(kSampleBlockBytes);
  const uint64_t span = fp.size > kSampleBlockBytes ? fp.size - kSampleBlockBytes : 0;
  const size_t blocks = fp.size <= kSampleBlocks * kSampleBlockBytes
                            ? (fp.size + kSampleBlockBytes - 1) / kSampleBlockBytes
                            : kSampleBlocks;
  for (size_t i = 0; i < blocks; ++i) {
    const uint64_t off = blocks == kSampleBlocks && fp.size > kSampleBlocks * kSampleBlockBytes
                             ? span * i / (kSampleBlocks - 1)
                             : i * kSampleBlockBytes;
    const ssize_t got = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
    if (got < 0) {
      return unexpected(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    }
    sum.update(&off, sizeof off);
    sum.update(buf.data(), static_cast<size_t>(got));
  }
  fp.sample_hash = sum.final();
  return fp;
}

std::vector<std::string> index_paths(const std::string& corpus, const std::string& data_dir) {
  std::vector<std::string> out{corpus + ".tollgate-index"};
  if (!data_dir.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path abs = fs::absolute(corpus, ec);
    if (ec) {
      abs = corpus;
    }
    abs = abs.lexically_normal();
    out.push_back((fs::path(data_dir) / "index" /
                   fmt::format("{}.{:016x}.tollgate-index", abs.filename().string(),
                               hash_bytes(abs.string())))
                      .string());
  }
  return out;
}

result<std::unique_ptr<backend>, load_issue> load_indexed(const std::string& corpus,
                                                          std::span<const std::string> paths,
                                                          const load_options& opts,
                                                          load_report& report, index_use& use) {
  use = index_use{};
  // One descriptor of the corpus for all of it: its fingerprint, the build's text, and the
  // shards' reads of their texts (a corpus renamed over meanwhile is not mixed in).
  std::string why;
  const std::shared_ptr<const corpus_file> file = corpus_file::open(corpus, why);
  result<corpus_fingerprint, std::string> fp = unexpected(why);
  if (file) {
    fp = fingerprint_of(*file);
  }
  if (!fp) {
    return load_jsonl_file(corpus, opts, report);  // its error names the problem
  }
  for (const std::string& path : paths) {
    auto shards = open_index(path, *fp, opts, report, use.parts, use.checked, file);
    if (shards) {
      use.mapped = true;
      use.path = path;
      return std::make_unique<backend>(std::move(*shards), opts.remote_slots);
    }
    if (shards.error() != "missing") {
      use.notes.push_back(fmt::format("index {} not used: {}; rebuilding", path, shards.error()));
    }
  }
  // A build from here on: the allocator keeps what the build frees for its next allocations
  // until the function returns (see allocator_hold).
  const allocator_hold hold;
  // The file is written as the build goes (overlapped_write) to the first candidate that takes
  // a temporary file; should it fail there, to the candidates after it once built.
  size_t next = 0;
  std::unique_ptr<overlapped_write> out;
  while (next < paths.size()) {
    out = std::make_unique<overlapped_write>(paths[next++], std::max<uint32_t>(1, opts.shards),
                                             opts.build_steps, overlap_write(opts));
    if (out->active()) {
      break;
    }
    use.notes.push_back(out->why());
  }
  if (!out) {
    out = std::make_unique<overlapped_write>();  // no candidate: none written
  }
  auto shards = build_from_corpus(file, opts, report, *out);
  if (!shards) {
    return unexpected(shards.error());  // `out` removes its temporary file
  }
  // The file's tail once the backend has finalized the shards, so it holds that work too.
  auto b = std::make_unique<backend>(std::move(*shards), opts.remote_slots);
  file_identity written;
  auto after = fingerprint_of(corpus);
  if (!after || *after != *fp) {
    out->abandon();
    use.notes.push_back(fmt::format("{} changed while it was loaded: no index written", corpus));
  } else {
    if (out->active()) {
      std::string err = out->finish(*b, *fp, report, use.parts, written);
      if (err.empty()) {
        use.path = out->path();
      } else {
        use.notes.push_back(err);
      }
    }
    for (; use.path.empty() && next < paths.size(); ++next) {
      std::string err =
          write_index(paths[next], *b, *fp, report, use.parts, opts.build_steps, written);
      if (err.empty()) {
        use.path = paths[next];
        break;
      }
      use.notes.push_back(err);
    }
    if (use.path.empty() && !paths.empty()) {
      use.notes.push_back("no index written: serving from memory; the next start builds again");
    }
  }
  if (!use.path.empty()) {
    // Served from the file just written, as every later start is: the built shards (1.6x the
    // corpus file's size resident at 1M stories, against 0.7x mapped) are given back, and a
    // first start serves the way later ones do. The build's report stands (the file holds the
    // same). The mapped backend is made before the built one goes, so that a file that does
    // not open again (replaced meanwhile) leaves the build serving.
    load_report file_report;
    index_parts file_parts;
    auto mapped =
        open_index(use.path, *fp, opts, file_report, file_parts, use.checked, file, &written);
    if (mapped) {
      b = std::make_unique<backend>(std::move(*mapped), opts.remote_slots);
      use.remapped = true;
    } else {
      use.notes.push_back(
          fmt::format("index {} written but not mapped again: {}; serving the "
                      "build from memory",
                      use.path, mapped.error()));
    }
  }
  return b;
}

result<void, load_issue> build_index_file(const std::string& corpus, const std::string& out,
                                          const load_options& opts, load_report& report,
                                          index_parts* parts) {
  std::string why;
  const std::shared_ptr<const corpus_file> file = corpus_file::open(corpus, why);
  result<corpus_fingerprint, std::string> fp = unexpected(why);
  if (file) {
    fp = fingerprint_of(*file);
  }
  if (!fp) {
    return unexpected(load_issue{0, fp.error()});
  }
  const allocator_hold hold;  // as load_indexed's
  overlapped_write writer(out, std::max<uint32_t>(1, opts.shards), opts.build_steps,
                          overlap_write(opts));
  if (!writer.active()) {
    return unexpected(load_issue{0, writer.why()});
  }
  auto shards = build_from_corpus(file, opts, report, writer);
  if (!shards) {
    return unexpected(shards.error());
  }
  const backend b(std::move(*shards), 0);
  auto after = fingerprint_of(corpus);
  if (!after || *after != *fp) {
    return unexpected(load_issue{0, fmt::format("{} changed while it was indexed", corpus)});
  }
  index_parts written;
  file_identity id;
  if (std::string err = writer.finish(b, *fp, report, written, id); !err.empty()) {
    return unexpected(load_issue{0, err});
  }
  if (parts != nullptr) {
    *parts = written;
  }
  return {};
}

}  // namespace tollgate::search
