// allocator_hold: while one is alive, the process' allocator keeps the memory freed to it for
// the next allocation instead of handing it back to the kernel at once. For bulk work that
// frees and allocates gigabytes in turn (an index build: a shard's parse buffers become the
// next shard's tables): memory handed back is faulted in and zeroed again at its next use,
// which on a VM also costs the host's first touch (perf/notes/search-2026-12-07.md: ~10% of a
// 1M-story first start's CPU). When the last hold ends, what the allocator kept goes back.
//
// The hooks are the allocator's: main() sets them where mimalloc is the allocator (its decommit
// delay); without them (tests, the C library's malloc) a hold does nothing.
#pragma once

namespace tollgate {

struct allocator_hold_hooks {
  void (*hold)() = nullptr;     ///< keep freed memory from now on
  void (*release)() = nullptr;  ///< hand freed memory back at once, and what was kept now
};

/// Set once, before any hold (main()).
void set_allocator_hold_hooks(allocator_hold_hooks hooks) noexcept;

/// Holds from construction to destruction; holds may overlap (from any threads): the first
/// begins holding, the last one's end releases.
class allocator_hold {
 public:
  allocator_hold() noexcept;
  ~allocator_hold();
  allocator_hold(const allocator_hold&) = delete;
  allocator_hold& operator=(const allocator_hold&) = delete;
};

}  // namespace tollgate
