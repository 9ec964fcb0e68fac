// The scheduler: RunState's run path. Nothing here allocates, looks up a
// name or touches a Scope.
#include <chrono>
#include <functional>
#include <thread>

#include "kiln/exec/run_state.h"

namespace kiln {

namespace {

// Counts c down by one; true when it reached 0. With `solo` (one thread
// touches every counter this run) a relaxed load and store suffice and skip
// the locked RMW; otherwise acq_rel: the thread that reaches 0 sees the
// writes of every thread that counted down before it.
[[gnu::always_inline]] inline bool count_down(std::atomic<std::int32_t>& c, bool solo) {
  if (solo) {
    const std::int32_t v = c.load(std::memory_order_relaxed) - 1;
    c.store(v, std::memory_order_relaxed);
    return v == 0;
  }
  return c.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint32_t thread_tag() {
  return static_cast<std::uint32_t>(std::hash<std::thread::id>()(std::this_thread::get_id()) & 0xffff);
}

// Ready cheap successors a worker keeps to run itself (TensorFlow's inline
// ready queue); one per thread, empty between tasks.
thread_local std::vector<std::uint32_t> tls_inline;

}  // namespace

// In program order (a topological order of the DAG, so the counters have
// nothing to decide) when one thread runs everything and there are no
// streams to overlap, or when the plan asks for it; otherwise from the
// DAG's roots, with the pool or on the caller alone.
void RunState::schedule() {
  if (__builtin_expect(plan_->frames != nullptr, 0)) {
    run_frames();
    return;
  }
  if (__builtin_expect(plan_->has_async, 0)) {
    schedule_counted();
    wait_counted();
    return;
  }
  const bool streams = plan_->has_streams();
  solo_ = config_.pool == nullptr && !streams;
  if (config_.plan == ThreadPlan::Sequential || solo_) {
    if (streams) run_in_order<true>();
    else run_in_order<false>();
  } else {
    run_from_roots();
  }
}

// Out of line and cold: the loops that run kernels keep their registers for
// the untimed path.
[[gnu::noinline, gnu::cold]] void RunState::run_kernel_timed(std::uint32_t i) {
  Instruction& in = instrs_[i];
  const std::int64_t t0 = now_ns();
  in.fn(in.ctx);
  const std::int64_t t1 = now_ns();
  if (config_.measure) config_.costs->record(i, t1 - t0);
  if (record_) {
    t_start_[i] = t0;
    t_end_[i] = t1;
    t_thread_[i] = thread_tag();
    if (config_.stats) t_bytes_[i] = output_bytes(i);
  }
}

// Runs i's kernel on this thread, timed when the run is profiled or measured.
inline void RunState::run_kernel(std::uint32_t i) {
  Instruction& in = instrs_[i];
  if (__builtin_expect(!timed_, 1)) {
    in.fn(in.ctx);
    return;
  }
  run_kernel_timed(i);
}

template <bool kStreams, bool kAsync>
inline RunState::Step RunState::execute(std::uint32_t i) {
  if constexpr (kStreams) {
    if (plan_->lane[i] >= 0) return launch(i) ? Step::Ran : Step::Failed;
    // Sync successor of stream work: block until its events complete, then
    // check abort_ (a failed stream kernel set it before its event completed).
    if (plan_->wait_off[i] != plan_->wait_off[i + 1] && !wait_on_host(i)) return Step::Failed;
  }
  // Relaxed: a stale "false" only runs one more op before the abort is seen.
  if (abort_.load(std::memory_order_relaxed)) return Step::Failed;
  if constexpr (kAsync)
    if (instrs_[i].fn == nullptr) return start_async_kernel(i);
  try {
    run_kernel(i);
  } catch (...) {
    record_error(i);
    return Step::Failed;
  }
  return Step::Ran;
}

void RunState::record_error(std::uint32_t i) noexcept { record_error(i, std::current_exception()); }

void RunState::record_error(std::uint32_t i, std::exception_ptr error) noexcept {
  std::exception_ptr failed;  // this call's error, when it is the run's first and a kernel's
  {
    std::lock_guard lock(error_mutex_);
    if (!error_) {
      if (i != kRunIndex && step_.rendezvous) failed = error;
      error_ = std::move(error);
      error_instr_ = i;
    } else if (error_instr_ == kRunIndex && i < kRunIndex && waiting_instr_ == kNoIndex) {
      waiting_instr_ = i;  // woken by the run's cancellation
      waiting_error_ = std::move(error);
    }
  }
  // release: a thread that sees the flag through an acquire (an event wait,
  // a queue hand-off) also sees the stored error. Readers that only load it
  // relaxed may run one more kernel before they see it.
  abort_.store(true, std::memory_order_release);
  // Asynchronous kernels still waiting (receives) are woken: the run is
  // failing. Every caller holds one of the run's counted tasks, or is a
  // cancellation callback the run's end waits for (end_step), so the
  // manager outlives this call.
  if (cancel_) cancel_->start_cancel();
  if (failed) abort_rendezvous(i, failed);
}

// always_inline: it is also called from run_on_stream(); without the
// attribute GCC stopped inlining it into the host hot loop (a PLT call per
// instruction, ~1 ns on the chain benchmark).
[[gnu::always_inline]] inline void RunState::collect_garbage(std::uint32_t i) {
  if (__builtin_expect(keep_temporaries_, 0)) return;
  const ExecutionPlan& p = *plan_;
  for (std::uint32_t k = gc_off_[i], e = gc_off_[i + 1]; k < e; ++k) {
    const std::uint32_t s = gc_[k];
    const std::int32_t count = p.ref_count[s];
    // acq_rel: the last user's decrement must see every other user's writes
    // (release) before the variable is freed (acquire).
    if (count == 1 || count_down(ref_[s], solo_)) {
      if (count != 1) ref_[s].store(count, std::memory_order_relaxed);  // ready for the next run
      Variable* v = vars_[s];
      if (!v->is_initialized()) continue;
      if (!p.record_off.empty() && p.record_off[s] != p.record_off[s + 1]) record_streams(s);
      if (__builtin_expect(probing_, 0)) probe_slot(s);
      if (const std::uint32_t r = p.recycle_max[s]) v->recycle(r);
      else v->clear();
    }
  }
}

// Marks slot s's buffer as used by the device streams whose work touched
// it (ExecutionPlan::record), before GC lets it go.
void RunState::record_streams(std::uint32_t s) {
  const ExecutionPlan& p = *plan_;
  Variable* v = vars_[s];
  if (!v->is<Tensor>()) return;
  const BufferRef& buffer = v->get<Tensor>().buffer();
  if (!buffer) return;
  for (std::uint32_t k = p.record_off[s], e = p.record_off[s + 1]; k < e; ++k)
    buffer->record_stream(*streams_[p.record[k]]);
}

template <bool kStreams, bool kAsync>
void RunState::run_in_order() {
  const std::uint32_t n = plan_->size();
  const bool gc = plan_->options.gc;
  for (std::uint32_t i = 0; i < n; ++i) {
    // Never Suspended: a plan with asynchronous kernels runs from the roots,
    // except a region's, which waits for them (blocking_).
    if (execute<kStreams, kAsync>(i) != Step::Ran) return;
    // A stream instruction collects its garbage on its stream.
    if (gc && (!kStreams || plan_->lane[i] < 0)) collect_garbage(i);
  }
}

// ---- streams ----

// The host blocks on the events of i's stream predecessors (sync edges).
bool RunState::wait_on_host(std::uint32_t i) {
  try {
    for (std::uint32_t k = plan_->wait_off[i], e = plan_->wait_off[i + 1]; k < e; ++k)
      out_event_[plan_->wait[k]]->synchronize();
  } catch (...) {
    record_error(i);
    return false;
  }
  return true;
}

// Launches i onto its stream: the stream first waits on the events of i's
// predecessors on other streams, then runs the kernel; the host does not
// wait. The event recorded after the launch covers the kernel (and its GC).
bool RunState::launch(std::uint32_t i) {
  // Relaxed: as in execute().
  if (abort_.load(std::memory_order_relaxed)) return false;
  const ExecutionPlan& p = *plan_;
  Stream& stream = *streams_[static_cast<std::size_t>(p.lane[i])];
  try {
    for (std::uint32_t k = p.wait_off[i], e = p.wait_off[i + 1]; k < e; ++k)
      stream.wait(*out_event_[p.wait[k]]);
    stream.enqueue([this, i] { run_on_stream(i); });
    if (Event* e = out_event_[i].get()) e->record(stream);
  } catch (...) {
    record_error(i);
    return false;
  }
  return true;
}

// On i's stream thread. GC of i's variables happens here, after the kernel,
// not on the launching host thread: a host-stream kernel reads its
// Variables when it runs (a CUDA launch binds pointers at launch), so
// dropping them at launch would pull the input from under it (executor.md §5).
void RunState::run_on_stream(std::uint32_t i) {
  // Relaxed: a kernel that failed earlier on this stream is sequenced before;
  // one on another stream or the host that i depends on stored abort_ before
  // the event i's stream waited on completed (that wait acquires).
  if (abort_.load(std::memory_order_relaxed)) return;
  Event* t0 = dev_start_.empty() || !record_ ? nullptr : dev_start_[i].get();
  try {
    if (t0) t0->record(*streams_[static_cast<std::size_t>(plan_->lane[i])]);
    run_kernel(i);
    if (t0) dev_end_[i]->record(*streams_[static_cast<std::size_t>(plan_->lane[i])]);
  } catch (...) {
    record_error(i);
    return;
  }
  collect_garbage(i);
}

void RunState::synchronize_streams() {
  for (auto& s : streams_) {
    try {
      s->synchronize();
    } catch (...) {
      // Kernels' own exceptions are caught in run_on_stream(); this is a
      // failure of the stream machinery itself (a failed event wait).
      record_error(kNoIndex);
    }
  }
}

// ---- from the roots ----

void RunState::hand_out(std::uint32_t i) {
  if (!config_.pool) {
    local_ready_.push_back(i);
    return;
  }
  // Relaxed: the queue's lock orders the push; pending_ only counts.
  pending_.fetch_add(1, std::memory_order_relaxed);
  config_.pool->push(WorkTask{&RunState::task_entry, this, i});
}

void RunState::task_entry(void* state, std::uint32_t i) {
  auto* self = static_cast<RunState*>(state);
  if (self->plan_->has_async) {
    if (self->plan_->has_streams()) self->run_chain<true, true>(i);
    else self->run_chain<false, true>(i);
  } else {
    if (self->plan_->has_streams()) self->run_chain<true>(i);
    else self->run_chain<false>(i);
  }
  self->finish_task();  // the last access to the state
}

void RunState::finish_task() {
  // acq_rel: release publishes this task's work; the decrement that reaches
  // 0 acquires every other task's (the RMWs on pending_ form one release
  // sequence), so the final thread has seen all work of the run.
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // An asynchronous run ends on this thread (completion_ was set before the
  // run's first task, which the decrements above are ordered after).
  if (completion_.fn) {
    complete();
    return;
  }
  // The caller may see pending_ == 0 before we get here (it polls while it
  // helps), so 0 alone must not let it return: the state could be destroyed
  // under a later notify. It returns only after it has read done_ == true
  // under done_mutex_, and we set and notify while holding that mutex. The
  // caller's lock therefore happens after our unlock, which is this thread's
  // last access to the state (a mutex may be destroyed as soon as it is
  // unlocked). The mutex also carries the acquired work to the caller.
  std::lock_guard lock(done_mutex_);
  done_ = true;
  done_cv_.notify_all();
}

// Runs i, then its ready successors (seed 003's ScheduleReady): cheap ones
// (by the cost model) stay on this thread — one next, the rest in its inline
// queue, as a hand-off costs more than a cheap op — and expensive ones go to
// the pool, except the last when this thread has nothing else to do.
//
// `resumed`: i already ran (an asynchronous kernel whose callback came
// after its starter had moved on): go on with its successors.
template <bool kStreams, bool kAsync>
void RunState::run_chain(std::uint32_t i, bool resumed) {
  std::vector<std::uint32_t>& inline_ready = config_.pool ? tls_inline : local_ready_;
  const ExecutionPlan& p = *plan_;
  const CostModel& costs = *config_.costs;
  const bool solo = solo_;
  const std::size_t base = inline_ready.size();
  for (;;) {
    if (!kAsync || !resumed) {
      const Step step = execute<kStreams, kAsync>(i);
      if (step == Step::Failed) {
        inline_ready.resize(base);  // the run is aborting: drop this chain's leftovers
        return;
      }
      if (kAsync && step == Step::Suspended) {
        // Its callback goes on with its successors; this thread with what
        // else it holds.
        if (inline_ready.size() == base) return;
        i = inline_ready.back();
        inline_ready.pop_back();
        continue;
      }
    }
    if constexpr (kAsync) resumed = false;
    // A stream instruction collects its garbage on its stream, after its kernel.
    if (!kStreams || p.lane[i] < 0) collect_garbage(i);
    std::uint32_t next = kNoIndex, expensive = kNoIndex;
    for (std::uint32_t k = p.succ_off[i], e = p.succ_off[i + 1]; k < e; ++k) {
      const std::uint32_t s = p.succ[k];
      const std::uint32_t count = p.dep_count[s];
      // A lone predecessor needs no atomic: it is the only one to reach s.
      // acq_rel: the last predecessor sees the others' outputs.
      if (count != 1 && !count_down(dep_[s], solo)) continue;
      if (count != 1) dep_[s].store(static_cast<std::int32_t>(count), std::memory_order_relaxed);
      if constexpr (kStreams) {
        if (p.lane[s] < 0 && p.lane[i] >= 0) {
          // Sync successor: it will block on the stream, so another thread
          // takes it; with no pool it waits until the host has nothing else
          // ready (sync_ready_).
          if (config_.pool) hand_out(s);
          else sync_ready_.push_back(s);
          continue;
        }
        if (p.lane[s] >= 0 && next != kNoIndex && p.lane[next] < 0) {
          // Launches go first: they are cheap and feed the streams.
          inline_ready.push_back(next);
          next = s;
          continue;
        }
      }
      // A launch is cheap whatever its kernel costs on the stream.
      if (config_.pool && costs.expensive(s) && (!kStreams || p.lane[s] < 0)) {
        if (expensive != kNoIndex) hand_out(expensive);  // worth another thread
        expensive = s;
      } else if (next == kNoIndex) {
        next = s;  // keep one on this thread
      } else {
        inline_ready.push_back(s);
      }
    }
    if (expensive != kNoIndex) {
      // The last expensive one stays here only if this thread has nothing else.
      if (next == kNoIndex && inline_ready.size() == base) next = expensive;
      else hand_out(expensive);
    }
    if (next == kNoIndex) {
      if (inline_ready.size() == base) return;
      next = inline_ready.back();
      inline_ready.pop_back();
    }
    i = next;
  }
}

void RunState::run_from_roots() {
  if (plan_->roots.empty()) return;
  if (config_.pool) run_with_pool();
  else run_ready_on_caller();
}

// No pool, with streams (a host-only plan runs in order): host work first; a
// successor that blocks on a stream only when none is left (oldest first:
// its stream work was launched earliest).
void RunState::run_ready_on_caller() {
  local_ready_.clear();
  sync_ready_.clear();
  const auto& roots = plan_->roots;
  for (auto it = roots.rbegin(); it != roots.rend(); ++it) local_ready_.push_back(*it);
  const bool streams = plan_->has_streams();
  std::size_t next_sync = 0;
  for (;;) {
    std::uint32_t i;
    if (!local_ready_.empty()) {
      i = local_ready_.back();
      local_ready_.pop_back();
    } else if (next_sync < sync_ready_.size()) {
      i = sync_ready_[next_sync++];
    } else {
      break;
    }
    if (streams) run_chain<true>(i);
    else run_chain<false>(i);
  }
}

void RunState::run_with_pool() {
  const auto& roots = plan_->roots;
  pending_.store(1, std::memory_order_relaxed);
  for (std::size_t k = 1; k < roots.size(); ++k) hand_out(roots[k]);
  if (plan_->has_streams()) run_chain<true>(roots[0]);
  else run_chain<false>(roots[0]);
  finish_task();
  // Take part instead of sleeping while there is queued work. Relaxed: it
  // only decides whether to keep helping; completion is read under
  // done_mutex_ below.
  while (pending_.load(std::memory_order_relaxed) != 0 && config_.pool->try_run_one()) {
  }
  std::unique_lock lock(done_mutex_);
  done_cv_.wait(lock, [this] { return done_; });
  done_ = false;
}

// ---- counted runs (a plan with asynchronous kernels; start()) ----

// A plan with asynchronous kernels runs from the DAG's roots over a pool — the core's, or without one the queue
// that takes continuations (config_.resume) — never in program order: an
// instruction after a pending receive in program order may be what sends
// its value. pending_ counts this thread's task, every task handed out and
// every asynchronous kernel still outstanding.
//
// start()'s runs of a plan without asynchronous kernels keep the thread
// plan's choice: in program order on this thread, as run() would.
void RunState::schedule_counted() {
  counted_ = true;
  if (!config_.resume) config_.resume = &shared_async_queue();
  if (__builtin_expect(plan_->frames != nullptr, 0)) {
    // On this thread alone (it may be a pool thread: it must not wait for
    // another; a receive's wait holds none), then the run's end. start()'s
    // runs only: completion_ is set.
    // Relaxed: nothing else touches pending_ in this run.
    pending_.store(1, std::memory_order_relaxed);
    config_.plan = ThreadPlan::Sequential;
    run_frames();  // ends the task (finish_task), at once or from a receive's done
    return;
  }
  const bool streams = plan_->has_streams();
  // Relaxed: the run's tasks are published by the queue's lock.
  pending_.store(1, std::memory_order_relaxed);
  if (!plan_->has_async && (config_.plan == ThreadPlan::Sequential || !config_.pool)) {
    solo_ = !streams;
    if (streams) run_in_order<true>();
    else run_in_order<false>();
  } else {
    if (!config_.pool) config_.pool = config_.resume;
    if (!config_.costs) {
      if (!own_costs_) own_costs_ = std::make_unique<CostModel>(plan_->size());
      config_.costs = own_costs_.get();
    }
    solo_ = false;
    const auto& roots = plan_->roots;
    if (!roots.empty()) {
      for (std::size_t k = 1; k < roots.size(); ++k) hand_out(roots[k]);
      if (plan_->has_async) {
        if (streams) run_chain<true, true>(roots[0]);
        else run_chain<false, true>(roots[0]);
      } else {
        if (streams) run_chain<true>(roots[0]);
        else run_chain<false>(roots[0]);
      }
    }
  }
  finish_task();  // start(): may end the run, the last access to the state
}

// The caller of a synchronous counted run helps with queued work, then
// sleeps until the last task has finished (finish_task()) — waking now and
// then to help again: the caller may itself be a pool thread (a run called
// from a done callback or a kernel), and the continuation of a receive that
// completes later is queued on the pool, which may have no other thread free.
void RunState::wait_counted() {
  for (;;) {
    // Relaxed: as in run_with_pool().
    while (pending_.load(std::memory_order_relaxed) != 0 && config_.pool->try_run_one()) {
    }
    std::unique_lock lock(done_mutex_);
    if (done_cv_.wait_for(lock, std::chrono::microseconds(200), [this] { return done_; })) {
      done_ = false;
      return;
    }
  }
}

// On a pool thread: asynchronous kernel i completed after its starter moved
// on. Its error fails the run; otherwise its garbage and successors follow.
void RunState::resume_after(std::uint32_t i) {
  if (std::exception_ptr e = async_[i].error) {
    record_error(i, std::move(e));
    return;
  }
  if (plan_->has_streams()) run_chain<true, true>(i, /*resumed=*/true);
  else run_chain<false, true>(i, /*resumed=*/true);
}

void RunState::resume_entry(void* state, std::uint32_t i) {
  auto* self = static_cast<RunState*>(state);
  self->resume_after(i);
  self->finish_task();  // the count the kernel held; may end the run
}

// run_region() (run_state.cc) walks a region's plan in program order.
template void RunState::run_in_order<false, false>();
template void RunState::run_in_order<false, true>();

}  // namespace kiln
