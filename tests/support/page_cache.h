// Test support: dropping a file's pages from the page cache, so that a read of it must go to
// the disk (get_story's reads that must not wait, tested against a real file system).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace tollgate::test {

/// Writes back and drops the pages of `path` from the page cache (POSIX_FADV_DONTNEED), then
/// checks that none of bytes [at, at + len) is cached; again every millisecond for up to
/// `patience_ms` while some are (a read the kernel started a moment ago lands after the drop).
/// False when some stay: mapped by someone, or a file system that keeps its pages (tmpfs); a
/// caller that needs the bytes gone then skips.
inline bool evict_from_page_cache(const std::string& path, uint64_t at = 0, uint64_t len = 1,
                                  int patience_ms = 0) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = at / page * page;
  const auto span = static_cast<size_t>((at + len + page - 1) / page * page - first);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(patience_ms);
  bool gone = false;
  for (;;) {
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (void* m = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(first));
        m != MAP_FAILED) {
      std::vector<unsigned char> in(span / page, 1);
      gone = ::mincore(m, span, in.data()) == 0;
      for (const unsigned char b : in) {
        gone = gone && (b & 1) == 0;
      }
      ::munmap(m, span);
    }
    if (gone || std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::close(fd);
  return gone;
}

}  // namespace tollgate::test
