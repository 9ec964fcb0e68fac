// WorkQueue: the host thread pool the interpreter cores of one Executor share
// (seed 001 §4.1 "WorkQueue"; issue: "two cores share one work queue"). A
// task is (function, context, index): no allocation per task, no lock on
// the way in or out (a lock-free ring). Idle workers spin briefly, then
// sleep; pushers only signal when someone sleeps, since spinning pools
// lowered throughput on a 2-core machine (DESIGN.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
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
  // Waits for pushes in progress, then stops and joins the workers (tasks
  // still queued are dropped).
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  unsigned num_threads() const { return static_cast<unsigned>(threads_.size()); }

  // From any thread. Lock-free while fewer than kRingSlots tasks wait.
  void push(WorkTask task);
  // Runs one queued task on the calling thread; false when none was queued.
  bool try_run_one();

 private:
  // A bounded lock-free multi-producer multi-consumer ring (Vyukov's
  // sequence-numbered slots): a slot is free for the push of position p
  // when its seq is p, holds that push's task when its seq is p + 1. A push
  // that finds the ring full goes to the overflow deque.
  static constexpr std::uint64_t kRingSlots = 1024;
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> seq{0};
    WorkTask task;
  };

  void worker_loop();
  bool pop(WorkTask& out);
  bool push_ring(const WorkTask& task);
  bool pop_ring(WorkTask& out);
  bool has_work() const;  // a task in the ring or the overflow

  std::unique_ptr<Slot[]> ring_;
  // The pushers' line: the next position to push, pushes in progress.
  alignas(64) std::atomic<std::uint64_t> head_{0};
  std::atomic<int> pushing_{0};
  // The workers' line: the next position to pop, the overflow's size
  // (written only when the ring is full: an idle worker's spin reads just
  // this line and the next slot's).
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  std::atomic<std::size_t> overflow_size_{0};
  // Sleeping, the overflow and stopping, under mutex_.
  alignas(64) std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<WorkTask> overflow_;
  std::atomic<int> sleepers_{0};
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// A process-wide queue of one thread, for the asynchronous work of runs
// whose core has no pool (an asynchronous run's tasks, the continuations of
// asynchronous kernels). Its tasks never block.
WorkQueue& shared_async_queue();

}  // namespace kiln
