#include "tollgate/common/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>

namespace tollgate {
namespace {

std::string slurp(std::FILE* f) {
  std::string s;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    s.append(buf, n);
  }
  return s;
}

TEST(progress_test, a_line_says_rate_share_and_estimate) {
  // Verifies one report's text: items, items per second, the share done and the time left at
  // the rate so far; without a known share only the first two.
  EXPECT_EQ(progress_meter::line("loading x.jsonl", "stories", 250000, 0.25, 10),
            "loading x.jsonl: 250.0k stories, 25.0k/s, 25%, ~30 s left");
  EXPECT_EQ(progress_meter::line("gen", "stories", 1500000, -1, 2), "gen: 1.50M stories, 750.0k/s");
  EXPECT_EQ(progress_meter::line("gen", "stories", 10, 0.001, 1),
            "gen: 10 stories, 10/s, 0%, ~16 min 39 s left");
}

TEST(progress_test, quick_work_prints_nothing) {
  // Verifies work that ends within the first second leaves stderr alone.
  std::FILE* f = std::tmpfile();
  {
    progress_meter m("gen", "stories", f, 1);
    m.update(5, 0.5);
  }
  EXPECT_EQ(slurp(f), "");
  std::fclose(f);
}

TEST(progress_test, a_terminal_gets_one_updating_line_and_a_log_plain_lines) {
  // Verifies the two styles: on a terminal each report rewrites the line (\r, erase to its end)
  // and the last ends it; elsewhere each report is a whole line of its own.
  for (int tty : {1, 0}) {
    std::FILE* f = std::tmpfile();
    {
      progress_meter m("gen", "stories", f, tty);
      std::this_thread::sleep_for(std::chrono::milliseconds(1100));
      m.update(100, 0.5);
      m.update(200, 1.0);
    }
    const std::string out = slurp(f);
    if (tty == 1) {
      EXPECT_EQ(out.rfind("\rgen: 100 stories, ", 0), 0u) << out;
      EXPECT_NE(out.find("\x1b[K"), std::string::npos);
      EXPECT_NE(out.find("\rgen: 200 stories, "), std::string::npos) << out;
      EXPECT_EQ(out.back(), '\n');
      EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    } else {
      EXPECT_EQ(out.find('\r'), std::string::npos) << out;
      EXPECT_EQ(out.rfind("tollgate: gen: 100 stories, ", 0), 0u) << out;
      EXPECT_NE(out.find("\ntollgate: gen: 200 stories, "), std::string::npos) << out;
      EXPECT_NE(out.find("done in 1 s\n"), std::string::npos) << out;
    }
    std::fclose(f);
  }
}

}  // namespace
}  // namespace tollgate
