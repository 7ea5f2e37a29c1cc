// allocator_hold: a count of the live holds; the hooks run on its first and last.
#include "tollgate/common/alloc_hold.h"

#include <mutex>

namespace tollgate {
namespace {
allocator_hold_hooks g_hooks;
// Guards the count and orders the hooks' calls (a release never overtakes the next hold). Held
// by start-up and build threads only, never on an event loop.
std::mutex g_mu;
int g_holds = 0;
}  // namespace

void set_allocator_hold_hooks(allocator_hold_hooks hooks) noexcept {
  std::lock_guard lock(g_mu);
  g_hooks = hooks;
}

allocator_hold::allocator_hold() noexcept {
  std::lock_guard lock(g_mu);
  if (g_holds++ == 0 && g_hooks.hold != nullptr) {
    g_hooks.hold();
  }
}

allocator_hold::~allocator_hold() {
  std::lock_guard lock(g_mu);
  if (--g_holds == 0 && g_hooks.release != nullptr) {
    g_hooks.release();
  }
}

}  // namespace tollgate
