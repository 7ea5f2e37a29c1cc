// Connections one core accepted past its max_connections, passed to a core with room.
//
// Why a handoff: every core has its own SO_REUSEPORT listener, and the kernel spreads new
// connections over them by a hash of the 4-tuple, blind to how full each core is. A core at its
// cap that stopped accepting would strand its share of the new connections in its listener's
// backlog (unanswered, while other cores have free slots); one that accepted and closed them
// would refuse clients the server has room for. So a full core keeps accepting, reserves a slot
// on the core with the most room (one atomic add, undone if that core turned out full too) and
// queues the descriptor there; the target's eventfd wakes its loop, which opens the connection
// as if it had accepted it. Only when no core has room is the connection answered 503 and
// closed. The handoff is the cold path: a core below its cap touches only its own load figure.
//
// Thread-safe: `load` figures are atomics written by several cores; each core's queue is under
// its own mutex (taken only on a handoff).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace tollgate::net::detail {

class handoff {
 public:
  handoff(int cores, uint32_t max_per_core);
  ~handoff();  ///< closes descriptors still queued (their cores have exited)
  handoff(const handoff&) = delete;
  handoff& operator=(const handoff&) = delete;

  /// The eventfd that wakes core `core` (set before the cores run).
  void set_wake_fd(int core, int fd) noexcept { slots_[core].wake_fd = fd; }

  /// Reserves one of core `core`'s slots: true when it had a free one (open connections plus
  /// queued handoffs stay at most max_per_core).
  bool reserve(int core) noexcept;
  /// Gives back a slot of core `core` (a connection closed, or a reserved slot not used).
  void release(int core) noexcept;
  /// Reserves a slot on the core other than `from` with the most room; its index, or -1.
  int reserve_elsewhere(int from) noexcept;

  /// Queues `fd` (its slot reserved) for core `to` and wakes that core.
  void push(int to, int fd);
  /// Moves the descriptors queued for `core` to `out` (cleared first).
  void take(int core, std::vector<int>& out);

 private:
  struct alignas(64) slot {
    std::atomic<uint32_t> load{0};  // open connections + queued handoffs
    int wake_fd = -1;
    std::mutex mu;
    std::vector<int> queued;
  };
  static_assert(std::atomic<uint32_t>::is_always_lock_free);

  int cores_;
  uint32_t max_;
  std::unique_ptr<slot[]> slots_;
};

}  // namespace tollgate::net::detail
