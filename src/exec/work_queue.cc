#include "kiln/exec/work_queue.h"

namespace kiln {

WorkQueue::WorkQueue(unsigned num_threads) {
  if (num_threads == 0) {
    unsigned hw = std::thread::hardware_concurrency();
    num_threads = hw > 1 ? hw - 1 : 0;
  }
  threads_.reserve(num_threads);
  for (unsigned i = 0; i < num_threads; ++i) threads_.emplace_back([this] { worker_loop(); });
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkQueue::push(WorkTask task) {
  std::lock_guard lock(mutex_);
  tasks_.push_back(task);
  // Release pairs with the acquire in the spinning check of worker_loop.
  size_.fetch_add(1, std::memory_order_release);
  // Under the lock (a sleeper counts itself under it too, so it either sees
  // the task or is counted here), and nothing of the queue is touched after
  // the unlock: a task pushed from outside the pool (an asynchronous
  // kernel's callback) may finish a run whose caller then destroys the
  // queue's owner before this call returns.
  if (sleepers_.load(std::memory_order_relaxed) > 0) cv_.notify_one();
}

bool WorkQueue::pop(WorkTask& out) {
  if (size_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(mutex_);
  if (tasks_.empty()) return false;
  out = tasks_.front();
  tasks_.pop_front();
  size_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

bool WorkQueue::try_run_one() {
  WorkTask t;
  if (!pop(t)) return false;
  t.fn(t.ctx, t.arg);
  return true;
}

void WorkQueue::worker_loop() {
  for (;;) {
    WorkTask t;
    // Spin a little (a hand-off usually arrives within microseconds during a
    // run), then sleep.
    bool got = false;
    for (int spin = 0; spin < 2000 && !got; ++spin) {
      got = pop(t);
      if (!got) {
        if (size_.load(std::memory_order_relaxed) == 0) std::this_thread::yield();
      }
    }
    if (!got) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (tasks_.empty()) return;  // stop_
      t = tasks_.front();
      tasks_.pop_front();
      size_.fetch_sub(1, std::memory_order_relaxed);
    }
    t.fn(t.ctx, t.arg);
  }
}

WorkQueue& shared_async_queue() {
  static WorkQueue queue(1);
  return queue;
}

}  // namespace kiln
