// SpinLock's contended path: the busy wait, out of line so that the header
// needs neither <thread> nor the x86 intrinsics.
#include "kiln/runtime/spin_lock.h"

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

// One step of a busy wait: tells the core this thread spins (x86 pause,
// ARM yield), which frees execution resources for its sibling hyperthread
// and avoids the memory-order flush when the awaited line changes.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

void SpinLock::lock_contended() noexcept {
  for (int spins = 0;;) {
    // relaxed: only a hint to retry the exchange; it orders nothing.
    while (locked_.load(std::memory_order_relaxed)) {
      if (++spins < 64) {
        cpu_relax();
      } else {
        std::this_thread::yield();  // the holder may be preempted: let it run
      }
    }
    // acquire: as in lock().
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
  }
}

}  // namespace kiln
