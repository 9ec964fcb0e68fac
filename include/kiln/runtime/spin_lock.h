// SpinLock: a one-byte test-and-test-and-set lock for the short critical
// sections on kiln's run path (allocator free lists, a buffer's stream uses,
// event snapshots), where a std::mutex's futex path costs more than the work.
// It yields the core after a short spin, so a preempted holder is not starved.
#pragma once

#include <atomic>

namespace kiln {

class SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() noexcept;
  bool try_lock() noexcept;
  void unlock() noexcept;

 private:
  // lock() once the first exchange found the lock held: spins (a pause per
  // try), then yields the core, until it gets the lock (src/runtime/spin_lock.cc).
  void lock_contended() noexcept;

  std::atomic<bool> locked_{false};
};

inline void SpinLock::lock() noexcept {
  // acquire: on success we see every write the previous holder made before
  // its release-store in unlock().
  if (!locked_.exchange(true, std::memory_order_acquire)) return;
  lock_contended();
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
