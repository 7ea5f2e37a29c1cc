// Small file helpers of the data dir (start-up, CLI and timer paths only), used by the quota
// module and by the cluster key store (hex, random bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tollgate/common/result.h"

namespace tollgate::quota::fs {

/// mkdir -p. Error: a sentence naming the path.
result<void, std::string> ensure_dir(const std::string& path);
/// Whole file. A missing file gives `missing = true` and an empty string.
result<std::string, std::string> read_file(const std::string& path, bool* missing);
/// Writes `data` to path.tmp, fsyncs, renames over `path`, fsyncs the directory.
result<void, std::string> write_file_atomic(const std::string& path, std::string_view data);
/// Appends `data` (O_APPEND, one write), fdatasyncs, and fsyncs the directory when the file is
/// new: the data is on disk when this returns. For small append-only logs (admin audit,
/// idempotency records, webhook event ids), never the request path.
result<void, std::string> append_durable(const std::string& path, std::string_view data);
/// Holds an exclusive flock() on a lock file for its lifetime (no-op if it could not open).
class file_lock {
 public:
  explicit file_lock(const std::string& path);
  ~file_lock();
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;

 private:
  int fd_ = -1;
};
/// Identity of a file's current version (inode, size, mtime); zero when missing.
struct file_stamp {
  uint64_t ino = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const file_stamp&) const = default;
};
file_stamp stamp(const std::string& path);
/// Fills 'n' bytes from getrandom(2) (blocks only until the pool is initialised at boot).
bool random_bytes(void* p, size_t n);
std::string to_hex(const uint8_t* p, size_t n);
bool from_hex(std::string_view s, uint8_t* out, size_t n);

}  // namespace tollgate::quota::fs
