// The requests clients cancelled (notifications/cancelled) that a core may still be holding:
// shared by every core, thread-safe, lock-free, fixed size (design §5, "abandoned calls").
//
// Over stateless HTTP a cancellation is a POST of its own, maybe on another connection and
// another core than the call it names. The core that reads it records (key, request id) here;
// every core consults the set before it admits a tools/call, so a call still waiting (for its
// remote shards, its search slices, or simply read after the cancellation) is dropped unbilled.
// A call admitted before its cancellation arrived is answered and billed as usual.
//
// A cancellation reaches only calls the server had received when it read the cancellation: many
// clients share a key, and each numbers its requests from 0 or 1, so a call that arrives later
// with the same id is another client's (or the same client's next) call, never the cancelled
// one. A call read after its cancellation (a stopped server reading both at once) is dropped by
// its deadline instead (core_host::admit).
//
// Best effort by design, never a lock: 256 buckets of 4 slots keyed by a 64-bit hash of the
// key id and the id's raw JSON; an entry lives `keep_ns` (30 s) or until its bucket's slots are
// all newer. A lookup with no cancellation in the last `keep_ns` reads one shared word that
// only cancellations write.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace tollgate::app {

class cancel_set {
 public:
  static constexpr size_t buckets = 256;
  static constexpr size_t ways = 4;
  static constexpr int64_t keep_ns = 30'000'000'000;

  /// Records that `key_id`'s request `id` (raw JSON: a number or a quoted string) was cancelled
  /// at `now_ns`.
  void add(uint64_t key_id, std::string_view id, int64_t now_ns) noexcept;
  /// True when `key_id`'s request `id`, received at `received_ns`, was cancelled then or later,
  /// within keep_ns before `now_ns`.
  bool contains(uint64_t key_id, std::string_view id, int64_t received_ns,
                int64_t now_ns) const noexcept;

 private:
  struct slot {
    std::atomic<uint64_t> hash{0};  ///< 0: empty
    std::atomic<int64_t> at_ns{0};
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
  static uint64_t hash_of(uint64_t key_id, std::string_view id) noexcept;

  std::array<std::array<slot, ways>, buckets> slots_{};
  std::atomic<int64_t> last_add_ns_{0};
};

}  // namespace tollgate::app
