// progress_meter: progress of long start-up or batch work on stderr (loading a large corpus,
// `corpus generate`). Items per second and, when the total is known, the share done and an
// estimate to the end; nothing for work done within a second.
//   - On a terminal: one line redrawn in place (at most 5 times a second, only when its text
//     changed), ended by the final line.
//   - Elsewhere (a log file, journald, a pipe): sparse plain lines: one when the share done
//     passes a further tenth (at most one a second), else one every 30 s while the count
//     advances (every 5 s when the share is unknown); never one that repeats the last; then
//     the final line.
// The rate is over the time the count advanced (start to its last change), so work that goes
// on after the count stops (building the index once every story is parsed) does not drag it
// down; the final line adds the whole time ("done in").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

namespace tollgate {

class progress_meter {
 public:
  using clock = std::chrono::steady_clock;
  /// Where the meter reads the time (tests pass a fake clock).
  using now_fn = clock::time_point (*)();
  /// `what`: the work ("loading corpus.jsonl"); `unit`: what is counted ("stories"). `tty`
  /// decides the style (default: whether `out` is a terminal).
  progress_meter(std::string what, std::string unit, std::FILE* out = stderr, int tty = -1,
                 now_fn now = &clock::now);
  /// Prints the final line (on a terminal: replaces the updating one) unless nothing was shown.
  ~progress_meter();
  /// The work's own thread: `done` items so far and the share of the work done (0-1; < 0:
  /// unknown). Cheap: prints at most once an interval.
  void update(uint64_t done, double fraction = -1);
  /// The text of one report (for tests): "what: 1234 stories, 567/s, 12%, ~3 s left". The rate
  /// is `done` over `secs` (the time the count advanced); the time left is the share still to
  /// do at the pace of the share done over `elapsed` (< 0: `secs`), which goes on past the
  /// count when the work does (a build after the parse).
  static std::string line(const std::string& what, const std::string& unit, uint64_t done,
                          double fraction, double secs, double elapsed = -1);

 private:
  void print(bool final);
  std::string what_;
  std::string unit_;
  std::FILE* out_;
  bool tty_;
  now_fn now_;
  clock::time_point start_;
  clock::time_point next_;     // no line before it
  clock::time_point changed_;  // when the count last changed
  uint64_t last_ = 0;
  double fraction_ = -1;
  bool shown_ = false;
  // the last line shown: its text, when, its count and its tenth of the share (-1: unknown)
  std::string shown_text_;
  clock::time_point shown_at_;
  uint64_t shown_done_ = 0;
  int shown_tenth_ = -1;
};

/// Reports work other threads advance (`done` items; `share` of the work done, 0-1 or < 0 for
/// unknown, e.g. from bytes of a file parsed and the steps after) from a thread of its own until
/// it is destroyed (then a final line). For work that cannot call update() itself (a parallel
/// parse and build). `share` is called from that thread.
class progress_watch {
 public:
  progress_watch(std::string what, std::string unit, const std::atomic<uint64_t>& done,
                 std::function<double()> share, std::FILE* out = stderr);
  ~progress_watch();

 private:
  void tick();
  progress_meter meter_;
  const std::atomic<uint64_t>& done_;
  std::function<double()> share_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tollgate
