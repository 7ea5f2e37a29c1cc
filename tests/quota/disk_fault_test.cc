// The quota core on a data dir that cannot be written: a start whose journal cannot be opened
// is refused, naming the path and errno. The directory is made unwritable with the immutable
// attribute (FS_IMMUTABLE_FL), which binds root too; where the file system or the process
// cannot set it, the test is skipped and says why.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "quota/test_util.h"

namespace tollgate::quota {
namespace {

using test::temp_dir;
using test::utc_ns;

const int64_t kNow = utc_ns(2026, 12, 2, 12, 0, 0);

/// Sets or clears the immutable attribute of a directory; false when that is not possible here.
bool set_immutable(const std::string& dir, bool on) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (ok) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  ::close(fd);
  return ok;
}

/// Makes `dir` immutable for its lifetime (nothing can be created in it, by root either).
class immutable_dir {
 public:
  explicit immutable_dir(std::string dir) : dir_(std::move(dir)), ok_(set_immutable(dir_, true)) {}
  ~immutable_dir() {
    if (ok_) {
      set_immutable(dir_, false);
    }
  }
  bool ok() const { return ok_; }

 private:
  std::string dir_;
  bool ok_;
};

TEST(quota_disk_fault_test, a_start_whose_journal_cannot_be_opened_is_refused_naming_it) {
  // Verifies service::open fails (instead of starting a server that could never record a
  // billed call) when the core's journal file cannot be created, naming the file and errno.
  temp_dir d;
  test::add_key(d.path(), "a", "free");
  auto o = test::options(d.path());
  test::open_service(o, kNow).reset();  // creates usage/ and the first journal generation
  immutable_dir frozen(d.path() + "/usage");
  if (!frozen.ok()) {
    GTEST_SKIP() << "cannot set the immutable attribute on " << d.path() << "/usage here";
  }
  auto r = service::open(o, kNow);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find(d.path() + "/usage/journal-0-"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("errno"), std::string::npos) << r.error();
}

}  // namespace
}  // namespace tollgate::quota
