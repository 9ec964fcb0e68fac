#include "kiln/exec/run_state.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>

#include "kiln/exec/frame_propagator.h"
#include "kiln/exec/step_stats.h"
#include "kiln/runtime/cuda_context.h"

namespace kiln {

namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A parameter the scope holds on the host for a device slot (loaded from a
// file, set by the user), or on a device for a host slot or another device,
// is copied to the slot's place once, in the scope: the kernels read it there.
void place_parameters(const ExecutionPlan& plan, Scope& root) {
  for (const PlanSlot& s : plan.slots) {
    if (s.kind != SlotKind::Parameter) continue;
    Variable* v = root.find_local_var(s.name);
    if (!v || !v->is<Tensor>() || !v->get<Tensor>().is_initialized()) continue;
    const Place held = v->get<Tensor>().place();
    const bool device_held = held.kind == PlaceKind::Cuda, device_slot = s.place.kind == PlaceKind::Cuda;
    if (device_held != device_slot || (device_slot && held != s.place))
      v->set(copy_to_place(v->get<Tensor>(), device_slot ? s.place : Place::cpu()));
  }
}

}  // namespace

RunState::RunState(std::shared_ptr<const ExecutionPlan> plan, Scope& scope)
    : plan_(std::move(plan)), scope_(&scope), scope_alive_(scope.lifetime()) {
  Scope& root = scope.root();
  check_parameters(root);  // before anything in the scope tree changes
  place_parameters(*plan_, root);
  local_scope_ = &scope.new_scope();
  try {
    bind_variables(root);
    create_streams();
    build_contexts(root);
    attach_streams();
    if (plan_->options.cuda_graph) {
      if (std::string why = graph_blocker(); !why.empty()) graph_off(why);
      else graph_ = std::make_unique<GraphMode>();
    }
    if (memory_plannable(*plan_) && !graph_) memory_stage_ = MemoryStage::Unplanned;
  } catch (...) {
    scope.drop_kid(*local_scope_);
    throw;
  }
  allocate_counters();
}

RunState::RunState(std::shared_ptr<const ExecutionPlan> region_plan, Scope& root,
                   std::span<Variable* const> arguments)
    : plan_(std::move(region_plan)), scope_(&root), blocking_(true) {
  check_parameters(root);
  place_parameters(*plan_, root);
  bind_variables(root, arguments);
  build_contexts(root);
  allocate_counters();
}

void RunState::allocate_counters() {
  const std::uint32_t n = plan_->size();
  use_plan_gc();
  dep_ = std::make_unique<std::atomic<std::int32_t>[]>(n);
  ref_ = std::make_unique<std::atomic<std::int32_t>[]>(vars_.size());
  reset_counters();
  local_ready_.reserve(n);
  if (plan_->has_streams()) sync_ready_.reserve(n);
  if (plan_->has_async) async_ = std::make_unique<AsyncSlot[]>(n);
  if (plan_->options.profile) {
    t_start_.assign(n, 0);
    t_end_.assign(n, 0);
    t_thread_.assign(n, 0);
  }
}

// The CUDA streams this state made (named ones) die with it: their device's
// allocator frees the blocks it keeps for them, the cached ones now and the
// live ones (this state's buffers, released after this destructor's body)
// when released, so no memory stays cached under a stream no one uses.
namespace {
void retire_owned_cuda_streams(const ExecutionPlan& p, const std::vector<Stream*>& streams,
                               const std::vector<std::unique_ptr<Stream>>& owned) noexcept {
  for (std::size_t k = 0; k < streams.size() && k < p.stream_places.size(); ++k) {
    if (p.stream_places[k].kind != PlaceKind::Cuda) continue;
    for (const auto& mine : owned)
      if (mine.get() == streams[k]) try {
          retire_cuda_stream(p.stream_places[k].device, *streams[k]);
        } catch (...) {  // a device error: the blocks stay cached under the stream
        }
  }
}
}  // namespace

RunState::~RunState() {
  retire_owned_cuda_streams(*plan_, streams_, owned_streams_);
  // Every run ends with its streams synchronized; stopping them here first
  // still guarantees no stream task touches the state after this point.
  streams_.clear();
  owned_streams_.clear();
  runners_.clear();
  // A scope destroyed first took its kids with it.
  if (local_scope_ && !scope_alive_.expired()) scope_->drop_kid(*local_scope_);
}

// A parameter the program reads but never sets must be in the root scope.
void RunState::check_parameters(const Scope& root) const {
  for (const PlanSlot& s : plan_->slots)
    if (s.kind == SlotKind::Parameter && !s.set_by_program && !root.find_local_var(s.name))
      throw_error(ErrorKind::NotFound, "parameter '", s.name, "' (expected ",
                  s.type ? s.type.to_string() : std::string("<none>"),
                  ") has no value in the scope: run the startup program first");
}

void RunState::bind_variables(Scope& root, std::span<Variable* const> arguments) {
  const auto& slots = plan_->slots;
  std::size_t owned = 0;
  for (const PlanSlot& s : slots) owned += s.kind == SlotKind::Temporary;
  // Temporaries contiguous, in slot order: the run path walks them in
  // program order, so locality matters more than names.
  owned_ = std::make_unique<Variable[]>(owned);
  vars_.resize(slots.size());
  std::size_t next = 0;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    const PlanSlot& s = slots[k];
    switch (s.kind) {
      case SlotKind::Temporary: vars_[k] = &owned_[next++]; break;
      case SlotKind::Parameter: vars_[k] = &root.var(s.name); break;  // checked: exists or is set
      case SlotKind::Feed:
      case SlotKind::FetchOp: vars_[k] = &local_scope_->var(s.name); break;
      case SlotKind::Argument: break;  // below
    }
  }
  const auto& args = plan_->arguments;
  if (args.size() != arguments.size())
    throw_error(ErrorKind::Internal, "a region plan takes ", args.size(), " arguments, got ",
                arguments.size());
  for (std::size_t k = 0; k < args.size(); ++k) vars_[args[k]] = arguments[k];
}

void RunState::build_contexts(Scope& root) {
  const auto& ins = plan_->instructions;
  std::size_t total = 0;
  for (const PlanInstruction& in : ins) total += in.reads.size() + in.writes.size();
  io_ = std::make_unique<Variable*[]>(total + 1);
  Variable** p = io_.get();
  instrs_.resize(ins.size());
  for (std::size_t i = 0; i < ins.size(); ++i) {
    const PlanInstruction& in = ins[i];
    Variable** inputs = p;
    for (auto s : in.reads) *p++ = vars_[s];
    Variable** outputs = p;
    for (auto s : in.writes) *p++ = vars_[s];
    instrs_[i].fn = in.fn;
    const void* attrs = in.attrs.get();
    if (in.control) {
      runners_.push_back(make_control_flow_runner(in, {inputs, in.reads.size()}, root));
      attrs = runners_.back().get();
    }
    instrs_[i].ctx = KernelContext(in.op, inputs, static_cast<std::uint32_t>(in.reads.size()), outputs,
                                   static_cast<std::uint32_t>(in.writes.size()), attrs, in.place,
                                   context_allocator(static_cast<std::uint32_t>(i)));
    instrs_[i].ctx.set_unused_outputs(in.unused_outputs);
    instrs_[i].ctx.set_step(&step_);
  }
}

// The allocator of instruction i's outputs: pinned host memory for a
// fetch's copy; for work on a device's copy or named stream, that stream's
// own blocks (CudaAllocator::for_stream: a block the compute stream freed
// while its kernels may still read it is reused only by the compute
// stream); else its place's allocator. Streams are made before contexts.
Allocator* RunState::context_allocator(std::uint32_t i) const {
  const ExecutionPlan& p = *plan_;
  const PlanInstruction& in = p.instructions[i];
  if (in.pinned) return &pinned_allocator();
  if (!streams_.empty() && p.lane[i] >= 0) {
    const auto k = static_cast<std::size_t>(p.lane[i]);
    const Place sp = p.stream_places[k];
    if (sp.kind == PlaceKind::Cuda && in.place == sp && p.stream_names[k] != sp.to_string())
      return &cuda_stream_allocator(sp.device, *streams_[k]);
  }
  return &allocator_for(in.place);
}

void RunState::create_streams() {
  const ExecutionPlan& p = *plan_;
  if (!p.has_streams()) return;
  for (std::size_t k = 0; k < p.stream_names.size(); ++k) {
    const Place place = p.stream_places[k];
    const std::string& name = p.stream_names[k];
    if (place.kind == PlaceKind::Cuda) {
      CudaContext& cuda = cuda_context(place.device);
      const std::string device = place.to_string();
      if (name == device) streams_.push_back(&cuda.compute_stream());
      else if (name == device + "/h2d") streams_.push_back(&cuda.h2d_stream());
      else if (name == device + "/d2h") streams_.push_back(&cuda.d2h_stream());
      else {
        owned_streams_.push_back(new_cuda_stream(place.device));
        streams_.push_back(owned_streams_.back().get());
      }
    } else {
      owned_streams_.push_back(std::make_unique<HostStream>(static_cast<std::int16_t>(k)));
      streams_.push_back(owned_streams_.back().get());
    }
  }
  if (p.options.profile) create_device_timers();
}

// A stream instruction's kernel launches on its stream; the events of the
// instructions with event or sync successors.
void RunState::attach_streams() {
  const ExecutionPlan& p = *plan_;
  if (!p.has_streams()) return;
  for (std::uint32_t i = 0; i < p.size(); ++i)
    if (p.lane[i] >= 0) instrs_[i].ctx.set_stream(streams_[static_cast<std::size_t>(p.lane[i])]);
  out_event_.resize(p.size());
  for (std::uint32_t i = 0; i < p.size(); ++i)
    if (p.records_event[i]) out_event_[i] = streams_[static_cast<std::size_t>(p.lane[i])]->create_event();
}

void RunState::reset_counters() {
  const ExecutionPlan& p = *plan_;
  for (std::uint32_t i = 0; i < p.size(); ++i)
    dep_[i].store(static_cast<std::int32_t>(p.dep_count[i]), std::memory_order_relaxed);
  for (std::size_t s = 0; s < vars_.size(); ++s) ref_[s].store(p.ref_count[s], std::memory_order_relaxed);
  dirty_ = false;
}

void RunState::run(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                   std::span<Tensor> results, const RunOptions* options) {
  if (__builtin_expect(config.stats != nullptr, 0))
    run_with_stats(feeds, take, config, results, options);
  else if (graph_) run_graph(feeds, take, config, results);  // device work only: no receives
  else run_launches(feeds, take, config, results, options);
}

// A run that launches every kernel.
void RunState::run_launches(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                            std::span<Tensor> results, const RunOptions* options) {
  const ExecutionPlan& p = *plan_;
  for (std::size_t k = 0; k < feeds.size(); ++k) {
    Tensor& dst = vars_[p.feeds[k].slot]->get_mutable<Tensor>();
    if (take) dst = std::move(*feeds[k]);
    else dst = *feeds[k];
  }
  begin_run(config);
  if (memory_stage_ != MemoryStage::Off) prepare_memory(/*may_probe=*/true);
  // A communicator: collective kernels reach it through the step.
  const bool stepped = options || p.has_async || p.options.communicator;
  if (stepped) begin_step(options);
  schedule();
  // Kernels still queued on streams finish (and free) before the run
  // returns, error or not; their errors were recorded by run_on_stream().
  if (p.has_streams()) synchronize_streams();
  if (stepped) end_step();
  if (dev_base_ && !error_) read_device_times();
  finish_run(feeds.size(), results);
}

void RunState::begin_run(const RunConfig& config) {
  if (dirty_) reset_counters();
  abort_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  config_ = config;
  record_ = plan_->options.profile;
  timed_ = config.measure || record_;
  if (__builtin_expect(config.stats != nullptr, 0)) {
    record_ = timed_ = true;
    prepare_stats();
  }
  ++runs_;
  if (dev_base_ && record_) {
    dev_base_->record(*streams_[dev_base_stream_]);
    dev_base_host_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
  }
}

// A timing event before and after each kernel on a CUDA stream.
void RunState::create_device_timers() {
  const ExecutionPlan& p = *plan_;
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    if (p.lane[i] < 0) continue;
    const Place place = p.stream_places[static_cast<std::size_t>(p.lane[i])];
    if (place.kind != PlaceKind::Cuda) continue;
    if (dev_start_.empty()) {
      dev_start_.resize(p.size());
      dev_end_.resize(p.size());
      dev_base_ = new_cuda_timing_event(place.device);
      dev_base_stream_ = static_cast<std::size_t>(p.lane[i]);
    }
    dev_start_[i] = new_cuda_timing_event(place.device);
    dev_end_[i] = new_cuda_timing_event(place.device);
  }
}

// Device kernels' times, placed on the host clock by the run's base event;
// each stream gets its own trace row (tid 1000000 + its index).
void RunState::read_device_times() {
  if (!record_) return;  // timers made for an earlier run's step stats
  const ExecutionPlan& p = *plan_;
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    if (!dev_start_[i]) continue;
    const double start = cuda_elapsed_ms(*dev_base_, *dev_start_[i]);
    const double end = cuda_elapsed_ms(*dev_base_, *dev_end_[i]);
    t_start_[i] = dev_base_host_ns_ + static_cast<std::int64_t>(start * 1e6);
    t_end_[i] = dev_base_host_ns_ + static_cast<std::int64_t>(end * 1e6);
    t_thread_[i] = 1000000u + static_cast<std::uint32_t>(p.lane[i]);
  }
}

// Feeds are dropped (the caller's tensors are not kept alive); the fetch
// targets are read now that every instruction is done; the temporaries
// that keep their buffers are parked (also after a failed run).
void RunState::finish_run(std::size_t num_feeds, std::span<Tensor> results) {
  const ExecutionPlan& p = *plan_;
  struct DropFeedsParkKept {  // also when a copy below throws
    RunState& st;
    std::size_t n;
    ~DropFeedsParkKept() {
      for (std::size_t k = 0; k < n; ++k) st.vars_[st.plan_->feeds[k].slot]->clear();
      st.park_kept_buffers();
    }
  } end{*this, num_feeds};
  if (error_) {
    dirty_ = true;
    if (probing_) drop_probe();  // the next run probes again
    rethrow_error();
  }
  if (probing_) finish_probe();
  else if (memory_stage_ == MemoryStage::Planned && !arena_checked_ && arena_placed_) check_arena();
  // Shared, not moved: a temporary keeps its buffer for the next run, which
  // reuses it in place once the caller has let go of this result.
  for (std::size_t k = 0; k < p.fetches.size(); ++k) {
    const Variable* v = vars_[p.fetches[k].slot];
    if (!v->is<Tensor>() || !v->get<Tensor>().is_initialized()) results[k] = Tensor();
    else if (p.fetches[k].deep) results[k] = v->get<Tensor>().clone();
    else results[k] = v->get<Tensor>();
  }
}

void RunState::run_region() {
  // blocking_: an asynchronous kernel here is waited for on this thread.
  if (dirty_) reset_counters();
  abort_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  config_ = RunConfig{};
  solo_ = true;
  record_ = plan_->options.profile;
  timed_ = record_;
  ++runs_;
  if (plan_->has_async) run_in_order<false, true>();
  else run_in_order<false>();
  if (error_) {
    dirty_ = true;
    rethrow_region_error();
  }
}

void RunState::release_temporaries() noexcept {
  for (std::size_t k = 0; k < plan_->slots.size(); ++k)
    if (plan_->slots[k].kind == SlotKind::Temporary) vars_[k]->clear();
  for (auto& r : runners_) r->release();
}

// A region's error: the failing op's label starts the path (a nested
// region's error already has one: this op's label goes in front).
void RunState::rethrow_region_error() {
  std::exception_ptr e = std::exchange(error_, nullptr);
  const std::string here = plan_->label(error_instr_);
  try {
    std::rethrow_exception(e);
  } catch (const RegionError& err) {
    throw RegionError(err.kind(), here + " > " + err.path(), err.detail());
  } catch (const Error& err) {
    throw RegionError(err.kind(), here, err.message());
  } catch (const std::exception& err) {
    throw RegionError(ErrorKind::Internal, here, err.what());
  }
}

// The run's first error again, its message prefixed with the failing op (or
// with the path of ops into the region where it happened).
void RunState::rethrow_error() {
  std::exception_ptr e = std::exchange(error_, nullptr);
  if (error_instr_ == kRunIndex) {
    // Cancelled or past its deadline: say which asynchronous kernel waited.
    std::string waiting;
    if (waiting_instr_ != kNoIndex) {
      waiting = "; " + plan_->describe(waiting_instr_) + " was waiting";
      try {
        std::rethrow_exception(std::exchange(waiting_error_, nullptr));
      } catch (const Error& err) {
        waiting += " (" + err.message() + ")";
      } catch (...) {
      }
    }
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      throw Error(err.kind(), err.message() + waiting);
    }
  }
  const std::string where = error_instr_ == kNoIndex ? std::string("a stream") : plan_->describe(error_instr_);
  try {
    std::rethrow_exception(e);
  } catch (const RegionError& err) {
    throw Error(err.kind(), plan_->label(error_instr_) + " > " + err.path() + " failed: " + err.detail());
  } catch (const Error& err) {
    throw Error(err.kind(), where + " failed: " + err.message());
  } catch (const std::exception& err) {
    throw Error(ErrorKind::Internal, where + " failed: " + err.what());
  } catch (...) {
    throw Error(ErrorKind::Internal, where + " failed with an unknown exception");
  }
}

std::string RunState::chrome_trace() const {
  std::ostringstream os;
  os << "{\"traceEvents\":[";
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  for (auto t : t_start_)
    if (t) t0 = std::min(t0, t);
  if (frames_)
    for (const FramePropagator::Record& r : frames_->records()) t0 = std::min(t0, r.start_ns);
  bool first = true;
  append_trace_events(os, t0, "", first);
  // A run with frames: each op run, with its frame and iteration (the
  // frame-local iteration id; top-level ops have neither).
  if (frames_) {
    const FramePlan& fp = *plan_->frames;
    for (const FramePropagator::Record& r : frames_->records()) {
      const FrameNode& n = fp.nodes[r.node];
      if (n.instruction == kNoIndex) continue;  // a feed or parameter read
      if (!first) os << ',';
      first = false;
      os << "{\"name\":\"" << plan_->instructions[n.instruction].name << "\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":"
         << double(r.start_ns - t0) / 1000.0 << ",\"dur\":" << double(r.end_ns - r.start_ns) / 1000.0
         << ",\"pid\":1,\"tid\":" << r.thread << ",\"args\":{\"instruction\":" << n.instruction;
      if (r.frame != 0) os << ",\"frame\":\"" << fp.frames[r.frame].name << "\",\"iteration\":" << r.iteration;
      os << "}}";
    }
  }
  // Rows of device streams are named after them.
  if (!dev_start_.empty())
    for (std::size_t k = 0; k < plan_->stream_names.size(); ++k)
      os << ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << 1000000 + k
         << ",\"args\":{\"name\":\"stream " << plan_->stream_names[k] << "\"}}";
  os << "],\"displayTimeUnit\":\"ns\"}";
  return os.str();
}

void RunState::append_trace_events(std::ostream& os, std::int64_t t0, const std::string& path,
                                   bool& first) const {
  for (std::size_t i = 0; i < t_start_.size(); ++i) {
    if (!t_start_[i]) continue;
    if (!first) os << ',';
    first = false;
    const bool region = !path.empty();
    os << "{\"name\":\""
       << (region ? path + plan_->label(static_cast<std::uint32_t>(i)) : plan_->instructions[i].name)
       << "\",\"cat\":\"" << (region ? "region" : "op") << "\",\"ph\":\"X\",\"ts\":"
       << double(t_start_[i] - t0) / 1000.0 << ",\"dur\":" << double(t_end_[i] - t_start_[i]) / 1000.0
       << ",\"pid\":1,\"tid\":" << t_thread_[i] << ",\"args\":{\"instruction\":" << i << "}}";
  }
  std::size_t next_runner = 0;
  for (std::uint32_t i = 0; i < plan_->size(); ++i) {
    if (!plan_->instructions[i].control) continue;
    const ControlFlowRunner& r = *runners_[next_runner++];
    for (const auto& [name, child] : r.children())
      child->append_trace_events(os, t0, path + plan_->label(i) + " > " + name + " > ", first);
  }
}

// ---- step stats ----

// A run that collects its StepStats: the usual run, then every instruction
// it ran, also when it failed (the error is rethrown after).
void RunState::run_with_stats(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                              std::span<Tensor> results, const RunOptions* options) {
  StepStats& stats = *config.stats;
  stats.clear();
  const std::int64_t t0 = steady_ns();
  try {
    if (graph_) run_graph(feeds, take, config, results);
    else run_launches(feeds, take, config, results, options);
  } catch (const std::exception& e) {
    stats.failed = true;
    stats.error = e.what();
    collect_stats(stats, t0);
    throw;
  }
  collect_stats(stats, t0);
}

// Per-instruction records sized for the plan and zeroed (0: not run), and
// CUDA timing events for the device's streams, made on the first run that
// asks (runs that do not ask never record them).
void RunState::prepare_stats() {
  const std::uint32_t n = plan_->size();
  if (t_bytes_.size() != n) {
    t_start_.assign(n, 0);
    t_end_.assign(n, 0);
    t_thread_.assign(n, 0);
    t_bytes_.assign(n, 0);
    if (dev_start_.empty() && plan_->has_streams()) create_device_timers();
  } else {
    std::fill(t_start_.begin(), t_start_.end(), 0);
    std::fill(t_bytes_.begin(), t_bytes_.end(), 0);
  }
}

void RunState::collect_stats(StepStats& stats, std::int64_t t0) const {
  const ExecutionPlan& p = *plan_;
  stats.step_id = runs_;
  stats.start_ns = t0;
  stats.wall_ns = steady_ns() - t0;
  // A replayed CUDA graph launched no kernel of its own: its records (none,
  // or the capture's launches) say nothing of this run.
  if (graph_ && graph_->stage == GraphMode::Stage::Replay) return;
  if (p.frames) {
    collect_frame_stats(stats, t0);
    return;
  }
  stats.nodes.reserve(p.size());
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    if (!t_start_[i]) continue;
    const PlanInstruction& in = p.instructions[i];
    NodeStats& node = stats.nodes.emplace_back();
    node.instruction = i;
    node.op_name = in.name;
    node.label = p.label(i);
    node.start_ns = t_start_[i] - t0;
    node.end_ns = t_end_[i] - t0;
    node.thread = t_thread_[i];
    if (in.lane.is_stream) node.stream = p.stream_names[static_cast<std::size_t>(in.lane.stream)];
    node.bytes_allocated = t_bytes_[i];
  }
}

// Bytes of i's output tensors whose buffers it did not share from an input
// (nor from an earlier output of its own).
std::int64_t RunState::output_bytes(std::uint32_t i) const {
  const KernelContext& ctx = instrs_[i].ctx;
  auto tensor_of = [](const Variable& v) -> const Tensor* {
    if (!v.is<Tensor>()) return nullptr;
    const Tensor& t = v.get<Tensor>();
    return t.is_initialized() ? &t : nullptr;
  };
  std::int64_t total = 0;
  for (std::uint32_t o = 0; o < ctx.num_outputs(); ++o) {
    const Tensor* t = tensor_of(ctx.output_var(o));
    if (!t || !t->buffer()) continue;
    bool shared = false;
    for (std::uint32_t k = 0; k < ctx.num_inputs() && !shared; ++k)
      if (const Tensor* in = tensor_of(ctx.input_var(k))) shared = t->shares_buffer_with(*in);
    for (std::uint32_t k = 0; k < o && !shared; ++k)
      if (const Tensor* out = tensor_of(ctx.output_var(k))) shared = t->shares_buffer_with(*out);
    if (!shared) total += static_cast<std::int64_t>(t->bytes());
  }
  return total;
}

}  // namespace kiln
