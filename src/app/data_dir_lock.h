// One server per data dir. `serve` and `stdio` hold an exclusive flock() on <data>/server.lock
// for as long as they run: two processes writing the same usage journals and snapshots would
// lose billed usage (one compacts journals the other is still appending to). The lock goes with
// the process, however it ends (kill -9 included), so a stale lock file never blocks a start.
// The CLI's key and account commands do not take it: the running server picks their changes up.
#pragma once

#include <string>

#include "tollgate/common/result.h"

namespace tollgate::app {

class data_dir_lock {
 public:
  /// Takes the lock on `data_dir` (which must exist) and writes this process's pid into the
  /// file. Fails with a message naming the holder's pid when another process has it.
  static result<data_dir_lock, std::string> acquire(const std::string& data_dir);

  data_dir_lock(data_dir_lock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  data_dir_lock& operator=(data_dir_lock&& o) noexcept;
  data_dir_lock(const data_dir_lock&) = delete;
  data_dir_lock& operator=(const data_dir_lock&) = delete;
  ~data_dir_lock();

 private:
  explicit data_dir_lock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tollgate::app
