#include "tollgate/common/fd_io.h"

#include <unistd.h>

#include <cerrno>

namespace tollgate {

size_t write_all(int fd, std::string_view data) noexcept {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    done += static_cast<size_t>(w);
  }
  return done;
}

}  // namespace tollgate
