// ExecutorBarrier: one step of several executors over one rendezvous (seed
// 003's ExecutorBarrier, which runs the executors of a partitioned graph):
// every part runs asynchronously with the same step id and rendezvous; the
// first part to fail aborts the rendezvous (ErrorKind::Aborted, naming its
// error), so the others' receives wake with it and their sends fail; `done`
// is called once, after every part has finished, with each part's fetched
// tensors or the step's error: the first part's that is not an Aborted one
// (a failure's cause, not its echo), else the first.
#pragma once

#include <vector>

#include "kiln/exec/executor.h"
#include "kiln/exec/run_options.h"
#include "kiln/runtime/callback.h"
#include "kiln/runtime/rendezvous.h"

namespace kiln {

class ExecutorBarrier {
 public:
  // One executor's share of the step. The program need only live until
  // run_async returns (each Executor copies what it runs).
  struct Part {
    Executor* executor = nullptr;
    const Program* program = nullptr;
    FeedMap feed;
    std::vector<FetchTarget> fetch;
  };
  // results[k]: part k's fetched tensors (all empty after an error).
  using Done = Callback<void(const Error* error, std::vector<std::vector<Tensor>>&& results)>;

  // Starts every part and returns at once. options.rendezvous is set to
  // `rendezvous`; options.step_id, when 0, to one fresh id for all parts;
  // the deadline and cancellation token apply to each part. `done` runs on
  // the worker that finishes the last part. kiln::Error (InvalidArgument)
  // at once, before any part starts, for no parts or a part without an
  // executor or program.
  static void run_async(std::vector<Part> parts, LocalRendezvous& rendezvous, RunOptions options,
                        Done done);
  // The same, waiting: the results, or the first error thrown.
  static std::vector<std::vector<Tensor>> run(std::vector<Part> parts, LocalRendezvous& rendezvous,
                                              RunOptions options = {});
};

}  // namespace kiln
