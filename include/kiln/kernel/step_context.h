// StepContext: what a kernel sees of the run it is part of (seed 003: the
// step_id, rendezvous and cancellation_manager an OpKernelContext carries
// from Executor::Args) — the step id, the rendezvous kiln.send / kiln.recv
// use, the run's own cancellation manager, and the communicator collective
// ops run over.
#pragma once

#include <cstdint>

namespace kiln {

class CancellationManager;
class Communicator;
class LocalRendezvous;

struct StepContext {
  // Process-unique; every executor of one step shares it (RunOptions).
  std::int64_t step_id = 0;
  // RunOptions::rendezvous (null when the run was given none).
  LocalRendezvous* rendezvous = nullptr;
  // Cancelled when the run is cancelled, passes its deadline or fails: an
  // asynchronous kernel registers its wake-up here (null in a plan without
  // asynchronous kernels).
  CancellationManager* cancellation = nullptr;
  // ExecutionOptions::communicator of the plan (null when it has none).
  Communicator* communicator = nullptr;
};

}  // namespace kiln
