// WorkQueue: the host thread pool the interpreter cores of one Executor share
// (seed 001 §4.1 "WorkQueue"; issue: "two cores share one work queue"). A
// task is (function, context, index): no allocation per task. Idle workers
// spin briefly, then sleep; pushers only signal when someone sleeps, since
// spinning pools lowered throughput on a 2-core machine (DESIGN.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {

struct WorkTask {
  void (*fn)(void* ctx, std::uint32_t arg) = nullptr;
  void* ctx = nullptr;
  std::uint32_t arg = 0;
};

class WorkQueue {
 public:
  // `num_threads` pool threads (0 → hardware_concurrency - 1: the caller of
  // a run takes part as the last thread).
  explicit WorkQueue(unsigned num_threads = 0);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  unsigned num_threads() const { return static_cast<unsigned>(threads_.size()); }

  void push(WorkTask task);
  // Runs one queued task on the calling thread; false when none was queued.
  bool try_run_one();

 private:
  void worker_loop();
  bool pop(WorkTask& out);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<WorkTask> tasks_;
  std::atomic<std::size_t> size_{0};
  std::atomic<int> sleepers_{0};
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// A process-wide queue of one thread, for the asynchronous work of runs
// whose core has no pool (an asynchronous run's tasks, the continuations of
// asynchronous kernels). Its tasks never block.
WorkQueue& shared_async_queue();

}  // namespace kiln
