#include "kiln/exec/thread_plan.h"

#include <algorithm>

#include "kiln/kernel/blas.h"

namespace kiln {

ThreadPlanTuner::ThreadPlanTuner(ThreadPlan requested, bool has_pool, bool has_intra_op,
                                 bool has_parallelism, bool has_streams)
    : requested_(requested) {
  ThreadPlan only = ThreadPlan::Auto;
  switch (requested) {
    case ThreadPlan::Sequential: only = ThreadPlan::Sequential; break;
    case ThreadPlan::Graph: only = ThreadPlan::Graph; break;
    case ThreadPlan::Blas: only = has_pool && has_intra_op ? ThreadPlan::Blas : ThreadPlan::Sequential; break;
    case ThreadPlan::Auto:
      // With streams, the DAG's order (host work first, syncs last) never
      // loses to program order, which blocks the host at every sync.
      if ((has_pool && has_parallelism) || has_streams) candidates_[num_candidates_++] = ThreadPlan::Graph;
      if (!has_streams) candidates_[num_candidates_++] = ThreadPlan::Sequential;
      if (has_pool && has_intra_op) candidates_[num_candidates_++] = ThreadPlan::Blas;
      if (num_candidates_ == 1) only = candidates_[0];
      break;
  }
  if (only != ThreadPlan::Auto) {
    chosen_.store(only, std::memory_order_relaxed);
    decided_.store(true, std::memory_order_relaxed);
    return;
  }
  chosen_.store(candidates_[0], std::memory_order_relaxed);
}

ThreadPlan ThreadPlanTuner::calibration_plan() const noexcept {
  return decided() ? chosen() : candidates_[0];
}

ThreadPlanTuner::Choice ThreadPlanTuner::next() noexcept {
  // acquire: pairs with decide()'s release (chosen_ is then final).
  if (decided_.load(std::memory_order_acquire)) return {chosen(), false};
  std::lock_guard lock(mutex_);
  if (handed_out_ >= num_candidates_ * kTrials) return {chosen(), false};  // trials still running
  return {candidates_[handed_out_++ / kTrials], true};
}

void ThreadPlanTuner::report(const Choice& choice, std::int64_t ns) noexcept {
  if (!choice.trial) return;
  std::lock_guard lock(mutex_);
  for (int k = 0; k < num_candidates_; ++k)
    if (candidates_[k] == choice.plan) best_ns_[k] = std::min(best_ns_[k], ns);
  if (++reported_ == num_candidates_ * kTrials) decide();
}

// Sequential is the plan that needs nothing: another must be 5% faster than
// the best so far to be taken (in the order Sequential, Graph, Blas — Blas
// must beat both, as it also wakes BLAS's thread pool).
void ThreadPlanTuner::decide() {
  auto best_of = [&](ThreadPlan p) {
    for (int k = 0; k < num_candidates_; ++k)
      if (candidates_[k] == p) return best_ns_[k];
    return std::numeric_limits<std::int64_t>::max();
  };
  ThreadPlan pick = ThreadPlan::Sequential;
  std::int64_t pick_ns = best_of(ThreadPlan::Sequential);
  for (ThreadPlan p : {ThreadPlan::Graph, ThreadPlan::Blas}) {
    const std::int64_t t = best_of(p);
    // (Without Sequential as a candidate, pick_ns starts at max(): any wins.)
    if (t != std::numeric_limits<std::int64_t>::max() &&
        (pick_ns == std::numeric_limits<std::int64_t>::max() || t * 20 < pick_ns * 19)) {
      pick = p;
      pick_ns = t;
    }
  }
  chosen_.store(pick, std::memory_order_relaxed);
  // release: a run that sees decided_ also sees the final chosen_.
  decided_.store(true, std::memory_order_release);
}

namespace {
// Who may change or rely on BLAS's thread count (see BlasThreadsGuard).
std::shared_mutex g_blas_mutex;
std::mutex g_blas_set_mutex;
std::atomic<bool> g_blas_plan_used{false};
}  // namespace

BlasThreadsGuard::BlasThreadsGuard(bool has_blas, ThreadPlan plan, unsigned num_threads) {
  if (!has_blas) return;
  const bool blas = plan == ThreadPlan::Blas;
  if (blas) {
    // relaxed: the flag only decides whether later runs take the lock; the
    // lock itself orders the runs.
    g_blas_plan_used.store(true, std::memory_order_relaxed);
    exclusive_ = std::unique_lock(g_blas_mutex);
  } else if (g_blas_plan_used.load(std::memory_order_relaxed)) {
    shared_ = std::shared_lock(g_blas_mutex);
  }
  const int want = blas ? static_cast<int>(std::max(1u, num_threads)) : 1;
  // blas_num_threads() reads kiln's cached count, not OpenBLAS's.
  if (blas_num_threads() != want) {
    // Runs holding the lock shared may get here at once.
    std::lock_guard lock(g_blas_set_mutex);
    if (blas_num_threads() != want) blas_set_num_threads(want);
  }
}

}  // namespace kiln
