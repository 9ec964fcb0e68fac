// RunOptions: what one run is given besides its feeds (seed 003's
// Executor::Args) — its step id, a deadline, a cancellation token and the
// rendezvous its kiln.send / kiln.recv ops use — and RunDone, the callback
// an asynchronous run (Executor::run_async) ends with.
#pragma once

#include <cstdint>
#include <vector>

// The clocks and durations alone: libstdc++'s <chrono> also reads its
// calendar, time zones and <sstream> (~4k lines more for a host file, ~0.1 s
// at -O2); its <bits/chrono.h>, which <mutex> and <thread> read, holds
// durations, time points, the clocks and the chrono literals.
#if defined(__GLIBCXX__) && __has_include(<bits/chrono.h>)
#include <bits/chrono.h>
#else
#include <chrono>
#endif

#include "kiln/runtime/callback.h"
#include "kiln/runtime/tensor.h"
#include "kiln/support/error.h"

namespace kiln {

class CancellationManager;
class LocalRendezvous;

struct RunOptions {
  using Clock = std::chrono::steady_clock;

  // The step this run belongs to: every executor running one step shares
  // it (kernels see it as StepContext::step_id). 0: the run takes a fresh
  // one from new_step_id().
  std::int64_t step_id = 0;
  // The run fails with ErrorKind::DeadlineExceeded when it has not finished
  // by `deadline`, or `timeout` after it started (the earlier counts; 0 and
  // time_point::max() are none): instructions not yet started never start,
  // pending asynchronous kernels (receives) are woken and cancelled.
  Clock::time_point deadline = Clock::time_point::max();
  std::chrono::nanoseconds timeout{0};
  // Cancelling it, from any thread, fails the run with ErrorKind::Cancelled
  // the same way. A token already cancelled fails the run before any
  // instruction starts. The run registers one callback for its length.
  CancellationManager* cancellation = nullptr;
  // Where kiln.send delivers and kiln.recv waits (one per step: keys do not
  // carry the step). Must outlive the run. A run that fails of a kernel's
  // error aborts it (ErrorKind::Aborted, naming that error): the step's
  // other receives, pending or later, fail at once. A cancelled run, or one
  // past its deadline, leaves it usable.
  LocalRendezvous* rendezvous = nullptr;
  // An asynchronous run starts on the thread that calls run_async instead of
  // a pool thread (TensorFlow: RunOptions.inter_op_thread_pool = -1, "run
  // in the caller's thread"): run_async returns when the run is done or
  // waits on an asynchronous kernel (a receive) — whose continuation then
  // goes to the pool as always — and `done` may be called on the calling
  // thread before run_async returns. For a caller that would only wait:
  // it saves the hand-off to a worker and back (a few hundred ns).
  bool run_in_caller_thread = false;
};

// A fresh process-unique step id (> 0). Thread-safe.
std::int64_t new_step_id() noexcept;

// An asynchronous run's end: `error` is null and `fetched` holds the
// fetched tensors in fetch-target order, or `error` is the run's first
// error (naming the op) and `fetched` is empty. Called exactly once, on a
// worker thread (never on the thread that started the run, unless the run
// was started with RunOptions::run_in_caller_thread); it may start other
// runs. It must not throw.
using RunDone = Callback<void(const Error* error, std::vector<Tensor>&& fetched)>;

}  // namespace kiln
