// Private: the index file's container: a writer that appends checksummed sections
// (index_writer.cc) and a reader over a mapped, verified file (index_reader.cc); the bytes both
// agree on are in index_layout.h. local_shard::save/load (shard_file.cc) speak to these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tollgate/search/index_file.h"

namespace tollgate::search {

struct pending_read;

/// A section's tag: its shard slot (+1; 0 = the file as a whole) and what it holds.
inline constexpr uint32_t section_tag(uint32_t slot_plus_one, uint32_t field) noexcept {
  return slot_plus_one << 8 | field;
}

/// A streaming 64-bit checksum: four independent multiply-rotate lanes over 32-byte stripes
/// (each step a bijection of its lane, so any one changed word changes the sum), then a mix of
/// the lanes and the length. Several GB/s per core: the whole file is checked at every start.
class index_checksum {
 public:
  void update(const void* data, size_t n) noexcept;
  uint64_t final() const noexcept;

 private:
  void stripe(const uint8_t* p) noexcept;
  uint64_t lane_[4] = {0x9E3779B97F4A7C15ULL, 0xC2B2AE3D27D4EB4FULL, 0x165667B19E3779F9ULL,
                       0x27D4EB2F165667C5ULL};
  uint8_t tail_[32] = {};
  size_t tail_n_ = 0;
  uint64_t total_ = 0;
};

/// Writes an index file section by section. Not thread-safe.
///
/// The bytes go through a staging buffer of kStageBytes (4 KB aligned) that is written out
/// whole at 4 KB aligned offsets with O_DIRECT when the file system allows it (set on `fd`
/// with fcntl; else, or on EINVAL from a write, plain writes): the disk reads the buffer
/// itself, so the file's 1+ GB are not copied into fresh page-cache pages (at 1M stories that
/// copy was ~9% of a build's CPU). The last partial buffer and the header are plain writes.
class index_writer {
 public:
  static constexpr size_t kStageBytes = size_t{8} << 20;
  /// Writes to the open file `fd` (not owned), starting after the header's room. `direct`:
  /// try O_DIRECT (tests turn it off to compare both ways).
  explicit index_writer(int fd, bool direct = true);
  ~index_writer();
  index_writer(const index_writer&) = delete;
  index_writer& operator=(const index_writer&) = delete;
  /// Whether the full buffers went out with O_DIRECT (so far).
  bool direct() const noexcept { return direct_; }
  /// Starts section `tag` (64-byte aligned); append() adds to it, end_section() closes it.
  void begin_section(uint32_t tag);
  void append(const void* data, size_t n);
  void end_section();
  /// A whole section of trivially copyable values.
  template <class T>
  void add(uint32_t tag, std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    begin_section(tag);
    append(values.data(), values.size_bytes());
    end_section();
  }
  /// Writes the directory and the header (with `head`'s fields) and flushes; "" or the error.
  struct head {
    corpus_fingerprint corpus;
    uint32_t shards = 0;
    uint64_t loaded = 0, skipped = 0;
  };
  std::string finish(const head& h);
  /// After finish(): the file's bytes by part.
  index_parts parts() const;

 private:
  struct entry {
    uint32_t tag;
    uint32_t reserved;
    uint64_t offset, bytes, checksum;
  };
  void stage(const uint8_t* p, size_t n);
  void write_stage();
  bool set_direct(bool on);
  int fd_;
  bool direct_ = false;
  uint8_t* stage_ = nullptr;  // kStageBytes, 4 KB aligned
  size_t staged_ = 0;         // bytes in stage_
  uint64_t stage_at_;         // file offset of stage_[0]
  uint64_t at_;               // file offset of the next byte appended
  entry cur_{};
  index_checksum sum_;
  std::vector<entry> dir_;
  std::string error_;  // the first write error
};

/// Copies `n` bytes of the file `fd` at offset `at` to `out` (pread, again after EINTR or a short
/// read); false on an I/O error, or (errno 0) when the file ends before them. `nowait` (may be
/// null): only what the page cache holds now is copied (preadv2 RWF_NOWAIT); at the first byte
/// it does not hold, false with errno EAGAIN and `nowait` set to the bytes still to read. A
/// kernel or file system without RWF_NOWAIT reads as without `nowait` (see probe_nowait_reads).
bool read_fully(int fd, uint64_t at, size_t n, void* out, pending_read* nowait = nullptr) noexcept;

/// Whether reads of the open file `fd` (at `path`, for the log) can be asked not to wait
/// (preadv2 RWF_NOWAIT), tried once at start-up: false where the kernel or the file system
/// refuses them (EOPNOTSUPP). The first file on a disk that refuses is named in the log (its
/// reads then wait on the core when its pages are not cached); a file in memory (tmpfs, ramfs)
/// never waits for a disk, so nothing is said for it.
bool probe_nowait_reads(int fd, std::string_view path) noexcept;

/// Reads a mapped index file's bytes through a descriptor of its own rather than the mapping,
/// for bytes a request reads once (a stored text): their pages stay in the page cache, out of
/// the process' resident set (a fault would map the 64 KB around them). Empty (false): none.
/// Thread-safe.
class index_file_reader {
 public:
  explicit operator bool() const noexcept { return fd_ != nullptr; }
  /// Copies `n` bytes at `at` (a pointer into the mapping) to `out`; false when the file cannot
  /// be read there (an I/O error, or it was cut short since it was mapped). `nowait`: as
  /// read_fully's.
  bool read(const uint8_t* at, size_t n, void* out, pending_read* nowait = nullptr) const noexcept;

 private:
  friend class index_reader;
  std::shared_ptr<const int> fd_;
  const uint8_t* base_ = nullptr;
  bool nowait_ = true;  // probe_nowait_reads at open: reads asked not to wait are taken
};

/// What tells a file from another, and a version of it from the next: its device and inode,
/// size, and last modification and status-change times.
struct file_identity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const file_identity&) const = default;
};
/// The identity of the open file `fd`; false when fstat fails.
bool identity_of(int fd, file_identity& out);

/// A mapped index file whose header, length and every section's checksum were verified (or,
/// for the file this process has just written, see open()). Thread-safe (read-only).
class index_reader {
 public:
  /// Maps and checks `path` against `want` (this format version, fingerprint, shard count);
  /// `threads` verify checksums. On failure: why (ENOENT: "missing").
  ///
  /// `written`: the identity the file had once this process wrote and synced it (a first
  /// start's remap). When the file opened still has it, its sections are not read back to
  /// check their checksums (they were computed from the very bytes written a moment ago; a
  /// later start checks them all) but only brought into the page cache (see warm_pages in
  /// index_reader.cc); checked() is then false. Any other file (replaced or rewritten
  /// meanwhile) is checked in full.
  static result<index_reader, std::string> open(const std::string& path,
                                                const corpus_fingerprint& want, uint32_t shards,
                                                uint32_t threads,
                                                const file_identity* written = nullptr);
  /// Whether every section's checksum was read and held at open().
  bool checked() const noexcept { return checked_; }
  /// Whether the file is the one this process has just written (`written` held at open()):
  /// its loads then skip the checks that read whole sections (local_shard::load).
  bool written_here() const noexcept { return written_here_; }
  /// Section `tag` as values of T; false when missing or of a size that is no multiple of T.
  template <class T>
  bool get(uint32_t tag, std::span<const T>& out) const {
    static_assert(std::is_trivially_copyable_v<T>);
    std::span<const uint8_t> b;
    if (!bytes(tag, b) || b.size() % sizeof(T) != 0) {
      return false;
    }
    out = {reinterpret_cast<const T*>(b.data()), b.size() / sizeof(T)};
    return true;
  }
  bool bytes(uint32_t tag, std::span<const uint8_t>& out) const;
  uint64_t loaded() const noexcept { return loaded_; }
  uint64_t skipped() const noexcept { return skipped_; }
  /// The file's bytes by part.
  index_parts parts() const;
  /// Drops from the resident set the mapped pages of the sections of shard `slot_plus_one`
  /// whose field is not in `kept` (MADV_DONTNEED: they stay in the page cache, and a later
  /// read faults them back in). For the sections a shard copied at load.
  void release(uint32_t slot_plus_one, std::span<const uint32_t> kept) const;
  /// Keeps the mapping alive (a loaded shard holds it).
  const std::shared_ptr<const void>& mapping() const noexcept { return map_; }
  /// Reads the mapping's bytes through the file (see index_file_reader).
  index_file_reader file_reader() const;

 private:
  struct section {
    uint32_t tag;
    const uint8_t* data;
    uint64_t bytes;
  };
  std::shared_ptr<const void> map_;
  std::shared_ptr<const int> read_fd_;  // a descriptor of the mapped file, POSIX_FADV_RANDOM
  std::vector<section> sections_;
  uint64_t loaded_ = 0, skipped_ = 0;
  uint64_t file_bytes_ = 0;
  bool checked_ = false;
  bool written_here_ = false;
  bool nowait_ = true;  // see index_file_reader
};

}  // namespace tollgate::search
