#include "sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace tollgate::app {

bool sd_notify(std::string_view state, std::string* error) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') {
    return false;
  }
  const size_t len = std::strlen(path);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if ((path[0] != '/' && path[0] != '@') || len >= sizeof(addr.sun_path)) {
    if (error != nullptr) {
      *error = "NOTIFY_SOCKET is not a socket path or @abstract name";
    }
    return false;
  }
  std::memcpy(addr.sun_path, path, len);
  if (path[0] == '@') {
    addr.sun_path[0] = '\0';  // the abstract namespace
  }
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (error != nullptr) {
      *error = std::strerror(errno);
    }
    return false;
  }
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  const ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), addr_len);
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(state.size())) {
    if (error != nullptr) {
      *error = n < 0 ? std::strerror(err) : "short send";
    }
    return false;
  }
  return true;
}

}  // namespace tollgate::app
