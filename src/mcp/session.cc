// Legacy session store (see endpoint.h): ids from getrandom, an LRU list bounded by a cap, idle
// expiry from the list's cold end on a tick.
#include <sys/random.h>

#include "tollgate/common/assert.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp {

session_store::session_store(int64_t idle_ns, size_t max_sessions)
    : idle_ns_(idle_ns), max_(max_sessions == 0 ? 1 : max_sessions) {}

std::string session_store::mint(envelope::revision r, int64_t now_ns) {
  unsigned char raw[id_len / 2];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    TOLLGATE_CHECK(n > 0);
    got += static_cast<size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  entry e{};
  for (size_t i = 0; i < sizeof raw; ++i) {
    e.id[2 * i] = hex[raw[i] >> 4];
    e.id[2 * i + 1] = hex[raw[i] & 15];
  }
  e.rev = r;
  e.last_ns = now_ns;
  std::lock_guard<std::mutex> lock(mu_);
  while (lru_.size() >= max_) {
    erase(std::prev(lru_.end()));
    ++evicted_;
  }
  lru_.push_front(e);
  const entry& in = lru_.front();
  // 128 random bits: a collision would need ~2^64 live sessions; the check costs nothing.
  TOLLGATE_CHECK(by_id_.emplace(std::string_view(in.id, id_len), lru_.begin()).second);
  return std::string(in.id, id_len);
}

void session_store::erase(lru_list::iterator it) {
  by_id_.erase(std::string_view(it->id, id_len));
  lru_.erase(it);
}

bool session_store::touch(std::string_view id, int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return false;
  }
  it->second->last_ns = now_ns;
  lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

bool session_store::end(std::string_view id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return false;
  }
  erase(it->second);
  return true;
}

void session_store::expire(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  // The list is in last-use order (touch moves to the front), so the idle ones are a tail.
  while (!lru_.empty() && now_ns - lru_.back().last_ns > idle_ns_) {
    erase(std::prev(lru_.end()));
  }
}

size_t session_store::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

uint64_t session_store::evicted() {
  std::lock_guard<std::mutex> lock(mu_);
  return evicted_;
}

}  // namespace tollgate::mcp
