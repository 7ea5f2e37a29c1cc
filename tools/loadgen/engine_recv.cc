// The runner's completions: connect, send and recv results; framing and checking responses
// against the oldest outstanding request; the tallies (engine_runner.h).
#include <liburing.h>
#include <linux/tcp.h>  // struct tcp_info with tcpi_segs_out (glibc's lacks it), TCP_* options
#include <netinet/in.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "engine_runner.h"

namespace tollgate::loadgen::detail {

void runner::handle(std::uint64_t data, int res, unsigned flags, std::uint64_t now) {
  auto i = static_cast<std::uint32_t>(data >> 8);
  auto o = static_cast<op>(data & 0xff);
  connection& c = conns_[i];
  // Bytes a multishot recv put in a provided buffer: framed from there (only an incomplete
  // tail is copied into the connection's buffer), then the buffer goes back to the kernel.
  const char* buf = nullptr;
  if (flags & IORING_CQE_F_BUFFER) {
    buf = bufs_ + static_cast<std::size_t>(flags >> IORING_CQE_BUFFER_SHIFT) * buf_size;
  }
  bool more = (flags & IORING_CQE_F_MORE) != 0;
  if (!more) {
    c.sqes--;
  }
  if (c.st == connection::state::closing) {
    if (o == op_send) {
      c.send_busy = false;
    }
    maybe_finish_close(i, now);
  } else {
    switch (o) {
      case op_connect:
        on_connect(i, res, now);
        break;
      case op_send:
        on_send(i, res, now);
        break;
      case op_recv:
        on_recv(i, res, more, buf, now);
        break;
    }
  }
  if (buf != nullptr) {
    recycle_buffer(flags >> IORING_CQE_BUFFER_SHIFT);
  }
}

void runner::on_connect(std::uint32_t i, int res, std::uint64_t now) {
  connection& c = conns_[i];
  if (res < 0) {
    count_transport(connect_reason(-res), now, 1);
    begin_close(i, nullptr, now, true);
    return;
  }
  c.st = connection::state::open;
  out_.connects++;
  if (cfg_.tls != nullptr && !tls_begin(i, now)) {
    return;
  }
  arm_recv(i);
  if (now >= t_.end) {
    return;
  }
  if (open_loop_) {
    push_free(i);
  } else {
    for (unsigned k = 0; k < cfg_.depth; k++) {
      issue(i, now);
    }
  }
}

const char* runner::connect_reason(int e) {
  switch (e) {
    case ECONNREFUSED:
      return "connect ECONNREFUSED";
    case ETIMEDOUT:
      return "connect ETIMEDOUT";
    case EADDRNOTAVAIL:
      return "connect EADDRNOTAVAIL";
    default:
      return "connect failed";
  }
}

void runner::on_send(std::uint32_t i, int res, std::uint64_t now) {
  connection& c = conns_[i];
  c.send_busy = false;
  if (res < 0) {
    begin_close(i, errno_name(-res), now, true);
    return;
  }
  c.fly_off += static_cast<std::size_t>(res);
  if (c.fly_off < c.out_fly.size()) {
    submit_send(i);
    return;
  }
  c.out_fly.clear();
  c.fly_off = 0;
  if (!c.out_q.empty() || tls_pending(c)) {
    mark_dirty(i);
  }
}

void runner::on_recv(std::uint32_t i, int res, bool more, const char* buf, std::uint64_t now) {
  connection& c = conns_[i];
  if (res == -ENOBUFS && br_ != nullptr) {
    arm_recv(i);  // buffers ran out for a moment; they are recycled as we go
    return;
  }
  if (res < 0) {
    begin_close(i, errno_name(-res), now, true);
    return;
  }
  bool eof = res == 0;
  auto n = static_cast<std::size_t>(res);
  if (in_window(now)) {
    out_.bytes_read += n;
  }
  if (c.ssl == nullptr && buf != nullptr && c.in_len == 0 && n > 0) {
    std::size_t used = 0;
    if (!frame_responses(i, buf, n, false, now, used)) {
      return;  // closing
    }
    append_in(c, buf + used, n - used);
  } else {
    if (c.ssl != nullptr) {
      if (!tls_feed(i, buf != nullptr ? buf : c.tls_in.data(), n, now)) {
        return;  // closing
      }
    } else if (buf != nullptr) {
      append_in(c, buf, n);
    } else {
      c.in_len += n;  // the recv read straight into c.in
    }
    std::size_t used = 0;
    if (!frame_responses(i, c.in.data(), c.in_len, eof, now, used)) {
      return;  // closing
    }
    if (used > 0) {
      std::memmove(c.in.data(), c.in.data() + used, c.in_len - used);
      c.in_len -= used;
    }
  }
  if (eof) {
    begin_close(i, "EOF with requests outstanding", now, false);
    return;
  }
  if (!more) {
    arm_recv(i);
  }
}

void runner::append_in(connection& c, const char* p, std::size_t n) {
  if (n == 0) {
    return;
  }
  if (c.in.size() - c.in_len < n) {
    c.in.resize(c.in_len + n > 2 * c.in.size() ? c.in_len + n : 2 * c.in.size());
  }
  std::memcpy(c.in.data() + c.in_len, p, n);
  c.in_len += n;
}

bool runner::frame_responses(std::uint32_t i, const char* data, std::size_t len, bool eof,
                             std::uint64_t now, std::size_t& used) {
  connection& c = conns_[i];
  std::size_t off = 0;
  bool keep = true;
  while (off < len) {
    frame_result r = c.parser.parse(data + off, len - off, eof);
    if (r == frame_result::incomplete) {
      break;
    }
    if (r == frame_result::error) {
      if (c.fifo_count > 0) {
        record(c, outcome{outcome_kind::bad_response, 0, frame_errc_name(c.parser.error())},
               std::string_view(data + off, len - off), now);
      } else {
        count_bad("bytes with no request outstanding", now);
      }
      begin_close(i, nullptr, now, true);
      keep = false;
      break;
    }
    if (c.fifo_count == 0) {
      count_bad("response with no request outstanding", now);
      begin_close(i, nullptr, now, true);
      keep = false;
      break;
    }
    const pending_req& p = c.fifo[c.fifo_head];
    expectation want{w_.spec(p.spec).kind, p.id, w_.expect_status()};
    outcome o = checker_.check(c.parser.head(), c.parser.body(), want, cfg_.level);
    record(c, o, c.parser.body(), now);
    off += c.parser.consumed();
    bool close = c.parser.head().close;
    c.parser.reset();
    if (close) {
      begin_close(i, nullptr, now, false);
      keep = false;
      break;
    }
    if (now < t_.end) {
      if (open_loop_) {
        push_free(i);
      } else {
        issue(i, now);
      }
    }
  }
  used = off;
  return keep;
}

void runner::record(connection& c, const outcome& o, std::string_view body, std::uint64_t now) {
  const pending_req& p = c.fifo[c.fifo_head];
  c.fifo_head = (c.fifo_head + 1) % c.fifo.size();
  c.fifo_count--;
  inflight_--;
  if (!in_window(now)) {
    return;
  }
  out_.responses++;
  out_.counted++;
  out_.latency.record(now > p.t0 ? now - p.t0 : 0);
  out_.outcomes.add(o, body);
}

void runner::count_transport(const char* why, std::uint64_t now, std::uint64_t n) {
  if (in_window(now)) {
    out_.outcomes.add(outcome{outcome_kind::transport, 0, why}, {}, n);
    out_.counted += n;
  }
}

void runner::count_bad(const char* why, std::uint64_t now) {
  if (in_window(now)) {
    out_.outcomes.add(outcome{outcome_kind::bad_response, 0, why}, {});
    out_.counted++;
  }
}

}  // namespace tollgate::loadgen::detail
