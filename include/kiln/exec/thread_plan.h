// Where a run's threads go (ThreadPlan, execution_options.h): the tuner that
// measures the candidates and keeps the fastest, and the guard that holds
// BLAS's process-wide thread count steady for the length of one run.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <shared_mutex>

#include "kiln/exec/execution_options.h"

namespace kiln {

class ThreadPlanTuner {
 public:
  // Runs of each candidate; the fastest counts. A plan's first runs pay
  // its warm-up (under Blas, oneDNN's primitives for the new thread count
  // are created and OpenBLAS's team wakes: LeNet-5's first Blas run took
  // 4-55 ms, its second 0.6-1.2, against 0.35 warm), so with 3 runs the
  // Blas plan lost to Sequential on 3 of 24 starts; 5 leave it three
  // warm ones.
  static constexpr int kTrials = 5;

  // `requested`: the options' plan. The candidates of Auto: Graph (with a
  // pool and a DAG that has independent work, or with streams: then the
  // caller alone walks the DAG when there is no pool), Sequential (without
  // streams), and Blas (with a pool and a kernel that may split its loops:
  // ExecutionPlan::has_intra_op). A forced Blas plan without a pool or such
  // a kernel is Sequential.
  ThreadPlanTuner(ThreadPlan requested, bool has_pool, bool has_intra_op, bool has_parallelism,
                  bool has_streams);

  struct Choice {
    ThreadPlan plan = ThreadPlan::Sequential;
    bool trial = false;  // report() the run's time
  };
  // The plan for a run made after the cost model's calibration. While
  // undecided, kTrials runs of each candidate in turn — Graph first: after a
  // Blas trial, OpenBLAS's threads spin ~0.1 s and would slow the graph's.
  Choice next() noexcept;
  // The plan for a calibration run: the decided one, or Auto's first candidate.
  ThreadPlan calibration_plan() const noexcept;
  void report(const Choice& choice, std::int64_t ns) noexcept;
  // The plan decided on (or, while still measuring, the first candidate).
  ThreadPlan chosen() const noexcept { return chosen_.load(std::memory_order_relaxed); }
  bool decided() const noexcept { return decided_.load(std::memory_order_acquire); }

 private:
  void decide();  // under mutex_

  ThreadPlan requested_;
  ThreadPlan candidates_[3] = {};
  int num_candidates_ = 0;
  std::atomic<ThreadPlan> chosen_{ThreadPlan::Sequential};
  std::atomic<bool> decided_{false};
  std::mutex mutex_;  // guards the trial state below
  int handed_out_ = 0, reported_ = 0;
  std::int64_t best_ns_[3] = {std::numeric_limits<std::int64_t>::max(),
                              std::numeric_limits<std::int64_t>::max(),
                              std::numeric_limits<std::int64_t>::max()};
};

// Holds BLAS's thread count for one run of a program with BLAS kernels: N
// threads under the Blas plan (exclusively: no other core's GEMMs run
// meanwhile), else 1 (shared with every other such run). The lock is free
// until some run in the process first uses the Blas plan.
class BlasThreadsGuard {
 public:
  BlasThreadsGuard(bool has_blas, ThreadPlan plan, unsigned num_threads);
  ~BlasThreadsGuard() = default;
  BlasThreadsGuard(const BlasThreadsGuard&) = delete;
  BlasThreadsGuard& operator=(const BlasThreadsGuard&) = delete;

 private:
  std::unique_lock<std::shared_mutex> exclusive_;
  std::shared_lock<std::shared_mutex> shared_;
};

}  // namespace kiln
