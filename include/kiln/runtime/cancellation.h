// CancellationManager: a token a caller cancels from any thread (seed 003: the
// cancellation_manager of Executor::Args; RunAsync's work registers callbacks on
// it, and cancelling runs each of them once). A pending rendezvous receive, an
// async kernel or a whole run registers a callback that wakes it with
// ErrorKind::Cancelled.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/runtime/task.h"

namespace kiln {

// Names a registered callback. 0 (kNoCancellationToken) is never a registered
// one: register_callback returns it when cancellation has already started.
using CancellationToken = std::uint64_t;
inline constexpr CancellationToken kNoCancellationToken = 0;

class CancellationManager {
 public:
  CancellationManager() = default;
  // Callbacks still registered are dropped without running.
  ~CancellationManager() = default;
  CancellationManager(const CancellationManager&) = delete;
  CancellationManager& operator=(const CancellationManager&) = delete;

  // Registers `callback` to run once when start_cancel() is called. Returns
  // kNoCancellationToken, without keeping or running the callback, when
  // cancellation has already started: the caller then handles the
  // cancellation itself, at once. Callbacks must not throw.
  [[nodiscard]] CancellationToken register_callback(Task callback);
  // Removes a registered callback. True when it was removed before it ran;
  // false when it has run or is running (then, as TensorFlow's, this waits
  // until start_cancel's callbacks have all finished, so the caller may free
  // what the callback touches — except when called from a callback on the
  // cancelling thread itself, which returns false at once), or for
  // kNoCancellationToken / a token already deregistered.
  bool deregister_callback(CancellationToken token);
  // Runs every registered callback exactly once, on this thread, outside the
  // manager's lock (a callback may register or deregister). Later calls, from
  // any thread, do nothing and return at once.
  void start_cancel() noexcept;
  // True once start_cancel() has begun (its callbacks may still be running).
  bool is_cancelled() const noexcept;

 private:
  struct Slot {
    Task callback;                // empty when free
    std::uint32_t generation = 1;  // bumped when freed, so stale tokens miss
  };

  static CancellationToken make_token(std::uint32_t index, std::uint32_t generation) noexcept;

  mutable std::mutex mutex_;
  std::condition_variable done_cv_;   // deregister_callback waits here for the callbacks
  std::vector<Slot> slots_;           // guarded by mutex_
  std::vector<std::uint32_t> free_;   // free slot indices, guarded by mutex_
  std::thread::id cancelling_thread_;  // guarded by mutex_
  bool callbacks_done_ = false;       // guarded by mutex_
  // Written only under mutex_, once (false -> true); read anywhere.
  std::atomic<bool> cancelled_{false};
};

// ---------------------------------------------------------------------------

inline bool CancellationManager::is_cancelled() const noexcept {
  // acquire: pairs with start_cancel's release store, so a thread that sees
  // true also sees what the canceller wrote before cancelling (its reason).
  return cancelled_.load(std::memory_order_acquire);
}

inline CancellationToken CancellationManager::make_token(std::uint32_t index,
                                                         std::uint32_t generation) noexcept {
  // Generations start at 1, so a token is never 0.
  return (CancellationToken{generation} << 32) | index;
}

}  // namespace kiln
