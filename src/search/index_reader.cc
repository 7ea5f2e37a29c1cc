// index_reader: maps an index file and trusts it only once its header matches the corpus and
// this build, its length is the one written and every section's checksum holds; then hands out
// sections by tag (index_layout.h holds the header and the directory's bytes).
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <span>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "search/index_file.h"
#include "search/index_layout.h"
#include "tollgate/common/log.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

using namespace index_layout;

namespace {

// Why a header (of a file of n bytes) is not the one wanted, or "".
std::string check_header(const file_header& fh, const corpus_fingerprint& want, uint32_t shards,
                         size_t n) {
  if (std::memcmp(fh.magic, kMagic, sizeof kMagic) != 0) {
    return "not a tollgate index file";
  }
  if (fh.header_checksum != sum_of(&fh, offsetof(file_header, header_checksum))) {
    return "corrupt header (checksum mismatch)";
  }
  if (fh.version != index_format_version) {
    return fmt::format("format version {} (this build reads version {})", fh.version,
                       index_format_version);
  }
  const corpus_fingerprint got{fh.corpus_size, fh.corpus_mtime_ns, fh.corpus_sample_hash};
  if (got != want) {
    return "built from another corpus (or an older version of it)";
  }
  if (fh.shards != shards) {
    return fmt::format("built for {} shards, not {}", fh.shards, shards);
  }
  if (fh.file_bytes != n) {
    return fmt::format("truncated or extended ({} bytes, written as {})", n, fh.file_bytes);
  }
  if (fh.dir_offset > n || fh.dir_count > (n - fh.dir_offset) / sizeof(dir_entry) ||
      fh.dir_offset % alignof(dir_entry) != 0) {
    return "corrupt directory";
  }
  return {};
}

// Whether every section's checksum holds: largest first, on `threads` threads. Read with pread
// into a small buffer rather than through the mapping: on 4 KB page-cache pages the mapping's
// TLB misses made the check about 3x slower than the copy plus a sum from cache.
//
// `fd` is a descriptor of its own, advised POSIX_FADV_RANDOM: its reads of parts not in the page
// cache bring them in as 4 KB pages, in reads of the size asked, instead of the readahead's
// large folios (2 MB with an 8 MB readahead window). A fault of the serving mapping maps its
// whole folio, so after a read that filled the cache with 2 MB folios, a few thousand scattered
// reads of the mapping made most of the file resident (1.47x the corpus at 1M after a query
// run); on 4 KB pages each fault maps its 64 KB fault-around window.
bool verify_sections(int fd, const dir_entry* dir, size_t count, uint32_t threads) {
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) {
    order[i] = i;
  }
  std::sort(order.begin(), order.end(),
            [dir](size_t a, size_t b) { return dir[a].bytes > dir[b].bytes; });
  std::atomic<size_t> next{0};
  std::atomic<bool> bad{false};
  auto verify = [&] {
    constexpr size_t chunk = size_t{1} << 20;
    std::unique_ptr<uint8_t[]> buf(new uint8_t[chunk]);
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < order.size();) {
      const dir_entry& e = dir[order[k]];
      index_checksum sum;
      for (uint64_t at = 0; at < e.bytes && !bad.load(std::memory_order_relaxed);) {
        const ssize_t got = ::pread(fd, buf.get(), std::min<uint64_t>(chunk, e.bytes - at),
                                    static_cast<off_t>(e.offset + at));
        if (got <= 0) {
          if (got < 0 && errno == EINTR) {
            continue;
          }
          bad.store(true, std::memory_order_relaxed);
          break;
        }
        sum.update(buf.get(), static_cast<size_t>(got));
        at += static_cast<uint64_t>(got);
      }
      if (sum.final() != e.checksum) {
        bad.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t t = 1; t < std::max(1u, threads); ++t) {
    pool.emplace_back(verify);
  }
  verify();
  for (std::thread& th : pool) {
    th.join();
  }
  return !bad.load();
}

// Brings bytes [from, from + bytes) of the file `fd` (advised POSIX_FADV_RANDOM) into the page
// cache in small folios, as verify_sections' reads do, without copying them out:
// POSIX_FADV_WILLNEED, window by window. The kernel starts the reads and returns (a fault on a
// page still being read waits for it); one call reads at most the larger of the device's
// readahead window and its largest request, so the windows are the kernel's default readahead
// (128 KB), below both on any usual device. A page left out would only come in later, through
// the mapping's readahead, as part of a large folio (a fault maps the whole folio: more
// resident memory, the same answers).
void warm_range(int fd, uint64_t from, uint64_t bytes) {
  constexpr uint64_t window = uint64_t{128} << 10;
  for (uint64_t at = from & ~(window - 1); at < from + bytes; at += window) {
    ::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(window), POSIX_FADV_WILLNEED);
  }
}

// The whole file, in two parts. Each call allocates the pages of its window and starts their
// reads before it returns: ~0.1 ms per window here, 0.7 s of system time for the 897 MB file
// at 1M stories, which held the loads (and the first answer) back while it ran. So only the
// sections the shards' loads copy are asked here, before the loads; those read in place (the
// posting streams and skips, the stories' heads, the derived lists, rows and tables: ~820 of
// the 897 MB), which the loads of this file do not read (local_shard::load skips the checks
// that would), are asked by a thread of their own at the lowest priority (SCHED_IDLE): it runs
// while a core has nothing else to do, the server's start-up included, and ends when it has
// asked for every window (holding the descriptor, `fd`, until then).
void warm_pages(const std::shared_ptr<const int>& fd, std::span<const dir_entry> dir) {
  auto later = [](const dir_entry& e) {
    if (e.tag >> 8 == 0) {
      return false;  // the file's own sections (the load report's issues)
    }
    switch (e.tag & 0xFF) {
      case f_stories:
      case f_doc_stream:
      case f_pos_stream:
      case f_skips:
      case f_block_max:
      case f_block_max_time:
      case f_champ_part:
      case f_champ_doc:
      case f_champ_date:
      case f_pair_docs:
      case f_texts:
      case f_text_at:
      case f_text_lines:
      case f_impact_doc:
      case f_impact_part:
      case f_impact_rows:
      case f_prune_bits:
      case f_prune_by_time:
      case f_prune_time_cum:
      case f_prune_tag_docs:
      case f_prune_len_class:
        return true;
      default:
        return false;
    }
  };
  std::vector<std::pair<uint64_t, uint64_t>> rest;  // offset, bytes
  for (const dir_entry& e : dir) {
    if (later(e)) {
      rest.emplace_back(e.offset, e.bytes);
    } else {
      warm_range(*fd, e.offset, e.bytes);
    }
  }
  auto warm_rest = [fd, rest = std::move(rest)] {
    for (const auto& [offset, bytes] : rest) {
      warm_range(*fd, offset, bytes);
    }
  };
  try {
    std::thread([warm_rest]() {
      const sched_param idle{};
      ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle);  // refused: normal priority
      warm_rest();
    }).detach();
  } catch (const std::system_error&) {
    warm_rest();  // no thread to be had: asked here, as before
  }
}

file_identity identity_of_stat(const struct stat& st) {
  file_identity id;
  id.dev = static_cast<uint64_t>(st.st_dev);
  id.ino = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return id;
}

}  // namespace

bool identity_of(int fd, file_identity& out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return false;
  }
  out = identity_of_stat(st);
  return true;
}

result<index_reader, std::string> index_reader::open(const std::string& path,
                                                     const corpus_fingerprint& want,
                                                     uint32_t shards, uint32_t threads,
                                                     const file_identity* written) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return unexpected(errno == ENOENT ? std::string("missing") : std::string(std::strerror(errno)));
  }
  // Closed on every return; the checksums read through it.
  const std::unique_ptr<int, void (*)(int*)> fd_guard(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return unexpected(std::string("not a regular file"));
  }
  const size_t n = static_cast<size_t>(st.st_size);
  if (n < kHeaderRoom) {
    return unexpected(fmt::format("truncated ({} bytes, shorter than its header)", n));
  }
  void* m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    return unexpected(fmt::format("cannot map it: {}", std::strerror(errno)));
  }
  index_reader r;
  r.map_ =
      std::shared_ptr<const void>(m, [n](const void* p) { ::munmap(const_cast<void*>(p), n); });
  const auto* base = static_cast<const uint8_t*>(m);
  file_header fh;
  std::memcpy(&fh, base, sizeof fh);
  if (std::string why = check_header(fh, want, shards, n); !why.empty()) {
    return unexpected(why);
  }
  const auto* dir = reinterpret_cast<const dir_entry*>(base + fh.dir_offset);
  if (fh.dir_checksum != sum_of(dir, fh.dir_count * sizeof(dir_entry))) {
    return unexpected(std::string("corrupt directory (checksum mismatch)"));
  }
  for (uint64_t i = 0; i < fh.dir_count; ++i) {
    const dir_entry& e = dir[i];
    if (e.offset < kHeaderRoom || e.offset > fh.dir_offset || e.bytes > fh.dir_offset - e.offset ||
        e.offset % kAlign != 0) {
      return unexpected(std::string("corrupt directory (a section out of bounds)"));
    }
    r.sections_.push_back({e.tag, base + e.offset, e.bytes});
  }
  // The checks read through a descriptor of their own (see verify_sections), so the advice does
  // not reach the mapping's file; it stays open for file_reader() (the same file: checked by
  // inode).
  const int check_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (check_fd < 0) {
    return unexpected(fmt::format("cannot open it again: {}", std::strerror(errno)));
  }
  r.read_fd_ = std::shared_ptr<const int>(new int(check_fd), [](const int* f) {
    ::close(*f);
    delete f;
  });
  struct stat again;
  if (::fstat(check_fd, &again) != 0 || again.st_dev != st.st_dev || again.st_ino != st.st_ino) {
    return unexpected(std::string("replaced while it was opened"));
  }
  ::posix_fadvise(check_fd, 0, 0, POSIX_FADV_RANDOM);
  r.nowait_ = probe_nowait_reads(check_fd, path);
  if (written != nullptr && identity_of_stat(again) == *written &&
      identity_of_stat(st) == *written) {
    warm_pages(r.read_fd_, std::span<const dir_entry>(dir, fh.dir_count));  // just written, synced
    r.written_here_ = true;
  } else {
    if (!verify_sections(check_fd, dir, fh.dir_count, threads)) {
      return unexpected(std::string("corrupt (a section's checksum does not match)"));
    }
    r.checked_ = true;
  }
  r.loaded_ = fh.loaded;
  r.skipped_ = fh.skipped;
  r.file_bytes_ = n;
  return r;
}

bool index_reader::bytes(uint32_t tag, std::span<const uint8_t>& out) const {
  for (const section& s : sections_) {
    if (s.tag == tag) {
      out = {s.data, s.bytes};
      return true;
    }
  }
  return false;
}

void index_reader::release(uint32_t slot_plus_one, std::span<const uint32_t> kept) const {
  constexpr uintptr_t page = 4096;
  for (const section& s : sections_) {
    if (s.tag >> 8 != slot_plus_one ||
        std::find(kept.begin(), kept.end(), s.tag & 0xFF) != kept.end()) {
      continue;
    }
    // the whole pages inside the section (a page shared with a kept neighbour stays)
    const uintptr_t from = (reinterpret_cast<uintptr_t>(s.data) + page - 1) & ~(page - 1);
    const uintptr_t to = (reinterpret_cast<uintptr_t>(s.data) + s.bytes) & ~(page - 1);
    if (to > from) {
      ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
    }
  }
}

index_parts index_reader::parts() const { return parts_of(sections_, file_bytes_); }

index_file_reader index_reader::file_reader() const {
  index_file_reader f;
  f.fd_ = read_fd_;
  f.base_ = static_cast<const uint8_t*>(map_.get());
  f.nowait_ = nowait_;
  return f;
}

namespace {

// Whether a read that must not wait was refused by a file probe_nowait_reads passed (it
// changed since); from then on every such read waits. Set once, by the first refusal.
std::atomic<bool> g_nowait_refused{false};
// Whether the log has named a file whose reads wait (once for the process).
std::atomic<bool> g_nowait_said{false};

void say_nowait_refused(std::string_view path) noexcept {
  if (!g_nowait_said.exchange(true, std::memory_order_relaxed)) {  // once; orders nothing
    log_info(
        "warning: {}: its file system does not take reads that must not wait (preadv2 "
        "RWF_NOWAIT: {}): get_story reads its stories on the core, which waits for the disk "
        "when they are not cached",
        path, std::strerror(EOPNOTSUPP));
  }
}

}  // namespace

bool read_fully(int fd, uint64_t at, size_t n, void* out, pending_read* nowait) noexcept {
  auto* to = static_cast<char*>(out);
  if (nowait != nullptr && g_nowait_refused.load(std::memory_order_relaxed)) {
    nowait = nullptr;
  }
  while (n > 0) {
    ssize_t got = 0;
    if (nowait != nullptr) {
      iovec v{to, n};
      got = ::preadv2(fd, &v, 1, static_cast<off_t>(at), RWF_NOWAIT);
      if (got < 0 && errno == EAGAIN) {
        *nowait = pending_read{fd, at, n};
        return false;  // errno EAGAIN
      }
      if (got < 0 && errno == EOPNOTSUPP) {  // the probe at open took it: not expected
        g_nowait_refused.store(true, std::memory_order_relaxed);
        say_nowait_refused("a story file");
        nowait = nullptr;
        continue;
      }
    } else {
      got = ::pread(fd, to, n, static_cast<off_t>(at));
    }
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got == 0) {
      errno = 0;  // the file ends before: cut short since
      return false;
    }
    if (got < 0) {
      return false;
    }
    to += got;
    at += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool probe_nowait_reads(int fd, std::string_view path) noexcept {
  char byte;
  iovec v{&byte, 1};
  if (::preadv2(fd, &v, 1, 0, RWF_NOWAIT) >= 0 || errno != EOPNOTSUPP) {
    return true;  // read, or not cached (EAGAIN), or empty: taken
  }
  struct statfs fs;
  const bool in_memory =
      ::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
  if (!in_memory) {
    say_nowait_refused(path);
  }
  return false;
}

bool index_file_reader::read(const uint8_t* at, size_t n, void* out,
                             pending_read* nowait) const noexcept {
  return read_fully(*fd_, static_cast<uint64_t>(at - base_), n, out, nowait_ ? nowait : nullptr);
}

}  // namespace tollgate::search
