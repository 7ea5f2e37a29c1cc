// A blocking Redis connection over hiredis (RESP encoding and parsing), for the cluster agent's
// one I/O thread and the admin commands. Never used on a request path.
//
// Not shared: one thread uses a connection at a time. Every I/O error closes the connection
// (connected() turns false); the caller reconnects when it chooses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/result.h"

struct redisContext;

namespace tollgate::cluster {

/// "HOST:PORT" or "unix:PATH".
struct redis_address {
  std::string host;  ///< empty for a unix socket
  int port = 0;
  std::string path;  ///< unix socket path
  std::string text;  ///< as written
};
result<redis_address, std::string> parse_redis_address(std::string_view s);

/// A reply, copied out of hiredis's.
struct redis_reply {
  enum class type : uint8_t { nil, integer, string, status, array };
  type t = type::nil;
  long long integer = 0;
  std::string str;
  std::vector<redis_reply> elements;
};

struct redis_error {
  bool io = false;  ///< the connection failed (closed now); else Redis answered an error
  std::string message;
};

/// A Lua script run with EVALSHA (EVAL once when Redis does not know it yet).
struct redis_script {
  explicit redis_script(std::string text);
  std::string text;
  std::string sha1;
};

class redis_conn {
 public:
  /// `password` empty: no AUTH. `timeout_ms` bounds connect and each reply.
  redis_conn(redis_address addr, std::string password, int timeout_ms);
  ~redis_conn();
  redis_conn(const redis_conn&) = delete;
  redis_conn& operator=(const redis_conn&) = delete;

  /// Connects (closing any previous connection) and authenticates.
  result<void, redis_error> connect();
  bool connected() const noexcept { return ctx_ != nullptr; }
  void close() noexcept;

  /// One command, one round trip.
  result<redis_reply, redis_error> command(const std::vector<std::string>& argv);
  /// Pipelining: queue commands, then read their replies in order.
  void append(const std::vector<std::string>& argv);
  result<redis_reply, redis_error> read_reply();
  /// EVALSHA, falling back to EVAL on NOSCRIPT.
  result<redis_reply, redis_error> eval(const redis_script& s, const std::vector<std::string>& keys,
                                        const std::vector<std::string>& args);

  /// Commands sent on this connection so far (EVAL fallbacks included).
  uint64_t commands() const noexcept { return commands_; }
  const redis_address& address() const noexcept { return addr_; }

 private:
  redis_error io_error(std::string_view what);

  redis_address addr_;
  std::string password_;
  int timeout_ms_;
  redisContext* ctx_ = nullptr;
  uint64_t commands_ = 0;
  size_t pending_ = 0;
};

}  // namespace tollgate::cluster
