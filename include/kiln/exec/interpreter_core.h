// InterpreterCore: a program compiled for one scope, feed list and fetch
// list, and run many times (seed 001 §三 and §四). It is a thin facade over
// four parts, each in its own header:
//   ExecutionPlan    the immutable pre-analysis, built once by PlanBuilder
//   RunState         what one run mutates; a pool of them, so runs of one
//                    core from several threads proceed at the same time
//   CostModel        measured kernel costs (cheap ops inline, expensive
//                    ones to the pool)
//   ThreadPlanTuner  where the threads go (program order, graph workers or
//                    BLAS), measured, with BlasThreadsGuard per run
// A run: check the feeds against the plan, take an idle run state (or make
// one), pick the run's thread plan, hold BLAS's thread count, let the state
// run its scheduler, hand the state back. run_async does the same from a
// pool task and hands the state back on the thread that finishes the run.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/exec/cost_model.h"
#include "kiln/exec/execution_plan.h"
#include "kiln/exec/run_options.h"
#include "kiln/exec/run_state.h"
#include "kiln/exec/step_stats.h"
#include "kiln/exec/thread_plan.h"
#include "kiln/exec/work_queue.h"

namespace kiln {

// Pointers to a run's feed tensors, on the stack for the usual few.
class FeedPointers {
 public:
  explicit FeedPointers(std::size_t n) : n_(n) {
    if (n > kInline) {
      many_.resize(n);
      p_ = many_.data();
    }
  }
  FeedPointers(const FeedPointers&) = delete;
  FeedPointers& operator=(const FeedPointers&) = delete;
  Tensor*& operator[](std::size_t k) { return p_[k]; }
  std::span<Tensor* const> span() const { return {p_, n_}; }

 private:
  static constexpr std::size_t kInline = 16;
  Tensor* inline_[kInline];
  std::vector<Tensor*> many_;
  Tensor** p_ = inline_;
  std::size_t n_;
};

// kiln::Error when kernels cannot run at `place` in this process: a place
// kiln has no backend for (Unimplemented: cuda in a build without CUDA), or
// a cuda place whose device is absent (InvalidArgument naming it).
void require_place_runs(Place place);

class InterpreterCore {
 public:
  // Pre-analyses `program` for these feed names (data ops) and fetch
  // targets. `scope` is the caller's scope (its root holds parameters);
  // `queue` the shared host pool (null: run on the caller's thread only).
  // kiln::Error for a bad program, feed list or fetch, a missing kernel or
  // parameter; the scope tree is then left as it was.
  InterpreterCore(const Program& program, Scope& scope, std::vector<std::string> feed_names,
                  const std::vector<FetchTarget>& fetch, ExecutionOptions options = {},
                  std::shared_ptr<WorkQueue> queue = nullptr);
  ~InterpreterCore();
  InterpreterCore(const InterpreterCore&) = delete;
  InterpreterCore& operator=(const InterpreterCore&) = delete;

  // `feeds` in the order of feed_names(). Returns the fetched tensors in the
  // order of the fetch targets. kiln::Error names a bad feed or a failing op
  // (the core stays usable). Thread-safe: concurrent runs each get a state.
  std::vector<Tensor> run(std::span<const Tensor> feeds = {});
  // The same, taking the feed tensors over (no reference-count traffic).
  std::vector<Tensor> run(std::vector<Tensor>&& feeds);
  // The same into the caller's `results` (one per fetch target): no
  // allocation on the run path. `take`: the feeds are moved from.
  void run(std::span<Tensor> feeds, bool take, std::span<Tensor> results);
  // The same over pointers to the feeds (the Executor's feed map, uncopied),
  // with the run's `options` when given. With `stats`, the run's step stats
  // are collected there (cleared first; kiln/exec/step_stats.h); a run that
  // fails collects what it ran, sets stats->failed and its error, and throws
  // as usual.
  void run(std::span<Tensor* const> feeds, bool take, std::span<Tensor> results,
           const RunOptions* options = nullptr, StepStats* stats = nullptr);
  // Feeds as in run(feeds), collecting the run's step stats into `stats`
  // (TensorFlow's RunOptions.trace_level with RunMetadata.step_stats).
  std::vector<Tensor> run(std::span<const Tensor> feeds, StepStats& stats);

  // Starts a run and returns at once: a task of the core's pool (or, without
  // one, shared_async_queue()) checks the feeds (taken, in feed_names()
  // order), takes a run state and starts it; `done` gets the fetched
  // tensors or the first error — a bad feed's included — exactly once, on
  // a worker thread (options.run_in_caller_thread: the calling thread does
  // all that, and may call `done`, before run_async returns). The run holds no thread while it waits on an
  // asynchronous kernel. The core must outlive the run: `keep_alive` (may
  // be null) is held until `done` has returned; `in_flight` (may be null)
  // is decremented, with release order, as the run's very last access.
  void run_async(std::vector<Tensor> feeds, const RunOptions& options, RunDone done,
                 std::shared_ptr<InterpreterCore> keep_alive = nullptr,
                 std::atomic<std::int64_t>* in_flight = nullptr);
  // The same over pointers to the feeds (shared into the run, not taken):
  // the Executor's path, which allocates nothing per run once the core has
  // run asynchronously before.
  void run_async(std::span<Tensor* const> feeds, const RunOptions& options, RunDone done,
                 std::shared_ptr<InterpreterCore> keep_alive = nullptr,
                 std::atomic<std::int64_t>* in_flight = nullptr);
  // Calls `done` with `error` from a task of `queue`, then decrements
  // `in_flight` (may be null) as run_async does: a run that failed before
  // it had a core.
  static void fail_async(WorkQueue& queue, RunDone done, std::exception_ptr error,
                         std::atomic<std::int64_t>* in_flight = nullptr);

  const ExecutionPlan& plan() const { return *plan_; }
  const std::vector<std::string>& feed_names() const { return feed_names_; }
  std::size_t num_fetches() const { return plan_->fetches.size(); }
  std::size_t num_instructions() const { return plan_->size(); }
  std::size_t num_variables() const { return plan_->slots.size(); }

  // ---- introspection (tests, tools) ----
  struct InstructionInfo {
    std::string op_name;                 // "kiln.add", or "memcpy", "fetch", ...
    std::uint32_t op_index;              // position of its op in the program (or ~0)
    std::vector<std::uint32_t> successors;
    std::vector<SuccessorKind> successor_kinds;
    std::uint32_t num_predecessors;
    std::vector<std::uint32_t> reads, writes;  // variable slots
    std::vector<std::uint32_t> frees;          // slots it may free (last user of)
    Lane lane;                 // host, or stream index (stream_name())
    bool records_event = false;  // records an event after its launch (event/sync successors)
    std::vector<std::uint32_t> waits;  // predecessors whose event it waits on
  };
  InstructionInfo instruction(std::uint32_t i) const;
  // The slot of a value of the program given to the constructor (~0u if
  // none). With ExecutionOptions::passes, a value a pass removed has none,
  // unless it was a fetch target or a skip_gc value: those follow their
  // replacements.
  std::uint32_t slot_of(Value v) const;
  // The variable of a slot in the core's first run state (the one a run
  // uses unless another run is in progress). A slot out of range (~0u from
  // slot_of for a value the plan has none for) is an OutOfRange error.
  Variable* variable(std::uint32_t slot) const;
  Scope& local_scope() const { return primary_->local_scope(); }
  // Whether the scope the core was built for still exists: a core whose
  // scope is gone must not run again (the Executor builds a new one).
  bool scope_alive() const { return primary_->scope_alive(); }
  // Graphviz DOT of the instruction DAG (solid: direct, dashed: event, bold: sync).
  std::string to_dot() const;
  // Chrome trace JSON (chrome://tracing, Perfetto) of the last profiled run
  // (ExecutionOptions::profile; a run's own: to_chrome_trace(StepStats)).
  std::string chrome_trace() const;
  // The memory plan of the core's first run state (kiln/exec/memory_plan.h):
  // its arena's size, the live-set minimum; null before its first run ends
  // or when nothing is planned.
  const MemoryPlan* memory_plan() const { return primary_->memory_plan(); }
  // The plan runs use: the decided one, or while Auto still measures, the
  // plan of its first trial.
  ThreadPlan thread_plan() const { return tuner_.chosen(); }
  bool thread_plan_decided() const { return tuner_.decided(); }
  // The measured kernel costs that steer inline-or-pool dispatch; mutable
  // for whoever knows costs better than a measurement (a test, a tuner).
  const CostModel& cost_model() const { return costs_; }
  CostModel& cost_model() { return costs_; }
  // Run states made so far (1 + the most runs that overlapped, less one).
  std::size_t num_run_states() const;
  // Streams the core launches onto (Lane::stream indexes them), by name.
  std::size_t num_streams() const { return plan_->stream_names.size(); }
  const std::string& stream_name(std::size_t k) const;

 private:
  struct AsyncRun;
  static void start_async_entry(void* run, std::uint32_t);
  static void async_run_completed(void* run, RunState& state) noexcept;
  static void deliver(AsyncRun* run, std::exception_ptr error) noexcept;
  AsyncRun* take_async_run();
  void launch_async(AsyncRun* run, const RunOptions& options, RunDone done,
                    std::shared_ptr<InterpreterCore> keep_alive, std::atomic<std::int64_t>* in_flight);
  void start_async(AsyncRun* run) noexcept;
  RunState* acquire_state();
  void release_state(RunState* state) noexcept;
  RunConfig configure_run(RunState& state, ThreadPlanTuner::Choice& choice);

  std::vector<std::string> feed_names_;
  // With ExecutionOptions::passes: the optimised copy of the caller's
  // program the plan was built from (its instructions point into it), the
  // fetch targets and options mapped onto it, and the caller's values
  // mapped to the copy's; null without passes.
  struct Optimized;
  std::shared_ptr<const Optimized> optimized_;
  std::shared_ptr<const ExecutionPlan> plan_;
  Scope* scope_;
  std::shared_ptr<WorkQueue> queue_;
  unsigned num_threads_;
  CostModel costs_;
  ThreadPlanTuner tuner_;
  std::unique_ptr<RunState> primary_;
  // An idle state, taken and given back with one atomic exchange each (the
  // usual case: runs do not overlap); more live in spare_ under mutex_.
  std::atomic<RunState*> idle_{nullptr};
  std::atomic<RunState*> last_{nullptr};  // the last run's state (chrome_trace)
  // An asynchronous run's record, kept with its vectors' capacity for the
  // next run_async (one exchange each way; overlapping runs allocate).
  std::atomic<AsyncRun*> idle_async_{nullptr};
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<RunState>> extra_;
  std::vector<RunState*> spare_;
};

}  // namespace kiln
