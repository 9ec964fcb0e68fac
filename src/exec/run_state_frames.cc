// RunState::run_frames: a run of a plan with frames goes through its
// FramePropagator (kiln/exec/frame_propagator.h); its failures, and fetches
// of dead values, become the run's error like any other.
#include <string>

#include "kiln/exec/frame_propagator.h"
#include "kiln/exec/run_state.h"
#include "kiln/exec/work_queue.h"

namespace kiln {

void RunState::run_frames() {
  if (!frames_) frames_ = std::make_unique<FramePropagator>(*plan_, vars_, &step_);
  solo_ = true;
  WorkQueue* pool = config_.plan == ThreadPlan::Sequential ? nullptr : config_.pool;
  unsigned threads = 1;
  if (pool) {
    threads = pool->num_threads() + 1;
    if (plan_->options.num_threads) threads = std::min(threads, plan_->options.num_threads);
  }
  FramePropagator::Failure failure = frames_->run(pool, threads, abort_);
  if (failure.error) {
    record_error(failure.instruction == kNoIndex ? kRunIndex : failure.instruction, failure.error);
    return;
  }
  if (error_) return;  // cancelled
  const FramePlan& fp = *plan_->frames;
  for (std::size_t k = 0; k < plan_->fetches.size(); ++k) {
    const std::uint32_t slot = plan_->fetches[k].slot;
    if (!frames_->dead(slot)) continue;
    std::string from;
    if (fp.slot_producer[slot] != kNoIndex) from = " (a result of " + fp.describe(fp.slot_producer[slot]) + ")";
    record_error(kRunIndex,
                 std::make_exception_ptr(Error(
                     ErrorKind::InvalidArgument,
                     "fetch #" + std::to_string(k) + from +
                         " is dead: it depends on the untaken output of a kiln.switch, so this run "
                         "computed no value for it; fetch a value after the kiln.merge that joins the branches")));
    return;
  }
}

}  // namespace kiln
