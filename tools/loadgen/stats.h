// Per-thread results of a load run: the latency histogram and the outcome counts, mergeable
// after the run.
//
// Core-local: each load thread owns one; the main thread merges them after join.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "check.h"
#include "histogram.h"

namespace tollgate::loadgen {

/// One kind of non-success outcome and how often it happened.
struct outcome_row {
  outcome_kind kind = outcome_kind::ok;
  int code = 0;
  std::string detail;
  std::uint64_t count = 0;
  std::string sample;  ///< the start of the first such response body (for diagnosis)
};

/// Counts outcomes by kind. Successes are a plain counter; everything else a small table
/// that allocates only when a new kind first appears.
class outcome_table {
 public:
  static constexpr std::size_t max_rows = 64;  ///< further distinct kinds fold into "(other)"
  static constexpr std::size_t sample_bytes = 240;

  void add(const outcome& o, std::string_view body, std::uint64_t n = 1) {
    if (o.kind == outcome_kind::ok) {
      ok_ += n;
      return;
    }
    std::string_view detail = o.detail.substr(0, 64);
    for (auto& r : rows_) {
      if (r.kind == o.kind && r.code == o.code && r.detail == detail) {
        r.count += n;
        return;
      }
    }
    if (rows_.size() >= max_rows) {
      detail = "(other)";
      for (auto& r : rows_) {
        if (r.kind == o.kind && r.detail == detail) {
          r.count += n;
          return;
        }
      }
    }
    rows_.push_back(outcome_row{o.kind, o.code, std::string(detail), n,
                                std::string(body.substr(0, sample_bytes))});
  }

  void merge(const outcome_table& o) {
    ok_ += o.ok_;
    for (const auto& r : o.rows_) {
      bool found = false;
      for (auto& m : rows_) {
        if (m.kind == r.kind && m.code == r.code && m.detail == r.detail) {
          m.count += r.count;
          found = true;
          break;
        }
      }
      if (!found) {
        rows_.push_back(r);
      }
    }
  }

  std::uint64_t ok() const noexcept { return ok_; }
  std::uint64_t errors() const noexcept {
    std::uint64_t n = 0;
    for (const auto& r : rows_) {
      n += r.count;
    }
    return n;
  }
  const std::vector<outcome_row>& rows() const noexcept { return rows_; }

 private:
  std::uint64_t ok_ = 0;
  std::vector<outcome_row> rows_;
};

/// Everything one load thread measured inside the measurement window.
struct thread_stats {
  histogram latency;            ///< ns from (intended) send to the last byte read
  outcome_table outcomes;       ///< responses and transport failures
  std::uint64_t responses = 0;  ///< responses read (any outcome; transport errors excluded)
  std::uint64_t bytes_read = 0;
  std::uint64_t connects = 0;         ///< successful connects, whole run
  std::uint64_t backlog_at_end = 0;   ///< open loop: requests due but never sent
  std::uint64_t inflight_at_end = 0;  ///< sent, no response by the end
  std::uint64_t passes = 0;           ///< loop passes (io_uring_enter calls) in the window
  std::uint64_t cqes = 0;             ///< completions handled in the window
  std::uint64_t counted = 0;          ///< outcomes counted (responses + transport errors)
  std::uint64_t finished_ns = 0;      ///< CLOCK_MONOTONIC when the thread stopped
  std::string fatal;                  ///< set when the thread could not run at all
  std::uint64_t memo_hits = 0;  ///< full checks answered by the identical-answer memo (whole run)
  std::uint64_t tcp_segs_out = 0;  ///< TCP segments the client's sockets sent in the window
  std::uint64_t tcp_data_segs_out =
      0;                  ///< of those, the ones carrying data (the rest: ACKs, SYN, FIN)
  unsigned features = 0;  ///< ring_feature bits the thread's ring runs with
  std::string ring_note;  ///< why a requested feature is not in use (empty: all are)
};

}  // namespace tollgate::loadgen
