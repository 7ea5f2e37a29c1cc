// stdio transport: newline-delimited JSON-RPC on a pair of file descriptors (see endpoint.h).
// Reads into one buffer that always keeps body_padding spare bytes after its contents, so each
// line parses in place; responses go out one per line, flushed once per read.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tollgate/common/fd_io.h"
#include "tollgate/common/log.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {

namespace {

enum class wait_result : uint8_t { input, again, stop, failed };

// Waits for input or an event. Input is read first when both are ready; the event is then
// handled at the end of this pass (`event_ready`), so a stream of input cannot hold it off.
// Everything read so far has been answered and flushed by then, so stopping loses no answer.
wait_result wait_for_input(int in_fd, const stdio_events& events, bool& event_ready) {
  pollfd fds[2] = {{in_fd, POLLIN, 0}, {events.fd, POLLIN, 0}};
  if (::poll(fds, 2, -1) < 0) {
    if (errno == EINTR) {
      return wait_result::again;
    }
    log_error("stdio: poll failed: {}", std::strerror(errno));
    return wait_result::failed;
  }
  event_ready = fds[1].revents != 0;
  if (fds[0].revents == 0) {
    return events.on_ready(events.ctx) ? wait_result::again : wait_result::stop;
  }
  return wait_result::input;
}

// Answers every complete line of `in` from `start` on, each response followed by a newline in
// `out`; returns where the incomplete tail starts.
size_t answer_lines(endpoint& ep, host& h, out_buffer& in, size_t start, out_buffer& out) {
  size_t scan = start;
  for (;;) {
    const char* base = in.data();
    const void* nl = std::memchr(base + scan, '\n', in.size() - scan);
    if (nl == nullptr) {
      return start;
    }
    const size_t end = static_cast<size_t>(static_cast<const char*>(nl) - base);
    std::string_view line(base + start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    if (!line.empty()) {
      const size_t before = out.size();
      ep.handle_message(line, h, out);
      if (out.size() != before) {
        out.push_back('\n');
      }
    }
    start = scan = end + 1;
  }
}

}  // namespace

int run_stdio(endpoint& ep, host& h, int in_fd, int out_fd, const stdio_events& events) {
  out_buffer in(64 * 1024);
  out_buffer out(64 * 1024);
  size_t start = 0;  // first byte of the current (incomplete) line
  bool eof = false;
  while (!eof) {
    bool event_ready = false;
    if (events.fd >= 0) {
      switch (wait_for_input(in_fd, events, event_ready)) {
        case wait_result::again:
          continue;
        case wait_result::stop:
          return 0;
        case wait_result::failed:
          return 1;
        case wait_result::input:
          break;
      }
    }
    // Keep room for a read plus the padding simdjson may read past a line's end.
    char* dst = in.prepare(16 * 1024 + body_padding);
    ssize_t n = ::read(in_fd, dst, 16 * 1024);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      log_error("stdio: read failed: {}", std::strerror(errno));
      return 1;
    }
    if (n == 0) {
      eof = true;
      // A last line without its newline still counts.
      if (in.size() > start) {
        in.push_back('\n');
      }
    } else {
      in.commit(static_cast<size_t>(n));
    }
    in.reserve(in.size() + body_padding);  // padding after the last line
    start = answer_lines(ep, h, in, start, out);
    if (!out.empty()) {
      if (write_all(out_fd, {out.data(), out.size()}) != out.size()) {
        log_error("stdio: write failed: {}", std::strerror(errno));
        return 1;
      }
      out.clear();
    }
    // Move the incomplete tail to the front.
    in.consume(start);
    start = 0;
    if (event_ready && !eof && !events.on_ready(events.ctx)) {
      return 0;
    }
  }
  return 0;
}

}  // namespace tollgate::mcp
