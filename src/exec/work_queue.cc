#include "kiln/exec/work_queue.h"

#include "kiln/kernel/blas.h"
#include "kiln/support/thread_name.h"

namespace kiln {

namespace {

// An idle worker first re-checks the queue this many times without giving
// up its core (a few microseconds: the next task of a run, or the next run
// of a loop of run_async calls, arrives within that), then yields between
// checks. Plain loads, no pause instruction: on the KVM guests kiln is
// measured on, a long run of pauses exits to the hypervisor (pause-loop
// exiting), which made each hand-off microseconds slower; a yield is a
// system call (~0.3 µs) that a hand-off then waits out.
constexpr int kBusySpins = 1000;
// Then this many yields before it sleeps on the condition variable.
constexpr int kYieldSpins = 2000;

}  // namespace

WorkQueue::WorkQueue(unsigned num_threads) : ring_(new Slot[kRingSlots]) {
  for (std::uint64_t k = 0; k < kRingSlots; ++k) ring_[k].seq.store(k, std::memory_order_relaxed);
  if (num_threads == 0) {
    unsigned hw = std::thread::hardware_concurrency();
    num_threads = hw > 1 ? hw - 1 : 0;
  }
  threads_.reserve(num_threads);
  for (unsigned i = 0; i < num_threads; ++i) threads_.emplace_back([this] { worker_loop(); });
}

WorkQueue::~WorkQueue() {
  // A task pushed from outside the pool (an asynchronous kernel's callback)
  // may finish a run whose caller then destroys the queue's owner while the
  // push is still checking for sleepers. acquire: pairs with the release
  // decrement, after which the push touches nothing of the queue. The push's
  // increment is seen here: it came before its task was published, and the
  // task's run before this destructor.
  while (pushing_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool WorkQueue::push_ring(const WorkTask& task) {
  std::uint64_t pos = head_.load(std::memory_order_relaxed);
  Slot* slot;
  for (;;) {
    slot = &ring_[pos % kRingSlots];
    // acquire: the slot's last pop (its release) has read the old task.
    const std::uint64_t seq = slot->seq.load(std::memory_order_acquire);
    const auto diff = static_cast<std::int64_t>(seq - pos);
    if (diff == 0) {
      // Relaxed: the slot's seq, not head_, publishes the task.
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
    } else if (diff < 0) {
      return false;  // full: the slot still holds the task of pos - kRingSlots
    } else {
      pos = head_.load(std::memory_order_relaxed);  // another pusher took pos
    }
  }
  slot->task = task;
  // release: a popper that sees pos + 1 (acquire) sees the task.
  slot->seq.store(pos + 1, std::memory_order_release);
  return true;
}

bool WorkQueue::pop_ring(WorkTask& out) {
  std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  Slot* slot;
  for (;;) {
    slot = &ring_[pos % kRingSlots];
    // acquire: pairs with push_ring's release of pos + 1.
    const std::uint64_t seq = slot->seq.load(std::memory_order_acquire);
    const auto diff = static_cast<std::int64_t>(seq - (pos + 1));
    if (diff == 0) {
      if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
    } else if (diff < 0) {
      return false;  // empty: pos has not been pushed yet
    } else {
      pos = tail_.load(std::memory_order_relaxed);  // another worker took pos
    }
  }
  out = slot->task;
  // release: the push of pos + kRingSlots (acquire) comes after this read.
  slot->seq.store(pos + kRingSlots, std::memory_order_release);
  return true;
}

void WorkQueue::push(WorkTask task) {
  // Relaxed: ordered before the task's publication (a release) below.
  pushing_.fetch_add(1, std::memory_order_relaxed);
  if (!push_ring(task)) {
    std::lock_guard lock(mutex_);
    overflow_.push_back(task);
    overflow_size_.fetch_add(1, std::memory_order_relaxed);
  }
  // seq_cst fence against the one in worker_loop's sleep: either this push
  // sees the sleeper counted, or the sleeper's check sees the task.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_relaxed) > 0) {
    // Under the lock: a sleeper checks for work and waits atomically with it.
    std::lock_guard lock(mutex_);
    cv_.notify_one();
  }
  // release: the destructor's acquire sees this push's accesses done.
  pushing_.fetch_sub(1, std::memory_order_release);
}

bool WorkQueue::has_work() const {
  const std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  return ring_[pos % kRingSlots].seq.load(std::memory_order_acquire) == pos + 1 ||
         overflow_size_.load(std::memory_order_relaxed) != 0;
}

bool WorkQueue::pop(WorkTask& out) {
  if (pop_ring(out)) return true;
  // Relaxed: a hint; the deque is read under the lock.
  if (overflow_size_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(mutex_);
  if (overflow_.empty()) return false;
  out = overflow_.front();
  overflow_.pop_front();
  overflow_size_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

bool WorkQueue::try_run_one() {
  WorkTask t;
  if (!pop(t)) return false;
  t.fn(t.ctx, t.arg);
  return true;
}

void WorkQueue::worker_loop() {
  name_this_thread("kiln-worker");
  set_kernel_threads_on_this_thread(1);  // a graph worker's kernels never open a team
  for (;;) {
    WorkTask t;
    // Spin, then yield a while (a hand-off usually arrives within
    // microseconds during a run), then sleep.
    bool got = false;
    for (int spin = 0; spin < kBusySpins + kYieldSpins && !got; ++spin) {
      got = pop(t);
      if (!got && spin >= kBusySpins) std::this_thread::yield();
    }
    while (!got) {
      {
        std::unique_lock lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_relaxed);
        // seq_cst: see push().
        std::atomic_thread_fence(std::memory_order_seq_cst);
        cv_.wait(lock, [&] { return stop_ || has_work(); });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        if (stop_) return;
      }
      got = pop(t);  // another worker may have taken it first
    }
    t.fn(t.ctx, t.arg);
  }
}

WorkQueue& shared_async_queue() {
  static WorkQueue queue(1);
  return queue;
}

}  // namespace kiln
