#include "search_cache.h"

#include <cstring>
#include <functional>

namespace tollgate::app {

search_cache::search_cache(search_cache_options o, search_cache_stats* stats)
    : stats_(stats != nullptr ? stats : &own_stats_) {
  if (o.entries == 0 || o.entry_bytes == 0) {
    return;  // off
  }
  sets_ = (o.entries + kWays - 1) / kWays;
  entry_bytes_ = o.entry_bytes;
  slots_ = std::make_unique<slot[]>(static_cast<size_t>(sets_) * kWays);
  bytes_ = std::make_unique<char[]>(footprint());  // the only allocation: at start-up
}

search_cache::~search_cache() = default;

namespace {
template <class T>
char* put(char* p, T v) noexcept {
  std::memcpy(p, &v, sizeof v);
  return p + sizeof v;
}
}  // namespace

bool search_cache::make_key(const search::query_args& q, bool nested) noexcept {
  // Fixed fields, then each tag length-prefixed, then the query: no two different argument
  // sets make the same bytes.
  size_t need = 1 + 1 + 4 + 4 + 8 + 8 + 4 + q.query.size();
  for (uint32_t i = 0; i < q.tag_count; ++i) {
    need += 4 + q.tags[i].size();
  }
  if (need > kMaxKey || need >= entry_bytes_) {
    key_len_ = 0;
    return false;
  }
  char* p = key_;
  *p++ = nested ? 1 : 0;
  *p++ = static_cast<char>(q.sort);
  p = put(p, q.limit);
  p = put(p, q.offset);
  p = put(p, q.since);
  p = put(p, q.until);
  p = put(p, q.tag_count);
  for (uint32_t i = 0; i < q.tag_count; ++i) {
    p = put(p, static_cast<uint32_t>(q.tags[i].size()));
    std::memcpy(p, q.tags[i].data(), q.tags[i].size());
    p += q.tags[i].size();
  }
  std::memcpy(p, q.query.data(), q.query.size());
  p += q.query.size();
  key_len_ = static_cast<size_t>(p - key_);
  hash_ = std::hash<std::string_view>{}(std::string_view(key_, key_len_));
  return true;
}

const std::string_view* search_cache::find() noexcept {
  const size_t set = static_cast<size_t>(hash_ % sets_);
  for (uint32_t w = 0; w < kWays; ++w) {
    const size_t i = set * kWays + w;
    slot& s = slots_[i];
    if (s.used != 0 && s.hash == hash_ && s.key_len == key_len_ &&
        std::memcmp(bytes_.get() + i * entry_bytes_, key_, key_len_) == 0) {
      s.used = ++tick_;
      bump(stats_->hits);
      found_ = s.payload;
      return &found_;
    }
  }
  bump(stats_->misses);
  return nullptr;
}

void search_cache::insert(std::string_view payload) noexcept {
  if (key_len_ + payload.size() > entry_bytes_) {
    bump(stats_->oversize);
    return;
  }
  const size_t set = static_cast<size_t>(hash_ % sets_);
  size_t victim = set * kWays;
  for (uint32_t w = 0; w < kWays; ++w) {
    const size_t i = set * kWays + w;
    if (slots_[i].used < slots_[victim].used) {
      victim = i;  // an empty slot (used 0) or the least recently used
    }
  }
  slot& s = slots_[victim];
  if (s.used != 0) {
    bump(stats_->evictions);
  }
  char* b = bytes_.get() + victim * entry_bytes_;
  std::memcpy(b, key_, key_len_);
  std::memcpy(b + key_len_, payload.data(), payload.size());
  s.hash = hash_;
  s.key_len = static_cast<uint32_t>(key_len_);
  s.payload = std::string_view(b + key_len_, payload.size());
  s.used = ++tick_;
  bump(stats_->inserts);
}

}  // namespace tollgate::app
