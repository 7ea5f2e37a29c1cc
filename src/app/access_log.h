// The access log: one JSON line per answered request ([log] access = "PATH", "-" for stderr).
//
// Off the request path: each core formats its lines into its own buffer at the end of a loop
// pass and its ring writes the buffer in batches (engine_io::write_file): when 64 KiB have
// gathered, and on the core's ~100 ms tick, one write at a time per core; never a syscall per
// request. Lines gather in a second buffer while a write is in flight; past max_buffered bytes
// they are dropped and counted (tollgate_access_log_dropped_lines_total), as are the lines of a
// write that fails (a full disk, an I/O error): the server keeps serving either way.
//
// Reopening (SIGUSR1, logrotate's postrotate): access_log::request_reopen() bumps a generation;
// each core opens the path again itself at its next flush with no write in flight, and closes
// its old descriptor, so no descriptor is ever shared between threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "metrics.h"
#include "request_record.h"
#include "tollgate/common/buffer.h"
#include "tollgate/common/result.h"
#include "tollgate/http/handler.h"

namespace tollgate::app {

/// The log's destination and settings, shared by the cores. Thread-safe.
class access_log {
 public:
  /// Opens `path` for appending (created 0640 when missing) to check that it can be written;
  /// "-" is stderr. `sample`: the share of successful requests logged (errors always are).
  static result<std::unique_ptr<access_log>, std::string> open(const std::string& path,
                                                               double sample);
  /// Opens the path for one core's writes (O_APPEND); -errno on failure. stderr: 2.
  int open_fd() const noexcept;
  /// Any thread (the signal loop): every core reopens the path at its next flush.
  void request_reopen() noexcept { gen_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t generation() const noexcept { return gen_.load(std::memory_order_relaxed); }
  const std::string& path() const noexcept { return path_; }
  bool to_stderr() const noexcept { return path_ == "-"; }
  double sample() const noexcept { return sample_; }

 private:
  access_log(std::string path, double sample) : path_(std::move(path)), sample_(sample) {}
  std::string path_;
  double sample_;
  std::atomic<uint64_t> gen_{0};
};

/// Appends the JSON line of `r` (latency `latency_ns`, core `core`) to `out`. Never the key.
void format_access_line(out_buffer& out, const request_record& r, int core, int64_t latency_ns);

/// One core's log buffers. Core-local.
class access_log_core {
 public:
  static constexpr size_t flush_bytes = 64 * 1024;
  static constexpr size_t max_buffered = 4 * 1024 * 1024;

  access_log_core(access_log& log, int core, request_metrics* metrics);
  /// Writes what is left with write(2) (shutdown), then closes its descriptor.
  ~access_log_core();
  void attach(http::engine_io* io) noexcept { io_ = io; }

  /// Formats one line into the filling buffer (dropped and counted when it is full).
  void append(const request_record& r, int64_t latency_ns);
  /// End of a pass (`timed` false: only past flush_bytes) or the tick (`timed`: anything).
  void flush(bool timed);
  /// The completion of the ring write.
  void on_written(int64_t res);

 private:
  void start_write();
  void reopen_if_asked();
  void dropped(uint64_t lines);

  access_log& log_;
  int core_;
  request_metrics* metrics_;
  http::engine_io* io_ = nullptr;
  int fd_ = -1;
  uint64_t gen_ = 0;
  out_buffer fill_;
  uint64_t fill_lines_ = 0;
  out_buffer inflight_;
  size_t inflight_off_ = 0;  // bytes of inflight_ already written
  uint64_t inflight_lines_ = 0;
  bool busy_ = false;
  bool failing_ = false;  // the last write failed (logged once until one succeeds)
};

}  // namespace tollgate::app
