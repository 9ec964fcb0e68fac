// RunState::run_frames: a run of a plan with frames goes through its
// FramePropagator (kiln/exec/frame_propagator.h); its failures, and fetches
// of dead values, become the run's error like any other.
#include <algorithm>
#include <string>

#include "kiln/exec/frame_propagator.h"
#include "kiln/exec/run_state.h"
#include "kiln/exec/step_stats.h"
#include "kiln/exec/work_queue.h"

namespace kiln {

namespace {

// The error of a run whose fetch took a dead value (null when none did).
std::exception_ptr dead_fetch(const ExecutionPlan& plan, const FramePropagator& frames) {
  const FramePlan& fp = *plan.frames;
  for (std::size_t k = 0; k < plan.fetches.size(); ++k) {
    const std::uint32_t slot = plan.fetches[k].slot;
    if (!frames.dead(slot)) continue;
    std::string from;
    if (fp.slot_producer[slot] != kNoIndex) from = " (a result of " + fp.describe(fp.slot_producer[slot]) + ")";
    return std::make_exception_ptr(
        Error(ErrorKind::InvalidArgument,
              "fetch #" + std::to_string(k) + from +
                  " is dead: it depends on the untaken output of a kiln.switch, so this run "
                  "computed no value for it; fetch a value after the kiln.merge that joins the branches"));
  }
  return nullptr;
}

}  // namespace

// Asynchronous runs (start()) go through FramePropagator::start: a run
// waiting on receives holds no thread, and it ends (finish_task) when the
// propagator is done, on whichever thread that is.
void RunState::run_frames() {
  if (!frames_) frames_ = std::make_unique<FramePropagator>(*plan_, vars_, &step_);
  solo_ = true;
  frames_->set_recording(record_);  // step stats, or ExecutionOptions::profile (chrome_trace)
  // The propagator's end: its failure, or a fetch of a dead value, is the run's error.
  static constexpr auto settle = [](RunState& self, const FramePropagator::Failure& failure) noexcept {
    if (failure.error) {
      self.record_error(failure.instruction == kNoIndex ? kRunIndex : failure.instruction, failure.error);
      return;
    }
    // Acquire: a cancellation or deadline stored its error (under
    // error_mutex_, which this thread does not take) before its release store.
    if (self.abort_.load(std::memory_order_acquire)) return;  // cancelled: its error stands
    try {
      if (std::exception_ptr e = dead_fetch(*self.plan_, *self.frames_)) self.record_error(kRunIndex, e);
    } catch (...) {
      self.record_error(kRunIndex, std::current_exception());  // out of memory for the message
    }
  };
  if (completion_.fn) {
    frames_->start(config_.resume, abort_, [](void* state, FramePropagator::Failure failure) {
      auto& self = *static_cast<RunState*>(state);
      settle(self, failure);
      self.finish_task();  // may end the run: the state is not touched after it
    }, this);
    return;
  }
  WorkQueue* pool = config_.plan == ThreadPlan::Sequential ? nullptr : config_.pool;
  unsigned threads = 1;
  if (pool) {
    threads = pool->num_threads() + 1;
    if (plan_->options.num_threads) threads = std::min(threads, plan_->options.num_threads);
  }
  settle(*this, frames_->run(pool, threads, abort_));
}

// The step stats of a run with frames: one node per op run, with its frame
// and iteration.
void RunState::collect_frame_stats(StepStats& stats, std::int64_t t0) const {
  if (!frames_) return;
  const ExecutionPlan& p = *plan_;
  const FramePlan& fp = *p.frames;
  for (const FramePropagator::Record& r : frames_->records()) {
    const FrameNode& n = fp.nodes[r.node];
    if (n.instruction == kNoIndex) continue;  // a feed or parameter read
    NodeStats& node = stats.nodes.emplace_back();
    node.instruction = n.instruction;
    node.op_name = p.instructions[n.instruction].name;
    node.label = p.label(n.instruction);
    node.start_ns = r.start_ns - t0;
    node.end_ns = r.end_ns - t0;
    node.thread = r.thread;
    if (r.frame != 0) {
      node.frame = fp.frames[r.frame].name;
      node.iteration = r.iteration;
    }
  }
}

}  // namespace kiln
