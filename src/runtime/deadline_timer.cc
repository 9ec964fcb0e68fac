#include "kiln/runtime/deadline_timer.h"

#include "kiln/support/thread_name.h"

namespace kiln {

DeadlineTimer& DeadlineTimer::shared() {
  static DeadlineTimer timer;
  return timer;
}

DeadlineTimer::DeadlineTimer() : thread_([this] { loop(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

DeadlineTimer::Handle DeadlineTimer::schedule(Clock::time_point when, Task callback) {
  Handle h;
  bool earliest;
  {
    std::lock_guard lock(mutex_);
    h = Handle{when, next_id_++};
    auto it = pending_.emplace(std::make_pair(when, h.id), std::move(callback)).first;
    earliest = it == pending_.begin();
  }
  if (earliest) wake_.notify_one();
  return h;
}

bool DeadlineTimer::cancel(const Handle& h) {
  if (!h) return false;
  std::unique_lock lock(mutex_);
  if (pending_.erase({h.when, h.id})) return true;
  if (std::this_thread::get_id() != thread_.get_id())
    finished_.wait(lock, [&] { return running_ != h.id; });
  return false;
}

void DeadlineTimer::loop() {
  name_this_thread("kiln-deadline");
  std::unique_lock lock(mutex_);
  for (;;) {
    if (stop_) return;
    if (pending_.empty()) {
      wake_.wait(lock);
      continue;
    }
    auto first = pending_.begin();
    const Clock::time_point when = first->first.first;
    if (Clock::now() < when) {
      wake_.wait_until(lock, when);
      continue;  // an earlier one may have come, or a cancel removed this one
    }
    Task callback = std::move(first->second);
    running_ = first->first.second;
    pending_.erase(first);
    lock.unlock();
    callback();
    callback.reset();  // its captures go before cancel() may return
    lock.lock();
    running_ = 0;
    finished_.notify_all();
  }
}

}  // namespace kiln
