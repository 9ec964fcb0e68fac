// SpinLock: a one-byte test-and-test-and-set lock for the short critical
// sections on kiln's run path (allocator free lists, a buffer's stream uses,
// event snapshots), where a std::mutex's futex path costs more than the work.
// It yields the core after a short spin, so a preempted holder is not starved.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln {

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

class SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() noexcept;
  bool try_lock() noexcept;
  void unlock() noexcept;

 private:
  std::atomic<bool> locked_{false};
};

inline void SpinLock::lock() noexcept {
  for (int spins = 0;;) {
    // acquire: on success we see every write the previous holder made before
    // its release-store in unlock().
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    // relaxed: only a hint to retry the exchange; it orders nothing.
    while (locked_.load(std::memory_order_relaxed)) {
      if (++spins < 64) {
        cpu_relax();
      } else {
        std::this_thread::yield();  // the holder may be preempted: let it run
      }
    }
  }
}

inline bool SpinLock::try_lock() noexcept {
  // relaxed pre-check avoids a cache-line write when already held; the
  // exchange is acquire for the same reason as in lock().
  return !locked_.load(std::memory_order_relaxed) &&
         !locked_.exchange(true, std::memory_order_acquire);
}

inline void SpinLock::unlock() noexcept {
  // release: publishes the critical section's writes to the next acquirer.
  locked_.store(false, std::memory_order_release);
}

}  // namespace kiln
