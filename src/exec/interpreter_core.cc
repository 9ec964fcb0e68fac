#include "kiln/exec/interpreter_core.h"

#include <chrono>
#include <sstream>
#include <unordered_map>

#include "kiln/exec/control_flow.h"
#include "kiln/exec/plan_builder.h"
#include "kiln/ir/region.h"
#include "kiln/kernel/blas.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/runtime/cuda_context.h"
#include "step_abort.h"

namespace kiln {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A Sequential plan or one thread in all keeps the pool out of the core;
// 0 threads means the pool's threads and the caller.
std::shared_ptr<WorkQueue> usable_queue(const ExecutionOptions& o, std::shared_ptr<WorkQueue> q) {
  if (o.thread_plan == ThreadPlan::Sequential || o.num_threads == 1) return nullptr;
  return q;
}

unsigned thread_count(const ExecutionOptions& o, const std::shared_ptr<WorkQueue>& q) {
  if (o.num_threads) return o.num_threads;
  return q ? q->num_threads() + 1 : 1;
}

ExecutionOptions with_place_checked(ExecutionOptions o) {
  require_place_runs(o.place);
  return o;
}

}  // namespace

struct InterpreterCore::Optimized {
  Program program;
  std::vector<FetchTarget> fetch;
  ExecutionOptions options;
  // The caller's values → the optimised program's (those a pass erased
  // without a replacement are absent).
  std::unordered_map<const detail::ValueImpl*, Value> values;
  // Per op of the copy's top block: its position in the caller's program
  // (kNoIndex: a pass made it), for errors and traces.
  std::vector<std::uint32_t> op_numbers;

  // Runs options.passes on a copy of `source`. Fetch targets and skip_gc
  // values are live-out: kept, and followed through the passes'
  // replacements.
  static std::shared_ptr<const Optimized> make(const Program& source,
                                               const std::vector<FetchTarget>& fetch,
                                               const ExecutionOptions& options, unsigned num_threads);

  // The copy's top-level ops → their position in the caller's (dropped when
  // a pass erases one).
  using OpNumbers = std::unordered_map<const Operation*, std::uint32_t>;
  // The copy's values → the caller's, so that erased ones drop out.
  using CallerValues = std::unordered_map<const detail::ValueImpl*, const detail::ValueImpl*>;
  // Where the live-out values are in PassContext::live_out(): per fetch
  // target given by value (the others unset), and per skip_gc value.
  struct LiveOutSlots {
    std::vector<std::size_t> fetch, gc;
  };

  // Copies the parameters and top-level ops of `source` into `program`.
  OpNumbers copy_ops(const Program& source, IrMapping& map);
  // Records in `values` and `back` every value of `block` (nested ones too)
  // that `map` has a copy of.
  void map_values(const Block& block, const IrMapping& map, CallerValues& back);
  // The copy of the caller's `v`; kiln::Error when it has none.
  Value mapped(Value v, const char* what) const;
  // Makes live-out in `ctx` the copies of the fetch targets, of the values
  // that fetches by name refer to, and of the skip_gc values.
  LiveOutSlots add_live_outs(PassContext& ctx, const Program& source,
                             const std::vector<FetchTarget>& caller_fetch,
                             const ExecutionOptions& caller_options) const;
  // Runs `pm` on `program`, then numbers its top-level ops.
  void run_passes(PassManager& pm, PassContext& ctx, OpNumbers& number, CallerValues& back);
  // Drops from `values` the values defined by `op` and the ops nested in it.
  void forget_values_of(Operation* op, CallerValues& back);
  // Sets `fetch` and `options` to the caller's, with the live-out values
  // replaced by what the passes left in their slots, and maps the caller's
  // live-out values to those.
  void take_live_outs(const PassContext& ctx, const LiveOutSlots& slots,
                      const std::vector<FetchTarget>& caller_fetch,
                      const ExecutionOptions& caller_options);
};

std::shared_ptr<const InterpreterCore::Optimized> InterpreterCore::Optimized::make(
    const Program& source, const std::vector<FetchTarget>& fetch, const ExecutionOptions& options,
    unsigned num_threads) {
  if (options.passes.empty()) return nullptr;
  PassManager pm = PassManager::parse(options.passes);  // a bad pipeline fails before any copy
  auto out = std::make_shared<Optimized>();
  IrMapping map;
  OpNumbers number = out->copy_ops(source, map);
  CallerValues back;
  out->map_values(source.block(), map, back);

  PassContext ctx;
  ctx.target_place = options.place;
  ctx.num_threads = num_threads;
  const LiveOutSlots slots = out->add_live_outs(ctx, source, fetch, options);
  out->run_passes(pm, ctx, number, back);
  out->take_live_outs(ctx, slots, fetch, options);
  return out;
}

InterpreterCore::Optimized::OpNumbers InterpreterCore::Optimized::copy_ops(const Program& source,
                                                                         IrMapping& map) {
  for (const auto& [name, param] : source.parameters()) program.set_parameter(name, param);
  OpNumbers number;
  for (Operation* op : source.block()) {
    Operation* c = op->clone(map);
    number.emplace(c, static_cast<std::uint32_t>(number.size()));
    program.block().push_back(c);
  }
  return number;
}

void InterpreterCore::Optimized::map_values(const Block& block, const IrMapping& map,
                                            CallerValues& back) {
  auto record = [&](Value v) {
    Value c = map.lookup(v);
    if (!c) return;
    values[v.impl()] = c;
    back[c.impl()] = v.impl();
  };
  for (Value a : block.arguments()) record(a);
  for (Operation* op : block) {
    for (Value r : op->results()) record(r);
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) map_values(*inner, map, back);
  }
}

Value InterpreterCore::Optimized::mapped(Value v, const char* what) const {
  auto it = values.find(v.impl());
  if (it == values.end())
    throw_error(ErrorKind::InvalidArgument, what, " value is not a value of the program");
  return it->second;
}

InterpreterCore::Optimized::LiveOutSlots InterpreterCore::Optimized::add_live_outs(
    PassContext& ctx, const Program& source, const std::vector<FetchTarget>& caller_fetch,
    const ExecutionOptions& caller_options) const {
  LiveOutSlots slots;
  slots.fetch.assign(caller_fetch.size(), ~std::size_t{0});
  for (std::size_t k = 0; k < caller_fetch.size(); ++k)
    if (Value target = caller_fetch[k].value) {
      require_fetchable(target, k);  // before the passes move region values about
      slots.fetch[k] = ctx.add_live_out(mapped(target, "a fetch target's"));
    } else {
      // A fetch by name: the value it names stays (dce would drop an unused
      // parameter op, and the name with it); the plan finds it by name again.
      Operation* fetch_op = nullptr;
      if (Value v = find_named_fetch(source.block(), caller_fetch[k].name, &fetch_op);
          v && !fetch_op)
        ctx.add_live_out(mapped(v, "a fetch target's"));
    }
  for (Value v : caller_options.skip_gc)
    slots.gc.push_back(ctx.add_live_out(mapped(v, "a skip_gc")));
  return slots;
}

void InterpreterCore::Optimized::run_passes(PassManager& pm, PassContext& ctx, OpNumbers& number,
                                            CallerValues& back) {
  ctx.set_erase_listener([&](Operation* op) {
    number.erase(op);
    forget_values_of(op, back);
  });
  pm.run(program, ctx);
  ctx.set_erase_listener(nullptr);
  for (Operation* op : program.block()) {
    auto it = number.find(op);
    op_numbers.push_back(it == number.end() ? kNoIndex : it->second);
  }
}

void InterpreterCore::Optimized::forget_values_of(Operation* op, CallerValues& back) {
  for (Value r : op->results())
    if (auto it = back.find(r.impl()); it != back.end()) {
      values.erase(it->second);
      back.erase(it);
    }
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* inner : op->region(r))
      for (Operation* o : *inner) forget_values_of(o, back);
}

void InterpreterCore::Optimized::take_live_outs(const PassContext& ctx, const LiveOutSlots& slots,
                                                const std::vector<FetchTarget>& caller_fetch,
                                                const ExecutionOptions& caller_options) {
  fetch = caller_fetch;
  for (std::size_t k = 0; k < fetch.size(); ++k)
    if (caller_fetch[k].value) fetch[k].value = ctx.live_out()[slots.fetch[k]];
  options = caller_options;
  for (std::size_t k = 0; k < slots.gc.size(); ++k)
    options.skip_gc[k] = ctx.live_out()[slots.gc[k]];
  // Live-out values a pass replaced: the caller's value now stands for the replacement.
  for (std::size_t k = 0; k < fetch.size(); ++k)
    if (caller_fetch[k].value) values[caller_fetch[k].value.impl()] = fetch[k].value;
  for (std::size_t k = 0; k < slots.gc.size(); ++k)
    values[caller_options.skip_gc[k].impl()] = options.skip_gc[k];
}

void require_place_runs(Place place) {
  if (place.kind == PlaceKind::Cuda && !built_with_cuda())
    throw_error(ErrorKind::Unimplemented, "place ", place.to_string(),
                " has no kernels: kiln was built without CUDA (meson option cuda, needs nvcc on PATH)");
  if (place.kind != PlaceKind::Cpu && place.kind != PlaceKind::HostStream &&
      !KernelRegistry::instance().has_backend(place.kind))
    throw_error(ErrorKind::Unimplemented, "place ", place.to_string(),
                " has no kernels: kiln was built without a backend for it (CPU and host_stream places run)");
  if (place.kind == PlaceKind::Cuda && place.device >= cuda_device_count())
    throw_error(ErrorKind::InvalidArgument, "place ", place.to_string(), ": no such CUDA device (",
                cuda_device_count(), " present)");
}

InterpreterCore::InterpreterCore(const Program& program, Scope& scope, std::vector<std::string> feed_names,
                                 const std::vector<FetchTarget>& fetch, ExecutionOptions options,
                                 std::shared_ptr<WorkQueue> queue)
    : feed_names_(std::move(feed_names)),
      optimized_(Optimized::make(program, fetch, options, thread_count(options, usable_queue(options, queue)))),
      plan_(optimized_ ? PlanBuilder(optimized_->program, feed_names_, optimized_->fetch,
                                     with_place_checked(optimized_->options))
                             .number_ops(optimized_->op_numbers)
                             .build()
                       : PlanBuilder(program, feed_names_, fetch, with_place_checked(std::move(options)))
                             .build()),
      scope_(&scope),
      queue_(usable_queue(plan_->options, std::move(queue))),
      num_threads_(thread_count(plan_->options, queue_)),
      costs_(plan_->size()),
      tuner_(plan_->options.thread_plan, queue_ != nullptr, plan_->has_intra_op, plan_->has_parallelism,
             plan_->has_streams()),
      primary_(std::make_unique<RunState>(plan_, scope)) {
  idle_.store(primary_.get(), std::memory_order_relaxed);
}

std::vector<Tensor> InterpreterCore::run(std::span<const Tensor> feeds) {
  std::vector<Tensor> out(num_fetches());
  // Not taken: the feeds are only read (shared into their variables).
  run(std::span<Tensor>(const_cast<Tensor*>(feeds.data()), feeds.size()), /*take=*/false, out);
  return out;
}

std::vector<Tensor> InterpreterCore::run(std::vector<Tensor>&& feeds) {
  std::vector<Tensor> out(num_fetches());
  run(std::span<Tensor>(feeds), /*take=*/true, out);
  return out;
}

void InterpreterCore::run(std::span<Tensor> feeds, bool take, std::span<Tensor> results) {
  FeedPointers ptrs(feeds.size());
  for (std::size_t k = 0; k < feeds.size(); ++k) ptrs[k] = &feeds[k];
  run(ptrs.span(), take, results);
}

std::vector<Tensor> InterpreterCore::run(std::span<const Tensor> feeds, StepStats& stats) {
  std::vector<Tensor> out(num_fetches());
  FeedPointers ptrs(feeds.size());
  for (std::size_t k = 0; k < feeds.size(); ++k) ptrs[k] = const_cast<Tensor*>(&feeds[k]);
  run(ptrs.span(), /*take=*/false, out, nullptr, &stats);
  return out;
}

void InterpreterCore::run(std::span<Tensor* const> feeds, bool take, std::span<Tensor> results,
                          const RunOptions* options, StepStats* stats) {
  if (__builtin_expect(stats != nullptr, 0)) stats->clear();
  try {
    plan_->check_feeds(feeds);
    if (results.size() != num_fetches())
      throw_error(ErrorKind::InvalidArgument, "expected room for ", num_fetches(),
                  " fetched tensors, got ", results.size());
  } catch (const std::exception& e) {
    if (stats) {
      stats->failed = true;
      stats->error = e.what();
    }
    if (options && options->rendezvous)
      abort_step(*options->rendezvous, options->step_id, "a run's check of its feeds", std::current_exception());
    throw;
  }
  // The caller's previous results go first: a result still holding last
  // run's buffer would keep its kernel from reusing it (an allocation per run).
  for (Tensor& r : results) r = Tensor();
  RunState* state = acquire_state();
  struct GiveBack {
    InterpreterCore* core;
    RunState* state;
    ~GiveBack() { core->release_state(state); }
  } give_back{this, state};
  ThreadPlanTuner::Choice choice;
  RunConfig config = configure_run(*state, choice);
  config.stats = stats;
  const std::int64_t t0 = choice.trial ? now_ns() : 0;
  {
    BlasThreadsGuard blas(plan_->has_blas, config.plan, num_threads_);
    const KernelThreadsScope kernel_threads(
        config.plan == ThreadPlan::Blas ? static_cast<int>(num_threads_) : 1);
    state->run(feeds, take, config, results, options);
  }
  if (config.measure) costs_.run_measured();
  if (choice.trial) tuner_.report(choice, now_ns() - t0);
}

// ---- asynchronous runs ----

// One run_async call, from the call to `done`: what the run reads and
// writes lives here, on the heap, as the caller's frame is gone. Kept by
// the core for its next asynchronous run (idle_async_), vectors and all.
struct InterpreterCore::AsyncRun {
  InterpreterCore* core = nullptr;
  std::shared_ptr<InterpreterCore> keep_alive;
  std::vector<Tensor> feeds;
  std::vector<Tensor*> feed_ptrs;
  std::vector<Tensor> results;
  RunOptions options;
  RunDone done;
  std::atomic<std::int64_t>* in_flight = nullptr;
  ThreadPlanTuner::Choice choice;
  bool measure = false;
  std::int64_t t0 = 0;
};

InterpreterCore::~InterpreterCore() { delete idle_async_.load(std::memory_order_acquire); }

InterpreterCore::AsyncRun* InterpreterCore::take_async_run() {
  // acquire: pairs with the release that handed a finished run's record back.
  if (AsyncRun* r = idle_async_.exchange(nullptr, std::memory_order_acquire)) return r;
  return new AsyncRun;
}

void InterpreterCore::run_async(std::vector<Tensor> feeds, const RunOptions& options, RunDone done,
                                std::shared_ptr<InterpreterCore> keep_alive,
                                std::atomic<std::int64_t>* in_flight) {
  AsyncRun* r = take_async_run();
  r->feeds = std::move(feeds);
  launch_async(r, options, std::move(done), std::move(keep_alive), in_flight);
}

void InterpreterCore::run_async(std::span<Tensor* const> feeds, const RunOptions& options,
                                RunDone done, std::shared_ptr<InterpreterCore> keep_alive,
                                std::atomic<std::int64_t>* in_flight) {
  AsyncRun* r = take_async_run();
  r->feeds.resize(feeds.size());  // keeps the capacity of the record's last run
  for (std::size_t k = 0; k < feeds.size(); ++k) r->feeds[k] = *feeds[k];
  launch_async(r, options, std::move(done), std::move(keep_alive), in_flight);
}

void InterpreterCore::launch_async(AsyncRun* r, const RunOptions& options, RunDone done,
                                   std::shared_ptr<InterpreterCore> keep_alive,
                                   std::atomic<std::int64_t>* in_flight) {
  r->core = this;
  r->keep_alive = std::move(keep_alive);
  r->feed_ptrs.resize(r->feeds.size());
  for (std::size_t k = 0; k < r->feeds.size(); ++k) r->feed_ptrs[k] = &r->feeds[k];
  r->results.resize(num_fetches());
  r->options = options;
  r->done = std::move(done);
  r->in_flight = in_flight;
  if (options.run_in_caller_thread) start_async(r);
  else (queue_ ? *queue_ : shared_async_queue()).push(WorkTask{&InterpreterCore::start_async_entry, r, 0});
}

void InterpreterCore::start_async_entry(void* run, std::uint32_t) {
  auto* r = static_cast<AsyncRun*>(run);
  r->core->start_async(r);
}

// On a pool thread (the caller's with RunOptions::run_in_caller_thread):
// what run() does before the scheduler, then the state's start(); the
// state calls async_run_completed once the run is done.
void InterpreterCore::start_async(AsyncRun* r) noexcept {
  RunState* state = nullptr;
  try {
    plan_->check_feeds(r->feed_ptrs);
    state = acquire_state();
  } catch (...) {
    if (r->options.rendezvous)
      abort_step(*r->options.rendezvous, r->options.step_id, "a run's check of its feeds",
                 std::current_exception());
    deliver(r, std::current_exception());
    return;
  }
  RunConfig config = configure_run(*state, r->choice);
  // No BlasThreadsGuard: its lock cannot follow the run from thread to
  // thread; BLAS keeps the thread count it has.
  r->measure = config.measure;
  r->t0 = r->choice.trial ? now_ns() : 0;
  const KernelThreadsScope kernel_threads(1);  // ops this thread runs before it hands off
  state->start(r->feed_ptrs, /*take=*/true, config, r->results, r->options,
               RunState::Completion{&InterpreterCore::async_run_completed, r});
}

void InterpreterCore::async_run_completed(void* run, RunState& state) noexcept {
  auto* r = static_cast<AsyncRun*>(run);
  InterpreterCore* core = r->core;
  std::exception_ptr error = state.finish_async();
  core->release_state(&state);  // the state may serve another run from here on
  if (r->measure) core->costs_.run_measured();
  if (r->choice.trial && !error) core->tuner_.report(r->choice, now_ns() - r->t0);
  deliver(r, std::move(error));
}

void InterpreterCore::deliver(AsyncRun* r, std::exception_ptr error) noexcept {
  if (!error) {
    r->done(nullptr, std::move(r->results));
  } else {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      r->done(&e, std::vector<Tensor>{});
    } catch (const std::exception& e) {
      const Error wrapped(ErrorKind::Internal, e.what());
      r->done(&wrapped, std::vector<Tensor>{});
    } catch (...) {
      const Error wrapped(ErrorKind::Internal, "a run failed with an unknown exception");
      r->done(&wrapped, std::vector<Tensor>{});
    }
  }
  std::atomic<std::int64_t>* in_flight = r->in_flight;
  if (InterpreterCore* core = r->core) {
    // Hand the record back to its core, emptied but for its vectors'
    // capacity, then drop the run's reference (it may be the core's last).
    std::shared_ptr<InterpreterCore> keep_alive = std::move(r->keep_alive);
    r->done.reset();
    r->feeds.clear();
    for (Tensor& t : r->results) t = Tensor{};
    r->options = RunOptions{};
    AsyncRun* none = nullptr;
    // release: the next taker (acquire) sees the record emptied.
    if (!core->idle_async_.compare_exchange_strong(none, r, std::memory_order_release,
                                                   std::memory_order_relaxed))
      delete r;
  } else {
    delete r;
  }
  // release: whoever sees the count fall (acquire) sees every access of
  // this run done.
  if (in_flight) in_flight->fetch_sub(1, std::memory_order_release);
}

void InterpreterCore::fail_async(WorkQueue& queue, RunDone done, std::exception_ptr error,
                                 std::atomic<std::int64_t>* in_flight) {
  struct Failed {
    RunDone done;
    std::exception_ptr error;
    std::atomic<std::int64_t>* in_flight;
  };
  auto* f = new Failed{std::move(done), std::move(error), in_flight};
  queue.push(WorkTask{[](void* p, std::uint32_t) {
                        auto* f = static_cast<Failed*>(p);
                        auto* r = new AsyncRun;
                        r->done = std::move(f->done);
                        r->in_flight = f->in_flight;
                        std::exception_ptr e = std::move(f->error);
                        delete f;
                        deliver(r, std::move(e));
                      },
                      f, 0});
}

// The run's thread plan, pool and measuring. Costs matter only to runs over
// the pool: a core that will never use it does not measure them.
RunConfig InterpreterCore::configure_run(RunState& state, ThreadPlanTuner::Choice& choice) {
  RunConfig c;
  c.costs = &costs_;
  const bool settled = tuner_.decided() && (tuner_.chosen() != ThreadPlan::Graph || !queue_);
  if (settled) {
    choice = {tuner_.chosen(), false};
  } else if (costs_.calibrating()) {
    choice = {tuner_.calibration_plan(), false};
    c.measure = true;
  } else {
    choice = tuner_.next();
    c.measure = !choice.trial && costs_.should_measure(state.num_runs());
  }
  c.plan = choice.plan;
  c.pool = choice.plan == ThreadPlan::Graph ? queue_.get() : nullptr;
  c.resume = queue_.get();  // null: the state takes shared_async_queue()
  return c;
}

RunState* InterpreterCore::acquire_state() {
  // acquire: pairs with release_state()'s release; the previous run's
  // writes to the state happen before this run.
  if (RunState* s = idle_.exchange(nullptr, std::memory_order_acquire)) return s;
  std::lock_guard lock(mutex_);
  if (!spare_.empty()) {
    RunState* s = spare_.back();
    spare_.pop_back();
    return s;
  }
  extra_.push_back(std::make_unique<RunState>(plan_, *scope_));
  return extra_.back().get();
}

void InterpreterCore::release_state(RunState* state) noexcept {
  last_.store(state, std::memory_order_relaxed);
  RunState* none = nullptr;
  if (idle_.compare_exchange_strong(none, state, std::memory_order_release, std::memory_order_relaxed))
    return;
  std::lock_guard lock(mutex_);
  spare_.push_back(state);
}

std::size_t InterpreterCore::num_run_states() const {
  std::lock_guard lock(mutex_);
  return 1 + extra_.size();
}

// ---- introspection ----

InterpreterCore::InstructionInfo InterpreterCore::instruction(std::uint32_t i) const {
  const ExecutionPlan& p = *plan_;
  const PlanInstruction& in = p.instructions.at(i);
  InstructionInfo info;
  info.op_name = in.name;
  info.op_index = in.op_index;
  for (std::uint32_t s : p.successors(i)) {
    info.successors.push_back(s);
    info.successor_kinds.push_back(successor_kind(in.lane, p.instructions[s].lane));
  }
  info.num_predecessors = p.dep_count[i];
  info.reads = in.reads;
  info.writes = in.writes;
  info.frees.assign(p.gc.begin() + p.gc_off[i], p.gc.begin() + p.gc_off[i + 1]);
  info.lane = in.lane;
  if (p.has_streams()) {
    info.records_event = p.records_event[i] != 0;
    info.waits.assign(p.wait.begin() + p.wait_off[i], p.wait.begin() + p.wait_off[i + 1]);
  }
  return info;
}

const std::string& InterpreterCore::stream_name(std::size_t k) const {
  if (k >= plan_->stream_names.size())
    throw_error(ErrorKind::OutOfRange, "stream index ", k, " out of range: the core has ",
                plan_->stream_names.size(), " streams");
  return plan_->stream_names[k];
}

Variable* InterpreterCore::variable(std::uint32_t slot) const {
  if (slot >= plan_->slots.size())
    throw_error(ErrorKind::OutOfRange, "variable slot ",
                slot == kNoIndex ? std::string("~0 (a value the plan has no slot for: slot_of found none; "
                                               "a pass may have removed it)")
                                 : std::to_string(slot),
                " out of range: the core has ", plan_->slots.size(), " slots");
  return primary_->variable(slot);
}

std::uint32_t InterpreterCore::slot_of(Value v) const {
  if (optimized_) {
    auto m = optimized_->values.find(v.impl());
    if (m == optimized_->values.end()) return kNoIndex;
    v = m->second;
  }
  auto it = plan_->source_slot.find(v.impl());
  return it == plan_->source_slot.end() ? kNoIndex : it->second;
}

namespace {

// The instructions of `p` as nodes named <prefix>i<k>, its DAG's edges, and
// each control-flow instruction's region plans as clusters nested under it
// (a dotted edge from the op to its region's first instruction).
void write_dot(const ExecutionPlan& p, const std::string& prefix, const std::string& indent,
               std::ostream& os) {
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    const PlanInstruction& in = p.instructions[i];
    os << indent << prefix << "i" << i << " [label=\"" << i << ": " << in.name << "\"];\n";
    if (!in.control) continue;
    for (const RegionPlan& r : in.control->regions) {
      if (!r.plan) continue;
      const std::string sub = prefix + "i" + std::to_string(i) + "_" + r.name + "_";
      os << indent << "subgraph cluster_" << sub << " {\n"
         << indent << "  label=\"" << p.label(i) << " " << r.name << "\";\n";
      write_dot(*r.plan, sub, indent + "  ", os);
      os << indent << "}\n";
      if (r.plan->size() > 0)
        os << indent << prefix << "i" << i << " -> " << sub << "i0 [style=dotted, lhead=cluster_"
           << sub << "];\n";
    }
  }
  for (std::uint32_t i = 0; i < p.size(); ++i)
    for (std::uint32_t s : p.successors(i)) {
      const auto kind = successor_kind(p.instructions[i].lane, p.instructions[s].lane);
      os << indent << prefix << "i" << i << " -> " << prefix << "i" << s;
      if (kind == SuccessorKind::Event) os << " [style=dashed]";
      if (kind == SuccessorKind::Sync) os << " [style=bold]";
      os << ";\n";
    }
}

}  // namespace

std::string InterpreterCore::to_dot() const {
  std::ostringstream os;
  os << "digraph kiln {\n  compound=true;\n  node [shape=box, fontname=\"monospace\"];\n";
  write_dot(*plan_, "", "  ", os);
  os << "}\n";
  return os.str();
}

std::string InterpreterCore::chrome_trace() const {
  const RunState* s = last_.load(std::memory_order_relaxed);
  return (s ? s : primary_.get())->chrome_trace();
}

}  // namespace kiln
