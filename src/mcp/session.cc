// Legacy session store (see endpoint.h): ids from getrandom, idle expiry on a tick.
#include <sys/random.h>

#include "tollgate/common/assert.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {

std::string session_store::mint(envelope::revision r, int64_t now_ns) {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    TOLLGATE_CHECK(n > 0);
    got += static_cast<size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (size_t i = 0; i < sizeof raw; ++i) {
    id[2 * i] = hex[raw[i] >> 4];
    id[2 * i + 1] = hex[raw[i] & 15];
  }
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[id] = entry{r, now_ns};
  return id;
}

bool session_store::touch(std::string_view id, int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(std::string(id));
  if (it == sessions_.end()) {
    return false;
  }
  it->second.last_ns = now_ns;
  return true;
}

bool session_store::end(std::string_view id) {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.erase(std::string(id)) != 0;
}

void session_store::expire(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (now_ns - it->second.last_ns > idle_ns_) {
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t session_store::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

}  // namespace tollgate::mcp
