// Executor: the user's entry point (seed 001 §2.2, "Executor.run"):
// `exe.run(program, feed, fetch)` feeds data ops by name and returns the
// fetched values as Tensors. Compiled programs (InterpreterCores) are cached
// (LRU) by (the program's structural hash, feed names, fetch targets,
// scope); the hash is recomputed only when the IR changed (ir_epoch()).
// `exe.run_async(program, feed, fetch, options, done)` (seed 003's
// RunAsync) returns at once and calls `done` from a worker; `run` is its
// synchronous form over the same run states, on the caller's thread.
//
// This header declares only what a caller uses: the cache, the cores and
// the pool live behind a pointer (src/exec/executor.cc), so a host file
// that runs programs does not compile the executor's internals.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kiln/exec/execution_options.h"
#include "kiln/exec/feed_map.h"
#include "kiln/exec/run_options.h"

namespace kiln {

class InterpreterCore;
class Program;
class Scope;
class WorkQueue;
struct StepStats;

class Executor {
 public:
  // kiln::Error for a place kiln cannot run kernels at in this process
  // (Unimplemented: cuda in a build without CUDA; InvalidArgument: a cuda
  // device that is absent). options.place is set to `place`.
  explicit Executor(Place place, ExecutionOptions options = {});
  // On the CPU with the default options (made out of line, not in the caller).
  Executor();
  // Waits for the asynchronous runs still in flight (their `done` included).
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs `program` in the executor's scope (or `scope`). kiln::Error for a
  // missing feed, a feed of the wrong dtype or shape (expected vs given), an
  // unknown fetch, a parameter the startup program never set, a failing op.
  // Thread-safe: runs from several threads proceed concurrently, runs of
  // one compiled program included (each gets its own run state).
  std::vector<Tensor> run(const Program& program, const FeedMap& feed = {},
                          const std::vector<FetchTarget>& fetch = {});
  // The same, collecting the run's step stats into `stats`: per instruction
  // its start and end, thread, stream and bytes allocated
  // (kiln/exec/step_stats.h; TensorFlow's RunOptions.trace_level with
  // RunMetadata.step_stats). Runs that do not ask record nothing. A run that
  // fails collects what it ran, sets stats.failed and its error, and throws.
  std::vector<Tensor> run(const Program& program, const FeedMap& feed,
                          const std::vector<FetchTarget>& fetch, StepStats& stats);
  std::vector<Tensor> run(const Program& program, const FeedMap& feed,
                          const std::vector<FetchTarget>& fetch, Scope& scope);
  // The same into the caller's `results` (one per fetch target, reused step
  // after step): a training loop's run allocates nothing but tensor buffers.
  void run(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
           std::span<Tensor> results);
  void run(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
           Scope& scope, std::span<Tensor> results);
  // With a step id, deadline, cancellation token and rendezvous: kiln::Error
  // (Cancelled, DeadlineExceeded) when the run is cancelled or passes its
  // deadline, naming the receive that was waiting, if one was.
  std::vector<Tensor> run(const Program& program, const FeedMap& feed,
                          const std::vector<FetchTarget>& fetch, const RunOptions& options);

  // Starts a run of `program` in the executor's scope and returns at once
  // (the program may change or go as soon as it returns; the feeds are
  // shared, not copied). `done` is called exactly once, on a worker thread
  // (with options.run_in_caller_thread, maybe on this one before the call
  // returns), with the fetched tensors or the run's first error — a bad
  // feed or fetch, a failing op, Cancelled, DeadlineExceeded. Runs of one
  // program overlap, each on its own run state; a run waiting on a receive
  // holds no thread.
  void run_async(const Program& program, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
                 const RunOptions& options, RunDone done);
  // Asynchronous runs started and not yet done.
  std::int64_t runs_in_flight() const;

  // The root scope holding parameters (kiln/runtime/scope.h).
  Scope& scope();
  Place place() const;
  const ExecutionOptions& options() const;
  // The core the last run used (introspection: DOT, trace;
  // kiln/exec/interpreter_core.h).
  InterpreterCore* last_core() const;
  std::size_t num_cores_built() const;
  std::size_t cache_size() const;
  // Drops the compiled copies of `program` as it is now (and of any program
  // of the same structure; copies compiled before it changed are left to
  // the LRU) from the cache; the copies' constants, such as an imported
  // model's weights (held tensor attributes, kiln/ir/tensor_attribute.h),
  // are freed with them once no run in flight uses them and no program
  // carries them. A later run compiles the program anew; the scope is
  // untouched. For a program run once, as a startup program is.
  void evict(const Program& program);
  const std::shared_ptr<WorkQueue>& work_queue() const;

 private:
  struct State;  // the cache, the last run's request, the pool
  std::unique_ptr<State> state_;
};

}  // namespace kiln
