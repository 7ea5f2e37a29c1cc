#include "access_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tollgate/common/json_out.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::app {
namespace {

void put_uint(out_buffer& out, uint64_t v) {
  const fmt::format_int f(v);
  out.append(f.data(), f.size());
}

void put_2(out_buffer& out, int v) {
  out.push_back(static_cast<char>('0' + v / 10));
  out.push_back(static_cast<char>('0' + v % 10));
}

// RFC 3339, UTC, microseconds: 2026-12-03T22:32:19.123456Z
void put_time(out_buffer& out, int64_t ns) {
  int64_t secs = ns / 1'000'000'000;
  int64_t frac = ns % 1'000'000'000;
  if (frac < 0) {
    frac += 1'000'000'000;
    --secs;
  }
  int64_t days = secs / 86400;
  int64_t sod = secs % 86400;
  if (sod < 0) {
    sod += 86400;
    --days;
  }
  const quota::civil_date d = quota::civil_from_days(days);
  char buf[40];
  const int n = std::snprintf(buf, sizeof(buf), "%04lld-%02d-%02dT", static_cast<long long>(d.year),
                              d.month, d.day);
  out.append(buf, static_cast<size_t>(n));
  put_2(out, static_cast<int>(sod / 3600));
  out.push_back(':');
  put_2(out, static_cast<int>(sod / 60 % 60));
  out.push_back(':');
  put_2(out, static_cast<int>(sod % 60));
  out.push_back('.');
  const auto us = static_cast<int>(frac / 1000);
  char f[7];
  for (int i = 5, v = us; i >= 0; --i, v /= 10) {
    f[i] = static_cast<char>('0' + v % 10);
  }
  out.append(f, 6);
  out.push_back('Z');
}

void put_string_field(out_buffer& out, std::string_view name, std::string_view value) {
  out.append(",\"");
  out.append(name);
  out.append("\":\"");
  append_json_escaped(out, value);
  out.push_back('"');
}

void put_uint_field(out_buffer& out, std::string_view name, uint64_t v) {
  out.append(",\"");
  out.append(name);
  out.append("\":");
  put_uint(out, v);
}

}  // namespace

void format_access_line(out_buffer& out, const request_record& r, int core, int64_t latency_ns) {
  out.append("{\"time\":\"");
  put_time(out, r.time_ns);
  out.push_back('"');
  put_uint_field(out, "core", static_cast<uint64_t>(core));
  put_string_field(out, "remote", r.peer.view());
  if (r.tls.len != 0) {
    put_string_field(out, "tls", r.tls.view());
  }
  put_string_field(out, "method", r.method.view());
  put_string_field(out, "route", route_name(r.r));
  if (r.mcp_method.len != 0) {
    put_string_field(out, "mcp_method", r.mcp_method.view());
  }
  if (r.tool.len != 0) {
    put_string_field(out, "tool", r.tool.view());
  }
  if (r.key_id != 0) {
    std::array<char, quota::key_id_length> id;
    put_string_field(out, "key_id", quota::key_id_text(r.key_id, id));
    put_string_field(out, "account", r.account.view());
  }
  put_uint_field(out, "status", r.status);
  put_string_field(out, "outcome", name_of(r.result));
  out.append(r.billed != 0 ? ",\"billed\":true" : ",\"billed\":false");
  out.append(r.overage != 0 ? ",\"overage\":true" : ",\"overage\":false");
  put_uint_field(out, "latency_us", static_cast<uint64_t>(latency_ns < 0 ? 0 : latency_ns / 1000));
  put_uint_field(out, "bytes_in", r.bytes_in);
  put_uint_field(out, "bytes_out", r.bytes_out);
  if (r.shards_total != 0) {
    out.append(",\"shards\":{\"answered\":");
    put_uint(out, r.shards_answered);
    out.append(",\"total\":");
    put_uint(out, r.shards_total);
    out.push_back('}');
  }
  out.append("}\n");
}

result<std::unique_ptr<access_log>, std::string> access_log::open(const std::string& path,
                                                                  double sample) {
  std::unique_ptr<access_log> log(new access_log(path, sample));
  const int fd = log->open_fd();
  if (fd < 0) {
    return unexpected(fmt::format("access log {}: {}", path, std::strerror(-fd)));
  }
  if (!log->to_stderr()) {
    ::close(fd);
  }
  return log;
}

int access_log::open_fd() const noexcept {
  if (to_stderr()) {
    return STDERR_FILENO;
  }
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  return fd < 0 ? -errno : fd;
}

access_log_core::access_log_core(access_log& log, int core, request_metrics* metrics)
    : log_(log), core_(core), metrics_(metrics), gen_(log.generation()) {
  fd_ = log_.open_fd();
  fill_.reserve(flush_bytes * 2);
  inflight_.reserve(flush_bytes * 2);
}

access_log_core::~access_log_core() {
  // Shutdown: the engine waited for the last ring write; what is left goes out with write(2).
  auto drain = [&](const char* p, size_t n) {
    while (n > 0 && fd_ >= 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) {
        continue;
      }
      if (w <= 0) {
        break;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  };
  if (!busy_) {
    drain(inflight_.data() + inflight_off_, inflight_.size() - inflight_off_);
  }
  drain(fill_.data(), fill_.size());
  if (fd_ > STDERR_FILENO) {
    ::close(fd_);
  }
}

void access_log_core::dropped(uint64_t lines) {
  if (metrics_ != nullptr && lines != 0) {
    metrics_->log_dropped(core_, lines);
  }
}

void access_log_core::append(const request_record& r, int64_t latency_ns) {
  if (fill_.size() >= max_buffered) {
    dropped(1);
    return;
  }
  format_access_line(fill_, r, core_, latency_ns);
  ++fill_lines_;
}

void access_log_core::reopen_if_asked() {
  const uint64_t g = log_.generation();
  if (g == gen_) {
    return;
  }
  gen_ = g;
  if (log_.to_stderr()) {
    return;
  }
  const int fd = log_.open_fd();
  if (fd < 0) {
    log_error("access log {}: reopen failed: {}; still writing to the old file", log_.path(),
              std::strerror(-fd));
    return;
  }
  if (fd_ >= 0) {
    ::close(fd_);
  }
  fd_ = fd;
}

void access_log_core::flush(bool timed) {
  if (busy_) {
    return;
  }
  reopen_if_asked();
  if (fill_.size() == 0 || (!timed && fill_.size() < flush_bytes)) {
    return;
  }
  std::swap(fill_, inflight_);
  fill_.clear();
  inflight_off_ = 0;
  inflight_lines_ = fill_lines_;
  fill_lines_ = 0;
  start_write();
}

void access_log_core::start_write() {
  const char* p = inflight_.data() + inflight_off_;
  const size_t n = inflight_.size() - inflight_off_;
  if (fd_ < 0) {
    on_written(fd_);
    return;
  }
  if (io_ != nullptr && io_->write_file(fd_, p, n, 0)) {
    busy_ = true;
    return;
  }
  ssize_t w;
  do {
    w = ::write(fd_, p, n);
  } while (w < 0 && errno == EINTR);
  on_written(w < 0 ? -errno : w);
}

void access_log_core::on_written(int64_t res) {
  busy_ = false;
  const size_t left = inflight_.size() - inflight_off_;
  if (res > 0 && static_cast<size_t>(res) < left) {
    inflight_off_ += static_cast<size_t>(res);  // a short write: the rest goes next
    start_write();
    return;
  }
  if (res < 0 || static_cast<size_t>(res) != left) {
    // The batch's unwritten lines are dropped; the server keeps serving.
    uint64_t lines = 0;
    for (size_t i = inflight_off_; i < inflight_.size(); ++i) {
      lines += inflight_.data()[i] == '\n' ? 1 : 0;
    }
    dropped(lines);
    if (metrics_ != nullptr && inflight_lines_ > lines) {
      metrics_->log_written(core_, inflight_lines_ - lines);
    }
    if (!failing_) {
      log_error("access log {}: write failed: {}; dropping lines until it works again", log_.path(),
                std::strerror(res < 0 ? static_cast<int>(-res) : EIO));
      failing_ = true;
    }
  } else {
    if (metrics_ != nullptr) {
      metrics_->log_written(core_, inflight_lines_);
    }
    if (failing_) {
      log_info("access log {}: writing again", log_.path());
      failing_ = false;
    }
  }
  inflight_.clear();
  inflight_off_ = 0;
  inflight_lines_ = 0;
}

}  // namespace tollgate::app
