#include "kiln/exec/executor_barrier.h"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

namespace kiln {

namespace {

// The step's shared state, freed by the part that finishes last.
struct Step {
  std::atomic<std::size_t> remaining{0};
  std::mutex mutex;
  std::optional<Error> first;  // guarded by mutex
  std::vector<std::vector<Tensor>> results;  // each part writes its own
  LocalRendezvous* rendezvous = nullptr;
  std::int64_t step_id = 0;
  ExecutorBarrier::Done done;
};

// The step's error is its cause: a part that failed of the abort (Aborted)
// gives way to the failure behind it, which may end its run later.
bool keep_error(Step* step, const Error& error) {
  std::lock_guard lock(step->mutex);
  const bool first = !step->first;
  if (first || (step->first->kind() == ErrorKind::Aborted && error.kind() != ErrorKind::Aborted))
    step->first.emplace(error);
  return first;
}

void part_done(Step* step, std::size_t k, const Error* error, std::vector<Tensor>&& fetched) {
  if (error) {
    // Outside the lock: the abort runs the other parts' receive callbacks.
    // A part's failing kernel aborted the rendezvous already; this covers a
    // part that failed before its run began.
    if (keep_error(step, *error))
      step->rendezvous->abort(make_error(ErrorKind::Aborted, "the rendezvous of step ", step->step_id,
                                         " was aborted: part ", k, " failed: ", error->what()));
  } else {
    step->results[k] = std::move(fetched);
  }
  // acq_rel: the last part sees every part's results and error.
  if (step->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::unique_ptr<Step> owned(step);
  if (owned->first) {
    owned->done(&*owned->first, {});
  } else {
    owned->done(nullptr, std::move(owned->results));
  }
}

}  // namespace

void ExecutorBarrier::run_async(std::vector<Part> parts, LocalRendezvous& rendezvous, RunOptions options,
                                Done done) {
  if (parts.empty()) throw_error(ErrorKind::InvalidArgument, "ExecutorBarrier: a step needs at least one part");
  for (std::size_t k = 0; k < parts.size(); ++k)
    if (!parts[k].executor || !parts[k].program)
      throw_error(ErrorKind::InvalidArgument, "ExecutorBarrier: part ", k, " has no ",
                  parts[k].executor ? "program" : "executor");
  options.rendezvous = &rendezvous;
  if (options.step_id == 0) options.step_id = new_step_id();
  auto* step = new Step;
  step->remaining.store(parts.size(), std::memory_order_relaxed);  // published by run_async's queue
  step->results.resize(parts.size());
  step->rendezvous = &rendezvous;
  step->step_id = options.step_id;
  step->done = std::move(done);
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Part& part = parts[k];
    part.executor->run_async(*part.program, part.feed, part.fetch, options,
                             [step, k](const Error* error, std::vector<Tensor>&& fetched) {
                               part_done(step, k, error, std::move(fetched));
                             });
  }
}

std::vector<std::vector<Tensor>> ExecutorBarrier::run(std::vector<Part> parts, LocalRendezvous& rendezvous,
                                                      RunOptions options) {
  struct Wait {
    std::mutex mutex;
    std::condition_variable cv;
    bool finished = false;  // guarded by mutex
    std::optional<Error> error;
    std::vector<std::vector<Tensor>> results;
  } wait;
  run_async(std::move(parts), rendezvous, options,
            [&wait](const Error* error, std::vector<std::vector<Tensor>>&& results) {
              std::lock_guard lock(wait.mutex);
              if (error) wait.error.emplace(*error);
              wait.results = std::move(results);
              wait.finished = true;
              wait.cv.notify_one();  // under the lock: `wait` may go once it is released
            });
  std::unique_lock lock(wait.mutex);
  wait.cv.wait(lock, [&wait] { return wait.finished; });
  if (wait.error) throw Error(*wait.error);
  return std::move(wait.results);
}

}  // namespace kiln
