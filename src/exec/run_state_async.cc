// RunState's asynchronous side: asynchronous kernels (started, then resumed
// by their callbacks), asynchronous runs (start() / complete()), and what a
// run's options bring — its step, cancellation token and deadline.
#include <chrono>

#include "kiln/exec/run_state.h"
#include "kiln/runtime/rendezvous.h"
#include "step_abort.h"

namespace kiln {

namespace {

std::string step_text(std::int64_t step) { return "step " + std::to_string(step); }

}  // namespace

// ---- asynchronous kernels ----

// Starts i's asynchronous kernel. Its callback may come before
// compute_async returns (a value already queued): then this thread goes on
// with i's successors as after any kernel (no hand-off). Otherwise i stays
// outstanding, holding one count of pending_, and the callback hands the
// continuation to the pool — or, in a region's run, wakes this thread.
RunState::Step RunState::start_async_kernel(std::uint32_t i) {
  AsyncSlot& slot = async_[i];
  slot.state.store(0, std::memory_order_relaxed);  // published by the call below
  slot.error = nullptr;
  // Relaxed: this thread holds a count, so pending_ cannot reach 0 meanwhile.
  if (counted_) pending_.fetch_add(1, std::memory_order_relaxed);
  try {
    plan_->instructions[i].async_fn(instrs_[i].ctx, AsyncKernelDone(&async_kernel_done, this, i));
  } catch (...) {
    if (counted_) pending_.fetch_sub(1, std::memory_order_relaxed);
    record_error(i);
    return Step::Failed;
  }
  std::uint8_t seen;
  if (blocking_) {
    // A region's run waits here: the callback sets kAsyncDone and notifies
    // under done_mutex_, so after the wait it no longer touches the state.
    std::unique_lock lock(done_mutex_);
    seen = slot.state.exchange(kAsyncLeft, std::memory_order_acq_rel);
    if (seen != kAsyncDone)
      done_cv_.wait(lock, [&] { return slot.state.load(std::memory_order_acquire) == kAsyncDone; });
  } else {
    // acq_rel: pairs with the callback's exchange — whichever comes second
    // sees the other's writes (the kernel's outputs, the error) and goes on.
    seen = slot.state.exchange(kAsyncLeft, std::memory_order_acq_rel);
    if (seen != kAsyncDone) return Step::Suspended;
  }
  if (counted_) pending_.fetch_sub(1, std::memory_order_relaxed);
  if (slot.error) {
    record_error(i, slot.error);
    return Step::Failed;
  }
  return Step::Ran;
}

void RunState::async_kernel_done(void* state, std::uint32_t i, const Error* error) noexcept {
  auto* self = static_cast<RunState*>(state);
  AsyncSlot& slot = self->async_[i];
  if (error) slot.error = std::make_exception_ptr(*error);
  if (self->blocking_) {
    std::lock_guard lock(self->done_mutex_);
    if (slot.state.exchange(kAsyncDone, std::memory_order_acq_rel) == kAsyncLeft)
      self->done_cv_.notify_all();
    return;
  }
  // acq_rel: see start_async_kernel(). 0: its starter has not returned yet
  // and goes on itself.
  if (slot.state.exchange(kAsyncDone, std::memory_order_acq_rel) == 0) return;
  // The starter moved on: the continuation goes to the pool, never runs on
  // this thread (a sender's, a canceller's, the deadline timer's).
  self->config_.resume->push(WorkTask{&RunState::resume_entry, self, i});
}

// ---- asynchronous runs ----

void RunState::start(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                     std::span<Tensor> results, const RunOptions& options, Completion completion) {
  const ExecutionPlan& p = *plan_;
  async_results_ = results;
  async_num_feeds_ = feeds.size();
  async_error_ = nullptr;
  if (graph_) {
    // CUDA graph mode holds device work only (no receives): run it here.
    async_num_feeds_ = 0;  // run_graph drops them
    try {
      run_graph(feeds, take, config, results);
    } catch (...) {
      async_error_ = std::current_exception();
    }
    completion.fn(completion.arg, *this);
    return;
  }
  for (std::size_t k = 0; k < feeds.size(); ++k) {
    Tensor& dst = vars_[p.feeds[k].slot]->get_mutable<Tensor>();
    if (take) dst = std::move(*feeds[k]);
    else dst = *feeds[k];
  }
  begin_run(config);
  if (memory_stage_ != MemoryStage::Off) prepare_memory(/*may_probe=*/false);
  completion_ = completion;
  begin_step(&options);
  schedule_counted();  // may complete the run: the state is not touched after it
}

// The thread that finished the run's last work: streams drained, options'
// callbacks gone, then the owner's completion.
void RunState::complete() noexcept {
  if (plan_->has_streams()) synchronize_streams();
  if (dev_base_ && !error_) {
    try {
      read_device_times();
    } catch (...) {
    }
  }
  end_step();
  const Completion c = std::exchange(completion_, Completion{});
  c.fn(c.arg, *this);
}

std::exception_ptr RunState::finish_async() noexcept {
  if (async_error_) return std::exchange(async_error_, nullptr);  // graph mode
  if (graph_) return nullptr;  // run_graph gave the results
  try {
    finish_run(async_num_feeds_, async_results_);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// ---- the run's step, cancellation and deadline ----

void RunState::begin_step(const RunOptions* options) {
  step_.step_id = options && options->step_id ? options->step_id : new_step_id();
  step_.rendezvous = options ? options->rendezvous : nullptr;
  step_.communicator = plan_->options.communicator.get();
  waiting_instr_ = kNoIndex;
  waiting_error_ = nullptr;
  if (plan_->has_async) {
    // One manager per run: a cancelled one stays cancelled.
    if (!cancel_ || cancel_->is_cancelled()) cancel_ = std::make_unique<CancellationManager>();
    step_.cancellation = cancel_.get();
  }
  if (!options) return;
  if (options->cancellation) {
    user_token_ = options->cancellation->register_callback([this] { cancel_run(ErrorKind::Cancelled); });
    if (user_token_ == kNoCancellationToken) cancel_run(ErrorKind::Cancelled);  // before any op starts
    else user_cancel_ = options->cancellation;
  }
  using Clock = RunOptions::Clock;
  Clock::time_point deadline = options->deadline;
  if (options->timeout.count() > 0) {
    const Clock::time_point t = Clock::now() + options->timeout;
    if (t < deadline) deadline = t;
  }
  if (deadline != Clock::time_point::max()) {
    if (deadline <= Clock::now()) cancel_run(ErrorKind::DeadlineExceeded);
    else timer_ = DeadlineTimer::shared().schedule(deadline, [this] { cancel_run(ErrorKind::DeadlineExceeded); });
  }
}

// Takes the run's callbacks off the caller's token and the timer, waiting
// for one that is running: after this nothing outside the run touches it.
void RunState::end_step() noexcept {
  if (user_cancel_) {
    user_cancel_->deregister_callback(user_token_);
    user_cancel_ = nullptr;
    user_token_ = kNoCancellationToken;
  }
  if (timer_) {
    DeadlineTimer::shared().cancel(timer_);
    timer_ = DeadlineTimer::Handle{};
  }
  step_ = StepContext{};
}

// The run's first error came from a kernel (or a stream): the step failed,
// so its rendezvous is aborted (TensorFlow's StartAbort) and receives
// elsewhere in the step — other executors, other threads — fail at once
// instead of waiting for values this run will never send. A cancelled or
// late run only ends itself: its rendezvous stays usable.
[[gnu::noinline, gnu::cold]] void RunState::abort_rendezvous(std::uint32_t i,
                                                             const std::exception_ptr& cause) noexcept {
  std::string where;
  try {
    where = i == kNoIndex ? std::string("a stream") : plan_->describe(i);
  } catch (...) {
    where = "a kernel";  // out of memory for the name
  }
  abort_step(*step_.rendezvous, step_.step_id, where, cause);
}

// From the caller's token or the deadline timer (any thread): the run
// fails with `kind`; instructions not started never start (abort_), and
// waiting asynchronous kernels wake (record_error cancels cancel_).
void RunState::cancel_run(ErrorKind kind) noexcept {
  try {
    const std::string step = step_text(step_.step_id);
    Error e = kind == ErrorKind::DeadlineExceeded
                  ? make_error(kind, "the run of ", step, " passed its deadline")
                  : make_error(kind, "the run of ", step, " was cancelled");
    record_error(kRunIndex, std::make_exception_ptr(std::move(e)));
  } catch (...) {
    record_error(kRunIndex, std::current_exception());  // out of memory
  }
}

}  // namespace kiln
