// search_cache: a per-core, bounded cache of rendered search_stories payloads.
//
// Why: the in-process corpus is immutable once loaded (the backend is built at start-up and
// never changed while serving), so the payload of a search is a pure function of its arguments.
// A repeated query (the common case for agents retrying or paging back) then costs a copy
// instead of a search and a render.
//
// What it keeps: for each entry, the exact bytes the tool wrote through json_out (nested for an
// MCP text block, raw otherwise) under a key made of every argument after defaults and
// validation (query text byte for byte, limit, offset, since, until, sort, tags in order) and
// the nesting level. Only whole local answers are stored: the caller never offers a payload
// from a gateway with remote shards or a partial answer. Errors are never cached.
//
// What it does not change: the tool still runs inside the same admit/settle as before, so the
// key check, rate limit, quota and billing happen per request exactly as without the cache.
//
// Bounds: `entries` slots of `entry_bytes` each (key + payload), allocated once at start-up;
// a payload that does not fit is served uncached and counted as `oversize`. Slots are grouped
// in sets of 4 (set = hash of the key); a new entry replaces the least recently used of its
// set. Look-ups and inserts allocate nothing.
//
// Core-local: one per core; its counters are relaxed atomics written only by that core, read
// by /metrics on any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "tollgate/search/query.h"

namespace tollgate::app {

struct search_cache_options {
  uint32_t entries = 64;         ///< 0: the cache is off
  uint32_t entry_bytes = 16384;  ///< key + payload of one entry
};

/// Counters of one core's cache (single writer: that core).
struct alignas(64) search_cache_stats {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> inserts{0};
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> oversize{0};  ///< answers too large for a slot (served uncached)
};

class search_cache {
 public:
  /// `stats` (may be null) receives the counters; it must outlive the cache.
  search_cache(search_cache_options o, search_cache_stats* stats);
  ~search_cache();
  search_cache(const search_cache&) = delete;
  search_cache& operator=(const search_cache&) = delete;

  bool enabled() const noexcept { return sets_ != 0; }

  /// Makes the key of `q` at nesting level `nested` (kept until the next call). False when it
  /// cannot be cached (the key alone does not fit a slot); then find/insert must not be called.
  bool make_key(const search::query_args& q, bool nested) noexcept;
  /// The payload stored under the last key made, or nullptr (counted as a hit or a miss).
  /// The bytes stay valid until the next insert().
  const std::string_view* find() noexcept;
  /// Stores `payload` under the last key made (which find() just missed).
  void insert(std::string_view payload) noexcept;

  /// Bytes allocated for slots (for the log line at start-up).
  size_t footprint() const noexcept { return static_cast<size_t>(sets_) * kWays * entry_bytes_; }

 private:
  static constexpr uint32_t kWays = 4;
  static constexpr size_t kMaxKey = 4096;
  struct slot {
    uint64_t hash = 0;
    uint64_t used = 0;  ///< 0: empty; else the tick of its last use
    uint32_t key_len = 0;
    std::string_view payload;  ///< into the slot's bytes, after the key
  };
  template <class T>
  static void bump(std::atomic<T>& c) noexcept {
    // relaxed: a counter with one writer; readers need no ordering with anything else.
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  uint32_t sets_ = 0;
  size_t entry_bytes_ = 0;
  std::unique_ptr<slot[]> slots_;
  std::unique_ptr<char[]> bytes_;
  search_cache_stats* stats_;
  search_cache_stats own_stats_;  // when the caller passes none
  uint64_t tick_ = 0;
  // The last key made.
  char key_[kMaxKey];
  size_t key_len_ = 0;
  uint64_t hash_ = 0;
  std::string_view found_;
};

}  // namespace tollgate::app
