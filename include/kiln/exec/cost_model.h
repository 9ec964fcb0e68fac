// CostModel: each instruction's measured kernel time, which decides whether
// a ready instruction runs inline on the thread that readied it (cheap: a
// hand-off costs more than the op) or goes to the pool (expensive), as
// TensorFlow's executor keeps a moving average of each kernel's cost (seed
// 003: "expensive" above ~8000 cycles). Measured on sampled runs only (the
// clock reads would cost more than a cheap op): the first kCalibrationRuns
// runs take each kernel's fastest time, later samples move an exponential
// average. Shared by every run over one plan; updates are relaxed atomics —
// two runs updating one entry at once may lose one sample, never corrupt it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

#include "kiln/kernel/kernel_cost.h"

namespace kiln {

class CostModel {
 public:
  static constexpr std::int64_t kExpensiveNs = kExpensiveKernelNs;
  static constexpr int kCalibrationRuns = 2;
  // After calibration, one run in kSampleEvery (per run state) is measured.
  static constexpr std::uint64_t kSampleEvery = 128;

  explicit CostModel(std::size_t num_instructions);

  // Whether the next run measures every kernel; `runs`: the run state's own
  // count of runs before this one. Calibrating: one of the first runs.
  bool calibrating() const noexcept;
  bool should_measure(std::uint64_t runs) const noexcept;
  // A measured run finished (calibration counts down).
  void run_measured() noexcept;

  void record(std::uint32_t instruction, std::int64_t ns) noexcept;
  bool expensive(std::uint32_t instruction) const noexcept;
  // The current estimate (max(): never measured).
  std::int64_t estimate_ns(std::uint32_t instruction) const noexcept;

 private:
  std::size_t n_;
  std::unique_ptr<std::atomic<std::int64_t>[]> estimate_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> expensive_;
  std::atomic<int> calibration_left_{kCalibrationRuns};
};

// ---------------------------------------------------------------------------

inline CostModel::CostModel(std::size_t n)
    : n_(n),
      estimate_(std::make_unique<std::atomic<std::int64_t>[]>(n)),
      expensive_(std::make_unique<std::atomic<std::uint8_t>[]>(n)) {
  for (std::size_t i = 0; i < n; ++i) {
    estimate_[i].store(std::numeric_limits<std::int64_t>::max(), std::memory_order_relaxed);
    expensive_[i].store(0, std::memory_order_relaxed);
  }
}

// Relaxed throughout: the estimates only steer scheduling; any value read is
// a valid (if stale) choice.
inline bool CostModel::calibrating() const noexcept {
  return calibration_left_.load(std::memory_order_relaxed) > 0;
}

inline bool CostModel::should_measure(std::uint64_t runs) const noexcept {
  return calibrating() || (runs % kSampleEvery == kSampleEvery - 1);
}

inline void CostModel::run_measured() noexcept {
  int left = calibration_left_.load(std::memory_order_relaxed);
  while (left > 0 && !calibration_left_.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
  }
}

inline void CostModel::record(std::uint32_t i, std::int64_t ns) noexcept {
  const std::int64_t old = estimate_[i].load(std::memory_order_relaxed);
  // Calibration keeps the fastest (the first run pays cold caches and first
  // allocations); afterwards an average with weight 1/8 on the new sample.
  const std::int64_t est = calibrating() || old == std::numeric_limits<std::int64_t>::max()
                               ? std::min(old, ns)
                               : old + (ns - old) / 8;
  estimate_[i].store(est, std::memory_order_relaxed);
  expensive_[i].store(est > kExpensiveNs, std::memory_order_relaxed);
}

inline bool CostModel::expensive(std::uint32_t i) const noexcept {
  return expensive_[i].load(std::memory_order_relaxed) != 0;
}

inline std::int64_t CostModel::estimate_ns(std::uint32_t i) const noexcept {
  return estimate_[i].load(std::memory_order_relaxed);
}

}  // namespace kiln
