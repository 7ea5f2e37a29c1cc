#include "tollgate/common/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

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

// A fake clock the meters below read: tests move it by hand.
progress_meter::clock::time_point fake_now{std::chrono::hours(1)};
progress_meter::clock::time_point fake_clock() { return fake_now; }

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; at < s.size();) {
    const size_t end = s.find('\n', at);
    out.push_back(s.substr(at, end - at));
    at = end == std::string::npos ? s.size() : end + 1;
  }
  return out;
}

// An index build as the watch reports it: 200k stories parsed over 20 s (a report every 50 ms,
// the count and the share moving together), then 60 s of building with every story parsed.
void run_build(progress_meter& m) {
  constexpr int steps = 400;
  for (int i = 1; i <= steps; ++i) {
    fake_now += std::chrono::milliseconds(50);
    m.update(200000ULL * i / steps, static_cast<double>(i) / steps);
  }
  for (int i = 0; i < 1200; ++i) {
    fake_now += std::chrono::milliseconds(50);
    m.update(200000, 1.0);
  }
}

TEST(progress_test, off_a_terminal_a_line_per_tenth_and_one_final_line) {
  // Verifies the log style over a build whose count stops long before the work ends: at most
  // one line per tenth of the share, "100%" once, no line while only the work after the count
  // goes on, one final line, and a rate over the time the count advanced (10k/s), not one that
  // falls as the build goes on.
  std::FILE* f = std::tmpfile();
  {
    progress_meter m("indexing c.jsonl", "stories", f, 0, &fake_clock);
    run_build(m);
  }
  const std::vector<std::string> lines = lines_of(slurp(f));
  std::fclose(f);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_LE(lines.size(), 11u + 1u);  // the tenths from the first line at 1 s, and the final
  size_t hundred = 0;
  for (const std::string& l : lines) {
    EXPECT_EQ(l.rfind("tollgate: indexing c.jsonl: ", 0), 0u) << l;
    hundred += l.find("100%") != std::string::npos ? 1 : 0;
    EXPECT_NE(l.find(", 10.0k/s"), std::string::npos) << l;
  }
  EXPECT_EQ(hundred, 1u);
  EXPECT_NE(lines[lines.size() - 2].find("200.0k stories, 10.0k/s, 100%"), std::string::npos);
  EXPECT_EQ(lines.back(),
            "tollgate: indexing c.jsonl: 200.0k stories, 10.0k/s, done in 1 min 20 s");
}

TEST(progress_test, a_share_that_moves_on_after_the_count_estimates_from_the_whole_time) {
  // Verifies a build whose share keeps moving after its count stops (the stories parsed in
  // 10 s, the share 10% by then, the rest over the next 90 s): a line per further tenth, the
  // rate over the 10 s of counting, and the time left from all the time so far (at 50%,
  // after 50 s: ~50 s), not from the 10 s the count moved (that said ~10 s).
  std::FILE* f = std::tmpfile();
  {
    progress_meter m("indexing c.jsonl", "stories", f, 0, &fake_clock);
    for (int i = 1; i <= 200; ++i) {
      fake_now += std::chrono::milliseconds(50);
      m.update(100000ULL * i / 200, 0.1 * i / 200);
    }
    for (int i = 1; i <= 1800; ++i) {
      fake_now += std::chrono::milliseconds(50);
      m.update(100000, 0.1 + 0.9 * i / 1800);
    }
  }
  const std::vector<std::string> lines = lines_of(slurp(f));
  std::fclose(f);
  ASSERT_GE(lines.size(), 10u);
  EXPECT_LE(lines.size(), 12u);
  size_t half = 0;
  for (const std::string& l : lines) {
    EXPECT_NE(l.find(", 10.0k/s"), std::string::npos) << l;
    half += l.find("100.0k stories, 10.0k/s, 50%, ~50 s left") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(half, 1u) << lines[5];
  EXPECT_EQ(lines.back(),
            "tollgate: indexing c.jsonl: 100.0k stories, 10.0k/s, done in 1 min 40 s");
}

TEST(progress_test, on_a_terminal_one_line_redrawn_only_when_it_changes) {
  // Verifies the terminal style over the same build: one line (a single newline, at the end),
  // redrawn while the count moves and not at all while the build goes on after it stopped.
  std::FILE* f = std::tmpfile();
  long before_final = 0;
  {
    progress_meter m("indexing c.jsonl", "stories", f, 1, &fake_clock);
    run_build(m);
    before_final = std::ftell(f);
  }
  const std::string out = slurp(f);
  std::fclose(f);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(out.back(), '\n');
  const std::string shown = out.substr(0, static_cast<size_t>(before_final));
  // redrawn about 5 times a second for the 19 s after the first second, never after
  EXPECT_GE(std::count(shown.begin(), shown.end(), '\r'), 50) << shown;
  EXPECT_LE(std::count(shown.begin(), shown.end(), '\r'), 100) << shown;
  EXPECT_NE(shown.rfind("\rindexing c.jsonl: 200.0k stories, 10.0k/s, 100%\x1b[K"),
            std::string::npos);
  EXPECT_EQ(shown.find("100%"), shown.rfind("100%")) << "redrawn at 100% after the count stopped";
  EXPECT_EQ(out.substr(static_cast<size_t>(before_final)),
            "\rindexing c.jsonl: 200.0k stories, 10.0k/s, done in 1 min 20 s\x1b[K\n");
}

TEST(progress_test, off_a_terminal_an_unknown_share_gets_a_line_every_5_s_while_it_moves) {
  // Verifies work of unknown size logs every 5 s while its count advances and stays silent
  // while it does not.
  std::FILE* f = std::tmpfile();
  {
    progress_meter m("gen", "stories", f, 0, &fake_clock);
    for (int i = 1; i <= 400; ++i) {  // 20 s counting
      fake_now += std::chrono::milliseconds(50);
      m.update(static_cast<uint64_t>(i) * 100);
    }
    for (int i = 0; i < 400; ++i) {  // 20 s still
      fake_now += std::chrono::milliseconds(50);
      m.update(40000);
    }
  }
  const std::vector<std::string> lines = lines_of(slurp(f));
  std::fclose(f);
  // at 1, 6, 11 and 16 s, at 21 s the count reached at 20 s, then nothing until the final line
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[4], "tollgate: gen: 40.0k stories, 2000/s");
  EXPECT_EQ(lines.back(), "tollgate: gen: 40.0k stories, 2000/s, done in 40 s");
}

}  // namespace
}  // namespace tollgate
