// A real redis-server for the cluster tests: its own temp dir and a free port, started and ended
// by PID (never by name). Tests skip when redis-server is not installed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "quota/test_util.h"
#include "tollgate/cluster/redis.h"

namespace tollgate::cluster::test {

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline bool have_redis_server() { return ::access("/usr/bin/redis-server", X_OK) == 0; }

class redis_server {
 public:
  redis_server() : port_(free_port()) {}
  ~redis_server() { stop(); }

  /// Starts (or restarts, same port and dir: AOF on, so its data survives) and waits until it
  /// answers PING. False when it did not within 10 s.
  bool start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      const std::string log = dir_.path() + "/redis.log";
      ::execl("/usr/bin/redis-server", "redis-server", "--port", port.c_str(), "--bind",
              "127.0.0.1", "--dir", dir_.path().c_str(), "--save", "", "--appendonly", "yes",
              "--appendfsync", "always", "--logfile", log.c_str(), "--loglevel", "warning",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      redis_conn c(redis_address{"127.0.0.1", port_, "", address()}, "", 200);
      if (c.connect() && c.command({"PING"})) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  /// Ends it by PID (SIGKILL when `hard`, else SIGTERM) and reaps it.
  void stop(bool hard = false) {
    if (pid_ > 0) {
      ::kill(pid_, hard ? SIGKILL : SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  quota::test::temp_dir dir_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace tollgate::cluster::test
