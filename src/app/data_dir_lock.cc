#include "data_dir_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace tollgate::app {

result<data_dir_lock, std::string> data_dir_lock::acquire(const std::string& data_dir) {
  const std::string path = data_dir + "/server.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return unexpected(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e != EWOULDBLOCK) {
      ::close(fd);
      return unexpected(fmt::format("cannot lock {}: {}", path, std::strerror(e)));
    }
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string_view holder(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) {
      holder.remove_suffix(1);
    }
    return unexpected(fmt::format(
        "data dir {} is in use by another tollgate server{}: two servers on one data dir would "
        "lose billed usage; stop it, or give this one its own --data-dir",
        data_dir, holder.empty() ? std::string() : fmt::format(" (pid {})", holder)));
  }
  // Best effort: without the pid in the file the lock still holds; only the message a refused
  // start prints is poorer.
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t w = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return data_dir_lock(fd);
}

data_dir_lock& data_dir_lock::operator=(data_dir_lock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

data_dir_lock::~data_dir_lock() {
  if (fd_ >= 0) {
    ::close(fd_);  // releases the flock
  }
}

}  // namespace tollgate::app
