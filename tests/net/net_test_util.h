// Helpers for the engine's in-process integration tests: a blocking loopback HTTP client with
// bounded waits, an echo handler, and a started-server wrapper. Test code only.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "tollgate/http/handler.h"
#include "tollgate/net/features.h"
#include "tollgate/net/server.h"

namespace tollgate::net::testing {

/// Skips the test when this kernel cannot run the engine at all.
#define TOLLGATE_SKIP_WITHOUT_RING()                                              \
  do {                                                                            \
    const std::string why_ = ::tollgate::net::probe_features().unusable_reason(); \
    if (!why_.empty()) {                                                          \
      GTEST_SKIP() << why_;                                                       \
    }                                                                             \
  } while (0)

inline int64_t ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0)
      .count();
}

struct response {
  int status = 0;
  std::string head;  ///< status line and headers
  std::string body;
  bool has_header(std::string_view line) const { return head.find(line) != std::string::npos; }
};

/// A blocking TCP client on 127.0.0.1 whose reads all have deadlines.
class client {
 public:
  explicit client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (connected_) {
      const int one = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  }
  ~client() { close(); }
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  void close() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }

  bool send_all(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) {
          continue;
        }
        return false;
      }
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  /// Reads more bytes into the pending buffer. Returns bytes read, 0 on EOF/reset, -1 on
  /// timeout.
  int read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    int pr;
    do {  // EINTR: io_uring task work of a ring this thread once made can interrupt waits
      pr = ::poll(&p, 1, timeout_ms);
    } while (pr < 0 && errno == EINTR);
    if (pr == 0) {
      return -1;
    }
    char tmp[65536];
    ssize_t n;
    do {
      n = ::recv(fd_, tmp, sizeof tmp, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) {
      return -1;  // (poll said readable, but nothing came: treat as a timeout)
    }
    if (n <= 0) {
      eof_ = true;
      return 0;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    return static_cast<int>(n);
  }

  /// Reads one response (Content-Length framed; 1xx has no body) within timeout_ms.
  std::optional<response> read_response(int timeout_ms = 5000) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      if (auto r = take_response()) {
        return r;
      }
      if (eof_) {
        return std::nullopt;
      }
      const int left = timeout_ms - static_cast<int>(ms_since(t0));
      if (left <= 0 || read_some(left) < 0) {
        return std::nullopt;
      }
    }
  }

  /// True when the server closed the connection (EOF or reset) within timeout_ms; bytes that
  /// arrive before that stay readable via pending().
  bool wait_closed(int timeout_ms = 5000) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!eof_) {
      const int left = timeout_ms - static_cast<int>(ms_since(t0));
      if (left <= 0 || read_some(left) < 0) {
        return false;
      }
    }
    return true;
  }

  const std::string& pending() const { return buf_; }
  bool eof() const { return eof_; }

 private:
  std::optional<response> take_response() {
    const size_t end = buf_.find("\r\n\r\n");
    if (end == std::string::npos) {
      return std::nullopt;
    }
    response r;
    r.head = buf_.substr(0, end + 2);
    if (r.head.size() < 12) {
      return std::nullopt;
    }
    std::from_chars(r.head.data() + 9, r.head.data() + 12, r.status);
    size_t len = 0;
    if (r.status >= 200) {
      for (std::string_view key : {"Content-Length:", "content-length:"}) {
        const size_t at = r.head.find(key);
        if (at != std::string::npos) {
          size_t p = at + key.size();
          while (p < r.head.size() && r.head[p] == ' ') {
            ++p;
          }
          std::from_chars(r.head.data() + p, r.head.data() + r.head.size(), len);
          break;
        }
      }
    }
    if (buf_.size() < end + 4 + len) {
      return std::nullopt;
    }
    r.body = buf_.substr(end + 4, len);
    buf_.erase(0, end + 4 + len);
    return r;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

/// Appends a 200 response whose body is "<target>|<body>"; adds Connection: close when the
/// request does not keep the connection alive. Touches the last padding byte after the body so
/// ASan catches a reassembly buffer without SIMDJSON_PADDING spare bytes.
inline http::response_info write_echo(const http::request& req, out_buffer& out) {
  if (!req.body.empty()) {
    const volatile char* pad = req.body.data() + req.body.size() + 63;
    [[maybe_unused]] const char touched = *pad;
  }
  char len[24];
  const size_t body_len = req.target.size() + 1 + req.body.size();
  const auto end = std::to_chars(len, len + sizeof len, body_len).ptr;
  out.append("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ");
  out.append(len, static_cast<size_t>(end - len));
  if (!req.keep_alive) {
    out.append("\r\nConnection: close");
  }
  out.append("\r\n\r\n");
  out.append(req.target);
  out.push_back('|');
  out.append(req.body);
  return {200, !req.keep_alive};
}

/// Echo handler; counts its calls so tests can see the hooks run.
class echo_handler : public http::handler {
 public:
  struct counters {
    std::atomic<uint64_t> handled{0};
    std::atomic<uint64_t> before_send{0};
    std::atomic<uint64_t> ticks{0};
  };
  explicit echo_handler(counters* c = nullptr) : c_(c) {}
  http::response_info handle(const http::request& req, out_buffer& out, int64_t) override {
    if (c_ != nullptr) {
      c_->handled.fetch_add(1, std::memory_order_relaxed);
    }
    return write_echo(req, out);
  }
  void before_send(int64_t) override {
    if (c_ != nullptr) {
      c_->before_send.fetch_add(1, std::memory_order_relaxed);
    }
  }
  void on_tick(int64_t) override {
    if (c_ != nullptr) {
      c_->ticks.fetch_add(1, std::memory_order_relaxed);
    }
  }

 private:
  counters* c_;
};

/// Small, fast-to-start options for tests: one core, port 0, small buffers.
inline server_options test_options() {
  server_options o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.threads = 1;
  o.recv_buffer_size = 4096;
  o.recv_buffer_count = 64;
  o.max_connections = 128;
  o.ring_entries = 256;
  o.shutdown_timeout_ms = 5000;
  o.linger_timeout_ms = 500;
  return o;
}

inline server::handler_factory echo_factory(echo_handler::counters* c = nullptr) {
  return [c](int) { return std::make_unique<echo_handler>(c); };
}

/// Sum of one counter over all cores.
template <class F>
uint64_t total(const server& s, F field) {
  uint64_t sum = 0;
  for (int i = 0; i < s.threads(); ++i) {
    sum += field(s.stats(i)).load(std::memory_order_relaxed);
  }
  return sum;
}

/// Polls `pred` every 5 ms for up to timeout_ms; returns its last value.
template <class P>
bool eventually(P pred, int timeout_ms = 5000) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!pred()) {
    if (ms_since(t0) > timeout_ms) {
      return pred();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline std::string get(std::string_view target, std::string_view extra = {}) {
  std::string s = "GET ";
  s.append(target);
  s.append(" HTTP/1.1\r\nHost: t\r\n");
  s.append(extra);
  s.append("\r\n");
  return s;
}

}  // namespace tollgate::net::testing
