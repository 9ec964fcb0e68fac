// Executor: the user's entry point (seed 001 §2.2, "Executor.run"):
// `exe.run(program, feed, fetch)` feeds data ops by name and returns the
// fetched values as Tensors. Compiled programs (InterpreterCores) are cached
// (LRU) by (the program's structural hash, feed names, fetch targets,
// scope); the hash is recomputed only when the IR changed (ir_epoch()).
// `exe.run_async(program, feed, fetch, options, done)` (seed 003's
// RunAsync) returns at once and calls `done` from a worker; `run` is its
// synchronous form over the same run states, on the caller's thread.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/exec/interpreter_core.h"
#include "kiln/exec/run_options.h"
#include "kiln/runtime/spin_lock.h"

namespace kiln {

using FeedMap = std::map<std::string, Tensor, std::less<>>;

class Executor {
 public:
  // kiln::Error (Unimplemented) for a place that has no kernels (cuda, until
  // kiln has a CUDA backend). options.place is set to `place`.
  explicit Executor(Place place = Place::cpu(), ExecutionOptions options = {});
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
  std::int64_t runs_in_flight() const { return in_flight_.load(std::memory_order_acquire); }

  // The root scope holding parameters.
  Scope& scope() { return scope_; }
  Place place() const { return options_.place; }
  const ExecutionOptions& options() const { return options_; }
  // The core the last run used (introspection: DOT, trace).
  InterpreterCore* last_core() const { return last_core_; }
  std::size_t num_cores_built() const { return cores_built_; }
  std::size_t cache_size() const { return lru_.size(); }
  const std::shared_ptr<WorkQueue>& work_queue() const { return queue_; }

 private:
  struct Memo {
    std::uint64_t epoch = 0;
    std::uint64_t hash = 0;
    std::unordered_map<const detail::ValueImpl*, std::uint32_t> value_ids;
  };
  const Memo& memo_for(const Program& program);
  std::shared_ptr<InterpreterCore> core_for(const Program& program, const FeedMap& feed,
                                            const std::vector<FetchTarget>& fetch, Scope& scope);
  std::shared_ptr<InterpreterCore> find_or_build_core(const Program& program, const FeedMap& feed,
                                                      const std::vector<FetchTarget>& fetch, Scope& scope);
  std::string cache_key(const Program& program, const FeedMap& feed,
                        const std::vector<FetchTarget>& fetch, const Scope& scope);
  bool same_as_last_run(const Program& program, const FeedMap& feed,
                        const std::vector<FetchTarget>& fetch, const Scope& scope) const;
  void remember_last_run(const Program& program, const FeedMap& feed,
                         const std::vector<FetchTarget>& fetch, const Scope& scope,
                         std::shared_ptr<InterpreterCore> core);

  ExecutionOptions options_;
  Scope scope_;
  std::shared_ptr<WorkQueue> queue_;
  std::unordered_map<const Program*, Memo> memos_;
  struct Entry {
    std::string key;
    std::shared_ptr<InterpreterCore> core;  // a run in progress keeps its core alive
  };
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  InterpreterCore* last_core_ = nullptr;
  // The last run's request: a training loop repeats it, so it is checked
  // before the cache key is built (no string, no hashing, no look-up).
  struct LastRun {
    const Program* program = nullptr;
    std::uint64_t epoch = 0;
    const Scope* scope = nullptr;
    std::vector<std::string> feed_names;
    std::vector<const void*> fetch_values;  // ValueImpl*, null for names
    std::vector<std::string> fetch_names;
    std::shared_ptr<InterpreterCore> core;
  };
  LastRun last_run_;
  std::size_t cores_built_ = 0;
  std::atomic<std::int64_t> in_flight_{0};  // asynchronous runs not yet done
  std::mutex mutex_;     // guards memos_, lru_, index_, cores_built_
  SpinLock last_lock_;   // guards last_run_, last_core_
};

}  // namespace kiln
