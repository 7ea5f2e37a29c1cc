// The cancelled requests set (see cancel_set.h).
#include "cancel_set.h"

namespace tollgate::app {

uint64_t cancel_set::hash_of(uint64_t key_id, std::string_view id) noexcept {
  // FNV-1a over the key id's bytes and the id's text; 0 is kept for "empty".
  uint64_t h = 14695981039346656037ull;
  for (int i = 0; i < 8; ++i) {
    h = (h ^ ((key_id >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
  for (char c : id) {
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

void cancel_set::add(uint64_t key_id, std::string_view id, int64_t now_ns) noexcept {
  const uint64_t h = hash_of(key_id, id);
  auto& bucket = slots_[h % buckets];
  // The slot holding this hash already, else the oldest. Two cores adding into one bucket at
  // once may overwrite each other's entry: a cancellation missed, never a call dropped wrongly.
  slot* target = &bucket[0];
  for (slot& s : bucket) {
    if (s.hash.load(std::memory_order_relaxed) == h) {
      target = &s;
      break;
    }
    if (s.at_ns.load(std::memory_order_relaxed) < target->at_ns.load(std::memory_order_relaxed)) {
      target = &s;
    }
  }
  // Relaxed: a reader that sees the hash with a stale time can only match this very request
  // (the hash is what it looks for), so the time's order does not matter; a reader on another
  // core that runs before these stores simply admits the call (the race is inherent: the
  // cancellation arrived while the call was being admitted).
  target->at_ns.store(now_ns, std::memory_order_relaxed);
  target->hash.store(h, std::memory_order_relaxed);
  last_add_ns_.store(now_ns, std::memory_order_relaxed);
}

bool cancel_set::contains(uint64_t key_id, std::string_view id, int64_t received_ns,
                          int64_t now_ns) const noexcept {
  if (now_ns - last_add_ns_.load(std::memory_order_relaxed) > keep_ns) {
    return false;  // no cancellation lately: the common case reads one rarely written word
  }
  const uint64_t h = hash_of(key_id, id);
  for (const slot& s : slots_[h % buckets]) {
    if (s.hash.load(std::memory_order_relaxed) != h) {
      continue;
    }
    const int64_t at = s.at_ns.load(std::memory_order_relaxed);
    if (at >= received_ns && now_ns - at <= keep_ns) {
      return true;
    }
  }
  return false;
}

}  // namespace tollgate::app
