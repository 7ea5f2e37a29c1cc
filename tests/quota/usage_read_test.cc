#include "tollgate/quota/usage_read.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "quota/journal.h"
#include "quota/test_util.h"

namespace tollgate::quota {
namespace {

void append_records(const std::string& path, std::initializer_list<journal::record> rs) {
  std::ofstream f(path, std::ios::binary | std::ios::app);
  for (const auto& r : rs) {
    char buf[journal::kRecordSize];
    journal::encode(buf, r);
    f.write(buf, sizeof buf);
  }
}

TEST(usage_read_test, snapshot_plus_journal_bytes_after_what_it_covers) {
  // Verifies read_month_usage counts the snapshot's figures and only the journal bytes past the
  // snapshot's `covered` offset (so a record is never counted twice), skips generations the
  // snapshot covers, ignores other months, and reads a torn tail as nothing.
  test::temp_dir d;
  const std::string u = d.path() + "/usage";
  std::filesystem::create_directories(u);
  const uint32_t m = 2026 * 12 + 10;
  // Core 0, generation 1: two records, the first covered by the snapshot.
  append_records(u + "/journal-0-1.bin", {{m, 7, 3, 0, true}, {m, 7, 2, 1, true}});
  // Core 0, generation 0: wholly covered (a leftover the server would have compacted).
  append_records(u + "/journal-0-0.bin", {{m, 7, 100, 0, true}});
  // Core 1, generation 0: no coverage; one record of another month, a torn tail.
  append_records(u + "/journal-1-0.bin", {{m, 9, 4, 4, true}, {m - 1, 9, 50, 0, true}});
  std::ofstream(u + "/journal-1-0.bin", std::ios::binary | std::ios::app) << "TGJ2abc";
  std::ofstream(u + "/snapshot.txt")
      << "tollgate-usage v1\nmonth " << m << "\ncovered 0 1 " << journal::kRecordSize << "\n"
      << "used " << m << " key_0000000000000007 10 0\n"
      << "used " << (m - 1) << " key_0000000000000009 1 0\n";
  auto r = read_month_usage(d.path(), m);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(r->at(7).used, 12);  // 10 from the snapshot + 2 after it
  EXPECT_EQ(r->at(7).overage, 1);
  EXPECT_EQ(r->at(9).used, 4);
  EXPECT_EQ(r->at(9).overage, 4);
  auto prev = read_month_usage(d.path(), m - 1);
  ASSERT_TRUE(prev);
  EXPECT_EQ(prev->at(9).used, 51);
}

TEST(usage_read_test, a_month_missing_from_the_snapshot_comes_from_its_archive) {
  // Verifies the closed month's archive is read when the snapshot holds no line of the month,
  // and that a malformed snapshot line is an error naming the file and line.
  test::temp_dir d;
  const std::string u = d.path() + "/usage";
  std::filesystem::create_directories(u);
  const uint32_t m = 2025 * 12 + 1;
  std::ofstream(u + "/month-2025-02.txt")
      << "# tollgate usage for 2025-02\nused " << m << " key_00000000000000aa 5 2\n";
  auto r = read_month_usage(d.path(), m);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->at(0xaa).used, 5);
  EXPECT_EQ(r->at(0xaa).overage, 2);
  std::ofstream(u + "/snapshot.txt") << "tollgate-usage v1\nbogus line\n";
  auto bad = read_month_usage(d.path(), m);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("snapshot.txt:2:"), std::string::npos) << bad.error();
}

TEST(usage_read_test, parse_month_takes_only_yyyy_mm) {
  // Verifies the month argument's rule.
  EXPECT_EQ(*parse_month("2026-11"), 2026u * 12 + 10);
  for (const char* bad : {"2026-13", "2026-00", "2026-1", "26-11", "2026/11", "", "2026-11x"}) {
    EXPECT_FALSE(parse_month(bad)) << bad;
  }
}

}  // namespace
}  // namespace tollgate::quota
