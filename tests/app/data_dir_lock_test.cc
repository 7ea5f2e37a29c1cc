#include "app/data_dir_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "quota/test_util.h"

namespace tollgate::app {
namespace {

TEST(data_dir_lock_test, a_second_holder_is_refused_until_the_first_lets_go) {
  // Verifies the lock is exclusive (flock locks belong to the open file, so a second acquire
  // in this same process is refused like another process's would be), the refusal names the
  // holder's pid, and the lock is free again once the holder is gone.
  quota::test::temp_dir dir;
  auto first = data_dir_lock::acquire(dir.path());
  ASSERT_TRUE(first) << first.error();
  auto second = data_dir_lock::acquire(dir.path());
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().find("in use by another tollgate server (pid " +
                                std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.error();
  {
    data_dir_lock moved = std::move(*first);  // the lock travels with the object
    EXPECT_FALSE(data_dir_lock::acquire(dir.path()));
  }
  auto third = data_dir_lock::acquire(dir.path());
  EXPECT_TRUE(third) << third.error();
}

TEST(data_dir_lock_test, a_missing_data_dir_is_an_error_not_a_crash) {
  quota::test::temp_dir dir;
  auto r = data_dir_lock::acquire(dir.path() + "/no/such/dir");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("server.lock"), std::string::npos) << r.error();
}

}  // namespace
}  // namespace tollgate::app
