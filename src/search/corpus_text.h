// Private: a corpus file's whole text for one call, shared by load_jsonl_file and the persisted
// index (index_store.cc), which builds shards from the text and writes them before the backend
// takes them; and the open corpus file a shard reads its stories' texts from (corpus_file).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tollgate/common/result.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/index_file.h"

namespace tollgate::search {

/// An open regular corpus file, kept open as long as a shard built from it (or loaded from an
/// index of it) lives: get_story reads a story's line from it by offset (pread) and parses its
/// text there, rather than keeping a copy of every text. The descriptor, not the path: a corpus
/// replaced by a rename goes on being read as it was indexed. One rewritten in place is caught
/// by the line's checks (local_shard::text): its story answers unavailable, never another's.
/// Thread-safe (read-only).
class corpus_file {
 public:
  /// Opens `path`; null (and `why` set) when it cannot be opened or is not a regular file.
  static std::shared_ptr<const corpus_file> open(const std::string& path, std::string& why);
  /// Takes over the open `fd` when it is a regular file; null (`fd` left open) otherwise.
  static std::shared_ptr<const corpus_file> adopt(int fd, const std::string& path);
  ~corpus_file();
  corpus_file(const corpus_file&) = delete;
  corpus_file& operator=(const corpus_file&) = delete;
  int fd() const noexcept { return fd_; }
  /// The size it had when opened (what its lines were checked against).
  uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  /// Copies `n` bytes at offset `at` to `out`; false on an I/O error or when the file ends
  /// before them (it was cut short since), errno then 0. `nowait`: as read_fully's (only what
  /// the page cache holds; errno EAGAIN and `nowait` set at the first byte it does not; on a
  /// file system that refuses such reads, a read that waits).
  bool read(uint64_t at, size_t n, void* out, pending_read* nowait = nullptr) const noexcept;
  /// From now on its reads are single lines: no readahead around them (POSIX_FADV_RANDOM).
  /// Called once the whole-file mapping the build parsed is gone.
  void reads_are_random() const noexcept;

 private:
  corpus_file(int fd, uint64_t size, std::string path, bool nowait)
      : fd_(fd), size_(size), path_(std::move(path)), nowait_(nowait) {}
  int fd_;
  uint64_t size_;
  std::string path_;
  bool nowait_;  // probe_nowait_reads at open: reads asked not to wait are taken
};

/// Calls `use` once with the whole text of the file at `path`: a regular file mapped read-only
/// (under a map_guard: a file shrunk meanwhile ends the process with a clear message), anything
/// else read into memory. `file` is the regular file open (null for anything else): the text
/// is its bytes from offset 0. The text is valid only during the call. Fails (line 0) when the
/// file cannot be opened or read; `use` is not called then.
result<void, load_issue> with_corpus_text(
    const std::string& path,
    const std::function<void(std::string_view text,
                             const std::shared_ptr<const corpus_file>& file)>& use);
/// The same for a corpus file already open.
result<void, load_issue> with_corpus_text(
    const std::shared_ptr<const corpus_file>& file,
    const std::function<void(std::string_view text,
                             const std::shared_ptr<const corpus_file>& file)>& use);

class local_shard;

/// build_shards() whose shards read their texts from `file` (whose whole text `jsonl` is, from
/// offset 0) instead of keeping them packed; null: as build_shards(). `sealed`, when set, is
/// called from the sealing thread as each shard is sealed, with its slot (the shard stays
/// where it is, and is not changed again but by finalize()); `finalized` likewise from the
/// thread that finalized it, once it is (then it is not changed again).
result<std::vector<std::unique_ptr<shard_source>>, load_issue> build_shards(
    std::string_view jsonl, const load_options& opts, load_report& report,
    const std::shared_ptr<const corpus_file>& file,
    const std::function<void(uint32_t slot, const local_shard& shard)>& sealed = {},
    const std::function<void(uint32_t slot, const local_shard& shard)>& finalized = {});

/// The fingerprint of an open corpus file (fingerprint_of's, from its descriptor).
result<corpus_fingerprint, std::string> fingerprint_of(const corpus_file& file);

}  // namespace tollgate::search
