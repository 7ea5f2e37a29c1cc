// The core's engine_io services for files and observability: file writes on the core's ring
// (the access log's batches), reads into the page cache (read_ahead: a story's text before
// get_story reads it without waiting) and the peer address of the connection being answered.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "net/core.h"

namespace tollgate::net::detail {

bool core::write_file(int fd, const char* data, size_t len, uint32_t tag) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_write(sqe, fd, data, static_cast<unsigned>(std::min<size_t>(len, size_t{1} << 30)),
                      static_cast<uint64_t>(-1));  // at the file's position: append, pipe, tty
  io_uring_sqe_set_data64(sqe, (uint64_t{static_cast<uint8_t>(op::file_write)} << 56) | tag);
  ++file_writes_;
  return true;
}

bool core::read_ahead(int fd, uint64_t at, size_t len, uint32_t tag) {
  if (!read_sink_) {
    read_sink_ = std::make_unique_for_overwrite<char[]>(read_ahead_max);
  }
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_read(sqe, fd, read_sink_.get(),
                     static_cast<unsigned>(std::min<size_t>(len, read_ahead_max)), at);
  io_uring_sqe_set_data64(sqe, (uint64_t{static_cast<uint8_t>(op::read_ahead)} << 56) | tag);
  ++read_aheads_;
  return true;
}

size_t core::peer_address(char* buf, size_t cap) {
  if (cur_idx_ == kNil) {
    return 0;
  }
  if (peers_.size() <= cur_idx_) {
    peers_.resize(conn_slots());
  }
  peer_text& p = peers_[cur_idx_];
  const uint32_t gen = conn_gen(cur_idx_);
  if (p.gen != gen) {  // one getpeername per connection, and only when asked
    p.gen = gen;
    p.len = 0;
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    if (getpeername(conn_fd(cur_idx_), reinterpret_cast<sockaddr*>(&ss), &sl) == 0) {
      char host[INET6_ADDRSTRLEN] = {};
      int port = 0;
      bool v6 = false;
      if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
      } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
        v6 = true;
      }
      if (host[0] != '\0') {
        const int n = std::snprintf(p.text, sizeof(p.text), v6 ? "[%s]:%d" : "%s:%d", host, port);
        p.len = n > 0 && static_cast<size_t>(n) < sizeof(p.text) ? static_cast<uint8_t>(n) : 0;
      }
    }
  }
  const size_t n = std::min<size_t>(p.len, cap);
  std::memcpy(buf, p.text, n);
  return n;
}

}  // namespace tollgate::net::detail
