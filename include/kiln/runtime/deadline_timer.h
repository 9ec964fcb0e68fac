// DeadlineTimer: one process-wide thread that calls callbacks at their
// deadlines (seed 003: a run's deadline cancels it, waking receives blocked
// in the rendezvous). Scheduling allocates one map node; cancelling before
// the deadline removes the callback unrun.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "kiln/runtime/task.h"

namespace kiln {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Handle {
    Clock::time_point when{};
    std::uint64_t id = 0;  // 0: no callback
    explicit operator bool() const noexcept { return id != 0; }
  };

  // The process's timer; its thread starts on first use.
  static DeadlineTimer& shared();

  DeadlineTimer();
  // Callbacks not yet run are dropped.
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Calls `callback` on the timer's thread at `when` (at once if it has
  // passed). Callbacks must not throw, and should be short: they delay the
  // ones after them.
  Handle schedule(Clock::time_point when, Task callback);
  // True when the callback was removed before it ran. False when it has run
  // or is running; then this waits until it has finished (so the caller may
  // free what it touches) — except on the timer's own thread.
  bool cancel(const Handle& handle);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;      // the thread: an earlier deadline, or stop
  std::condition_variable finished_;  // cancel(): the running callback is done
  std::map<std::pair<Clock::time_point, std::uint64_t>, Task> pending_;  // guarded by mutex_
  std::uint64_t next_id_ = 1;    // guarded by mutex_
  std::uint64_t running_ = 0;    // id of the callback running now, guarded by mutex_
  bool stop_ = false;            // guarded by mutex_
  std::thread thread_;           // last: started once the members above exist
};

}  // namespace kiln
