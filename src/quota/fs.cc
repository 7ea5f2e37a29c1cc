#include "tollgate/quota/fs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tollgate/common/fd_io.h"

namespace tollgate::quota::fs {

result<void, std::string> ensure_dir(const std::string& path) {
  if (path.empty()) {
    return unexpected(std::string("empty directory path"));
  }
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) {
      j = path.size();
    }
    cur = path.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) {
      return unexpected(fmt::format("cannot create directory {}: {}", cur, std::strerror(errno)));
    }
    i = j + 1;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return unexpected(fmt::format("{} is not a directory", path));
  }
  return {};
}

result<std::string, std::string> read_file(const std::string& path, bool* missing) {
  *missing = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      *missing = true;
      return std::string();
    }
    return unexpected(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      int e = errno;
      ::close(fd);
      return unexpected(fmt::format("cannot read {}: {}", path, std::strerror(e)));
    }
    if (n == 0) {
      break;
    }
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

result<void, std::string> write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return unexpected(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  }
  if (write_all(fd, data) != data.size() || ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return unexpected(fmt::format("cannot write {}: {}", tmp, std::strerror(e)));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return unexpected(fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(e)));
  }
  // Make the rename itself durable.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

result<void, std::string> append_durable(const std::string& path, std::string_view data) {
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return unexpected(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  if (write_all(fd, data) != data.size() || ::fdatasync(fd) != 0) {
    int e = errno;
    ::close(fd);
    return unexpected(fmt::format("cannot append to {}: {}", path, std::strerror(e)));
  }
  ::close(fd);
  if (!existed) {  // the new file's name must survive a crash too
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return {};
}

file_lock::file_lock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ >= 0) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
}

file_lock::~file_lock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

file_stamp stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return {};
  }
  return {static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

bool random_bytes(void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t r = ::getrandom(b, n, 0);
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      return false;
    }
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kHex[p[i] >> 4];
    s[2 * i + 1] = kHex[p[i] & 15];
  }
  return s;
}

bool from_hex(std::string_view s, uint8_t* out, size_t n) {
  if (s.size() != n * 2) {
    return false;
  }
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') {
      return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
      return c - 'a' + 10;
    }
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    int hi = val(s[2 * i]);
    int lo = val(s[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return false;
    }
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace tollgate::quota::fs
