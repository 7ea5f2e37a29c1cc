#include "tollgate/common/fd_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

#include "support/alloc_counter.h"

namespace tollgate {
namespace {

TEST(fd_io_test, writes_everything_through_short_writes) {
  // Verifies a write larger than the pipe's buffer arrives whole: write(2) returns short
  // counts here, and write_all must keep going (without allocating).
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>('a' + i % 26);
  }
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) {
      got.append(buf, static_cast<size_t>(n));
    }
  });
  size_t written;
  {
    test::alloc_scope scope;
    written = write_all(fds[1], data);
    EXPECT_EQ(scope.count(), 0u);
  }
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_EQ(written, data.size());
  EXPECT_EQ(got, data);
}

TEST(fd_io_test, reports_how_much_was_written_when_the_write_fails) {
  // Verifies a failing write returns a count short of the request and leaves errno set.
  struct sigaction ign {};
  struct sigaction old {};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ign, &old), 0);
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);
  errno = 0;
  EXPECT_EQ(write_all(fds[1], "hello"), 0u);
  EXPECT_EQ(errno, EPIPE);
  ::close(fds[1]);
  ::sigaction(SIGPIPE, &old, nullptr);
  EXPECT_EQ(write_all(-1, "x"), 0u);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace tollgate
