#include "tollgate/cluster/redis.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <sys/time.h>

#include <charconv>

#include "tollgate/config/config.h"

namespace tollgate::cluster {

result<redis_address, std::string> parse_redis_address(std::string_view s) {
  if (auto ok = config::check_redis_address(s); !ok) {
    return unexpected(ok.error());
  }
  redis_address a;
  a.text = std::string(s);
  if (s.substr(0, 5) == "unix:") {
    a.path = std::string(s.substr(5));
    return a;
  }
  const size_t colon = s.rfind(':');
  a.host = std::string(s.substr(0, colon));
  std::from_chars(s.data() + colon + 1, s.data() + s.size(), a.port);
  return a;
}

redis_script::redis_script(std::string t) : text(std::move(t)) {
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(text.data()), text.size(), d);
  for (unsigned char c : d) {
    sha1 += fmt::format("{:02x}", c);
  }
}

redis_conn::redis_conn(redis_address addr, std::string password, int timeout_ms)
    : addr_(std::move(addr)), password_(std::move(password)), timeout_ms_(timeout_ms) {}

redis_conn::~redis_conn() { close(); }

void redis_conn::close() noexcept {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  pending_ = 0;
}

redis_error redis_conn::io_error(std::string_view what) {
  std::string m = fmt::format("redis {}: {}", addr_.text,
                              ctx_ != nullptr && ctx_->errstr[0] != '\0' ? ctx_->errstr : what);
  close();
  return {true, std::move(m)};
}

result<void, redis_error> redis_conn::connect() {
  close();
  timeval tv{timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
  ctx_ = addr_.path.empty() ? redisConnectWithTimeout(addr_.host.c_str(), addr_.port, tv)
                            : redisConnectUnixWithTimeout(addr_.path.c_str(), tv);
  if (ctx_ == nullptr) {
    return unexpected(redis_error{true, fmt::format("redis {}: out of memory", addr_.text)});
  }
  if (ctx_->err != 0) {
    return unexpected(io_error("cannot connect"));
  }
  redisSetTimeout(ctx_, tv);
  if (!password_.empty()) {
    auto r = command({"AUTH", password_});
    if (!r) {
      close();
      // Redis answers a wrong password with WRONGPASS (an error reply, not an I/O failure):
      // named as a refused password, so the log says what to fix.
      return unexpected(redis_error{
          true, r.error().io ? r.error().message
                             : fmt::format("redis {}: the password was refused (AUTH: {}); check "
                                           "the variable [cluster] password_env names",
                                           addr_.text, r.error().message)});
    }
  }
  return {};
}

namespace {
redis_reply copy_reply(const redisReply* r) {
  redis_reply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.t = redis_reply::type::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.t = redis_reply::type::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.t = redis_reply::type::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.t = redis_reply::type::array;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) {
        out.elements.push_back(copy_reply(r->element[i]));
      }
      break;
    default:
      break;
  }
  return out;
}
}  // namespace

void redis_conn::append(const std::vector<std::string>& argv) {
  if (ctx_ == nullptr) {
    return;
  }
  std::vector<const char*> p;
  std::vector<size_t> l;
  for (const auto& a : argv) {
    p.push_back(a.data());
    l.push_back(a.size());
  }
  redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), p.data(), l.data());
  ++commands_;
  ++pending_;
}

result<redis_reply, redis_error> redis_conn::read_reply() {
  if (ctx_ == nullptr) {
    return unexpected(redis_error{true, fmt::format("redis {}: not connected", addr_.text)});
  }
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
    return unexpected(io_error("connection lost"));
  }
  if (pending_ > 0) {
    --pending_;
  }
  auto* r = static_cast<redisReply*>(raw);
  if (r->type == REDIS_REPLY_ERROR) {
    redis_error e{false, std::string(r->str, r->len)};
    freeReplyObject(r);
    return unexpected(std::move(e));
  }
  redis_reply out = copy_reply(r);
  freeReplyObject(r);
  return out;
}

result<redis_reply, redis_error> redis_conn::command(const std::vector<std::string>& argv) {
  if (ctx_ == nullptr) {
    return unexpected(redis_error{true, fmt::format("redis {}: not connected", addr_.text)});
  }
  append(argv);
  return read_reply();
}

result<redis_reply, redis_error> redis_conn::eval(const redis_script& s,
                                                  const std::vector<std::string>& keys,
                                                  const std::vector<std::string>& args) {
  std::vector<std::string> argv{"EVALSHA", s.sha1, std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = command(argv);
  if (!r && !r.error().io && r.error().message.rfind("NOSCRIPT", 0) == 0) {
    argv[0] = "EVAL";
    argv[1] = s.text;
    r = command(argv);
  }
  return r;
}

}  // namespace tollgate::cluster
