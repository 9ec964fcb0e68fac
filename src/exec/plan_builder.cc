#include "kiln/exec/plan_builder.h"

#include <algorithm>
#include <cstring>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/placement_attributes.h"
#include "kiln/exec/control_flow.h"
#include "kiln/exec/dependency_builder.h"
#include "kiln/exec/frame_plan.h"
#include "kiln/ir/inplace_pairs.h"
#include "kiln/passes/op_effects.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/support/warning.h"

namespace kiln {

namespace {

// Whether op's CPU kernel runs GEMMs or oneDNN primitives: their intra-op
// threads are the thread plan's to set (BlasThreadsGuard).
bool runs_gemms(Operation* op) {
  return op->isa<MatmulOp>() || op->isa<FusedMatmulOp>() || op->isa<Conv2dOp>() || op->isa<FusedConv2dOp>() ||
         op->isa<ChannelScaledConv2dOp>() || op->isa<FusedConv2dMeanOp>() ||
         op->isa<PointwiseDepthwiseConv2dOp>() || op->isa<GradOf<Conv2dOp>>() ||
         op->isa<Conv2dTransposeOp>() || op->isa<GradOf<Conv2dTransposeOp>>() ||
         op->isa<ScaledDotProductAttentionOp>() || op->isa<GradOf<ScaledDotProductAttentionOp>>() ||
         op->isa<AttentionMaskGradOp>() ||
         op->isa<RnnOp>() || op->isa<LstmOp>() || op->isa<GruOp>() || op->isa<RecurrentGradOp<RnnOp>>() ||
         op->isa<RecurrentGradOp<GruOp>>() || op->isa<RecurrentGradOp<LstmOp>>();
}

// Whether op's CPU kernel could use the run's threads on its own loops
// (kernels/cpu/intra_op.h splits only ranges of ~64 KiB or more): some
// operand or result has at least 32768 elements, or a size known only at
// run time. The tuner then measures the Blas plan for a plan without GEMMs
// too (a model of pooling, norms and elementwise ops gets the threads).
bool may_split_loops(Operation* op) {
  constexpr std::int64_t kWorthSplitting = 32768;
  auto large = [](Value v) {
    if (!is_shaped(v.type())) return false;
    std::int64_t n = 1;
    for (std::int64_t d : shaped_dims(v.type())) {
      if (d < 0) return true;
      if (d == 0) return false;
      n = n > kWorthSplitting ? n : n * d;  // saturates: no overflow
    }
    return n >= kWorthSplitting;
  };
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    if (large(op->operand(i).source())) return true;
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    if (large(op->result(i))) return true;
  return false;
}

// "op #3 'kiln.add'" (its position in the caller's program), or for an op a
// pass made, "op 'kiln.fused_elementwise' (made by a pass)".
std::string op_ref(std::uint32_t index, const Operation& op) {
  if (index == kNoIndex) return "op '" + std::string(op.name()) + "' (made by a pass)";
  return "op #" + std::to_string(index) + " '" + std::string(op.name()) + "'";
}

// Values in definition order: block arguments, then per op its regions'
// values and its results (the caller's program and the plan's copy are
// numbered alike, so ids carry over).
void number_values(const Block& b, std::vector<Value>& out) {
  for (std::uint32_t a = 0; a < b.num_arguments(); ++a) out.push_back(b.argument(a));
  for (Operation* op : b) {
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) number_values(*inner, out);
    for (std::uint32_t i = 0; i < op->num_results(); ++i) out.push_back(op->result(i));
  }
}

// ---- kernels of the instructions the plan makes itself ----

struct CopyFlags {
  bool deep = false;
};

// Output 0 = input 0 copied to the context's place, on its stream (host
// places share memory: a memcpy; a device copy is ordered on the stream).
void transfer_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, in.dims(), in.dtype());
  if (in.place().kind != PlaceKind::Cuda && out.place().kind != PlaceKind::Cuda) {
    if (in.bytes()) std::memcpy(out.raw_data(), in.raw_data(), in.bytes());
    return;
  }
  copy_between_places(out.raw_data(), out.place(), in.raw_data(), in.place(), in.bytes(),
                      ctx.stream());
}

// Output 0 takes input 0's tensor: shared, or copied when `deep` (a device
// tensor on the instruction's stream).
void share_or_copy_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const auto* flags = static_cast<const CopyFlags*>(ctx.attrs_ptr());
  if (!flags || !flags->deep) {
    ctx.output(0) = in;
  } else if (in.place().kind == PlaceKind::Cuda) {
    Tensor copy = Tensor::empty(in.dims(), in.dtype(), ctx.place(), &ctx.allocator());
    copy_between_places(copy.raw_data(), copy.place(), in.raw_data(), in.place(), in.bytes(),
                        ctx.stream());
    ctx.output(0) = std::move(copy);
  } else {
    ctx.output(0) = in.clone();
  }
}

bool is_device(Place p) { return p.kind == PlaceKind::Cuda; }

std::shared_ptr<const void> deep_copy_flag() {
  static const auto flag = std::make_shared<const CopyFlags>(CopyFlags{true});
  return flag;
}

PlanInstruction copy_instruction(std::string name, Operation* op, std::uint32_t from,
                                 std::uint32_t to, bool deep, Lane lane) {
  PlanInstruction in;
  in.name = std::move(name);
  in.op = op;
  in.fn = &share_or_copy_kernel;
  in.attrs = deep ? deep_copy_flag() : nullptr;
  in.reads = {from};
  in.writes = {to};
  in.lane = lane;
  return in;
}

// The instruction that runs `kernel` for op #`index` on `lane` at `place`,
// reading slots `ins` and writing slots `outs`.
PlanInstruction kernel_instruction(Operation* op, std::uint32_t index, const KernelInfo& kernel,
                                   Lane lane, Place place, std::vector<std::uint32_t> ins,
                                   std::vector<std::uint32_t> outs) {
  PlanInstruction in;
  in.name = std::string(op->name());
  in.op_index = index;
  in.op = op;
  in.fn = kernel.fn;
  in.async_fn = kernel.async_fn;
  in.attrs = kernel.decode_attrs ? kernel.decode_attrs(op) : nullptr;
  if (op->has_trait<Random>()) in.order |= kOrderRandom;
  if (op->has_trait<Communication>()) in.order |= kOrderCommunication;
  if (op->has_trait<SideEffect>()) in.order |= kOrderSideEffect;
  in.lane = lane;
  in.place = place;
  in.calls_blas = runs_gemms(op) && !is_device(place);
  in.may_split = kernel.fn != nullptr && !is_device(place) && (in.calls_blas || may_split_loops(op));
  in.reads = std::move(ins);
  in.writes = std::move(outs);
  return in;
}

}  // namespace

PlanBuilder::PlanBuilder(const Program& program, std::vector<std::string> feed_names,
                         const std::vector<FetchTarget>& fetch, ExecutionOptions options)
    : plan_(std::make_shared<ExecutionPlan>()),
      source_(&program),
      feed_names_(std::move(feed_names)),
      fetch_(fetch) {
  plan_->options = std::move(options);
}

PlanBuilder::PlanBuilder(const Block& region_block, const PlanBuilder& parent)
    : plan_(std::make_shared<ExecutionPlan>()), root_(parent.root_), block_(&region_block) {
  plan_->options = parent.plan_->options;
  plan_->region_depth = parent.plan_->region_depth + 1;
}

PlanBuilder::~PlanBuilder() = default;

PlanBuilder& PlanBuilder::number_ops(std::vector<std::uint32_t> numbers) {
  op_numbers_ = std::move(numbers);
  return *this;
}

std::shared_ptr<const ExecutionPlan> PlanBuilder::build() {
  if (plan_->is_region()) {
    bind_block_arguments();
    add_instructions();
    plan_yield();
    mark_unused_outputs();
    build_dependencies();
    plan_gc();
    plan_buffers();
    summarize_for_thread_plan();
    return plan_;
  }
  copy_program();
  resolve_fetch_targets();
  add_instructions();
  plan_fetches();
  mark_unused_outputs();
  build_dependencies();
  analyze_streams();
  plan_gc();
  plan_buffers();
  summarize_for_thread_plan();
  plan_frames();
  return plan_;
}

// ---- phase: frames, for a program with dataflow ops ----

void PlanBuilder::plan_frames() {
  if (!has_dataflow_ops(*block_)) return;
  plan().frames = build_frame_plan(plan(), *block_, value_slot_);
  plan().has_parallelism = plan().frames->max_parallel_iterations > 1;
}

// ---- phase: the plan's own copy of the program, numbered like the caller's ----

void PlanBuilder::copy_program() {
  std::vector<Value> src;
  number_values(source_->block(), src);
  for (std::uint32_t i = 0; i < src.size(); ++i) source_ids_.emplace(src[i].impl(), i);
  plan().program = source_->clone();
  number_values(plan().program.block(), clone_values_);
  block_ = &plan().program.block();
}

Value PlanBuilder::clone_of(Value source) const {
  auto it = root_->source_ids_.find(source.impl());
  return it == root_->source_ids_.end() ? Value() : root_->clone_values_[it->second];
}

// ---- phase: fetch targets → values of the copy ----

void PlanBuilder::resolve_fetch_targets() {
  for (const auto& f : fetch_) {
    if (f.value) {
      Value v = clone_of(f.value);
      if (!v)
        throw_error(ErrorKind::InvalidArgument,
                    "a fetch target is a value that is not in this program");
      fetch_values_.push_back(v);
      fetch_ops_.push_back(nullptr);
      continue;
    }
    Operation* fetch_op = nullptr;
    const Value found = find_named_fetch(plan().program.block(), f.name, &fetch_op);
    if (!found)
      throw_error(ErrorKind::NotFound, "fetch '", f.name,
                  "' matches no kiln.fetch op, data op or parameter of the program");
    fetch_values_.push_back(found);
    fetch_ops_.push_back(fetch_op);
  }
}

// ---- phase: slots, kernels and data transfers, in program order ----

void PlanBuilder::add_instructions() {
  // A parameter some set_parameter of the program writes may be read before
  // the scope holds it.
  for (Operation* op : *block_)
    if (auto sp = op->dyn_cast<SetParameterOp>())
      plan().slots[parameter_slot(sp.attrs().parameter_name)].set_by_program = true;
  plan().feeds.resize(feed_names_.size());
  for (std::size_t k = 0; k < feed_names_.size(); ++k) plan().feeds[k].name = feed_names_[k];

  const bool region = plan().is_region();
  std::uint32_t index = 0;
  for (Operation* op : *block_) {
    const std::uint32_t i = op_numbers_.empty() ? index : op_numbers_.at(index);
    ++index;
    if (region && (op->isa<DataOp>() || op->isa<FetchOp>()))
      throw_error(ErrorKind::InvalidArgument, op_ref(i, *op),
                  " is inside a region of a control-flow op; feeds and fetches belong to the "
                  "program's top block");
    if (op->isa<YieldOp>()) continue;  // plan_yield()
    if (op->num_regions()) {
      if (!op->has_trait<IsolatedFromAbove>())
        throw_error(ErrorKind::Unimplemented, op_ref(i, *op),
                    " has regions but is not a control-flow op the executor runs");
      add_control_flow_op(op, i, op_lane(op, i, plan().options.place));
      continue;
    }
    if (op->isa<ParameterOp>()) add_parameter_op(op);
    else if (op->isa<DataOp>()) add_data_op(op);
    else if (op->isa<SetParameterOp>()) add_set_parameter_op(op, i);
    else if (op->isa<FetchOp>()) add_fetch_op(op, i);
    else add_kernel_op(op, i);
  }
  if (!cpu_fallback_.empty()) {
    std::string names;
    for (const std::string& n : cpu_fallback_) names += (names.empty() ? "" : ", ") + n;
    warn("a program on " + plan().options.place.to_string() + " runs " + names +
         " on the CPU (no kernel for them on the device), with copies between the places");
  }
  for (const auto& f : plan().feeds)
    if (f.slot == kNoIndex)
      throw_error(ErrorKind::NotFound, "feed '", f.name, "' matches no data op of the program");
}

// ---- regions: arguments, yields and the child plans of control-flow ops ----

void PlanBuilder::bind_block_arguments() {
  Operation* owner = block_->parent_op();
  const std::uint32_t carried =
      owner && owner->isa<WhileOp>() ? WhileOp(owner).num_carried() : 0;
  for (std::uint32_t a = 0; a < block_->num_arguments(); ++a) {
    const std::uint32_t s = new_slot(SlotKind::Argument, plan().options.place, /*persistent=*/true);
    plan().slots[s].type = block_->argument(a).type();
    plan().arguments.push_back(s);
    value_slot_[block_->argument(a).impl()] = s;
    if (a < carried) carried_arguments_.insert(s);
  }
}

void PlanBuilder::plan_yield() {
  Operation* y = block_->back();
  if (!y || !y->isa<YieldOp>())
    throw_error(ErrorKind::InvalidArgument, "a region of a control-flow op must end in kiln.yield");
  for (std::uint32_t k = 0; k < y->num_operands(); ++k) {
    const std::uint32_t s = operand_slot(y, k, plan().options.place, Lane::host());
    plan().slots[s].fetch_reads++;
    plan().fetches.push_back({s, false});
  }
}

namespace {

// A region gets copies of the values it captures, so an in-place write
// there to a captured parameter (an optimizer's update under a cond) would
// never reach the parameter: kiln::Error naming both ops and the
// parameter. A while's carried values are the loop's own copies by design.
void check_no_captured_parameter_writes(Operation* op, std::uint32_t index) {
  const std::uint32_t first_capture = op->isa<WhileOp>() ? op->num_results() : 0;
  for (std::uint32_t r = 0; r < op->num_regions(); ++r) {
    if (op->region(r).empty()) continue;
    Block& body = op->region(r).front();
    for (Operation* inner : body)
      for (std::uint32_t w : written_operands(*inner)) {
        const Value root = alias_root(inner->operand(w).source());
        for (std::uint32_t a = first_capture; a < body.num_arguments() && a + 1 < op->num_operands(); ++a) {
          if (body.argument(a) != root) continue;
          auto param = op->operand(a + 1).source().defining_op();
          if (param && param->isa<ParameterOp>())
            throw_error(ErrorKind::InvalidArgument, op_ref(index, *op), ": '", inner->name(), "' inside it writes parameter '",
                        param->dyn_cast<ParameterOp>().attrs().parameter_name,
                        "' in place, but a region holds only a copy of what it captures, so the parameter "
                        "would not change; update parameters outside control flow");
        }
      }
  }
}

}  // namespace

void PlanBuilder::add_control_flow_op(Operation* op, std::uint32_t index, Lane lane) {
  if (is_device(plan().options.place))
    throw_error(ErrorKind::Unimplemented, op_ref(index, *op), " in a program on ",
                plan().options.place.to_string(),
                ": control flow runs on the CPU only for now; run the program on Place::cpu()");
  if (lane.is_stream)
    throw_error(ErrorKind::Unimplemented, op_ref(index, *op),
                " on a stream: control flow runs on the host");
  auto cf = std::make_shared<ControlFlowPlan>();
  PlanInstruction in;
  if (auto w = op->dyn_cast<WhileOp>()) {
    cf->kind = ControlFlowPlan::Kind::While;
    cf->max_iterations = w.attrs().max_iterations;
    cf->num_carried = w.num_carried();
  } else if (op->isa<IfOp>()) {
    cf->kind = ControlFlowPlan::Kind::If;
  } else {
    throw_error(ErrorKind::Unimplemented, op_ref(index, *op),
                " has regions the executor does not know how to run");
  }
  check_no_captured_parameter_writes(op, index);
  static constexpr const char* kIfNames[] = {"then", "else"};
  for (std::uint32_t r = 0; r < op->num_regions(); ++r) {
    RegionPlan rp;
    rp.name = cf->kind == ControlFlowPlan::Kind::While ? "body" : kIfNames[r];
    if (!op->region(r).empty()) {
      PlanBuilder child(op->region(r).front(), *this);
      rp.plan = child.build();
      const auto& fetches = rp.plan->fetches;
      for (std::size_t k = 0; k < fetches.size(); ++k) {
        const PlanSlot& slot = rp.plan->slots[fetches[k].slot];
        bool owned = slot.kind == SlotKind::Temporary;
        for (std::size_t j = 0; j < fetches.size() && owned; ++j)
          owned = j == k || fetches[j].slot != fetches[k].slot;
        rp.yield_owned.push_back(owned ? 1 : 0);
      }
      for (const PlanInstruction& ci : rp.plan->instructions) in.order |= ci.order;
      in.calls_blas = in.calls_blas || rp.plan->has_blas;
      in.may_split = in.may_split || rp.plan->has_intra_op;
    }
    cf->regions.push_back(std::move(rp));
  }
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    in.reads.push_back(operand_slot(op, i, plan().options.place, lane));
  for (std::uint32_t o = 0; o < op->num_results(); ++o) {
    const std::uint32_t s = new_slot(SlotKind::Temporary, plan().options.place, false);
    plan().slots[s].type = op->result_type(o);
    in.writes.push_back(s);
    value_slot_[op->result(o).impl()] = s;
  }
  in.name = std::string(op->name());
  in.op_index = index;
  in.op = op;
  in.fn = &run_control_flow;
  in.lane = lane;
  in.control = std::move(cf);
  add_instruction(std::move(in));
}

void PlanBuilder::add_parameter_op(Operation* op) {
  const std::uint32_t s = parameter_slot(op->dyn_cast<ParameterOp>().attrs().parameter_name);
  if (!plan().slots[s].type) plan().slots[s].type = op->result_type(0);
  value_slot_[op->result(0).impl()] = s;
}

void PlanBuilder::add_data_op(Operation* op) {
  const auto a = op->dyn_cast<DataOp>().attrs();
  auto it = std::find(feed_names_.begin(), feed_names_.end(), a.name);
  if (it == feed_names_.end()) {
    // As in Paddle and TensorFlow, a data op nothing reads or fetches needs
    // no feed (e.g. the label of an evaluation program cloned from the
    // training one): no slot, no instruction.
    const bool fetched = std::any_of(fetch_values_.begin(), fetch_values_.end(),
                                     [&](Value v) { return v == op->result(0); });
    if (op->result(0).use_empty() && !fetched) return;
    throw_error(ErrorKind::InvalidArgument, "feed '", a.name,
                "' is missing: the program's data op expects ", op->result_type(0).to_string());
  }
  PlanFeed& feed = plan().feeds[static_cast<std::size_t>(it - feed_names_.begin())];
  if (feed.slot != kNoIndex)
    throw_error(ErrorKind::InvalidArgument, "two data ops are named '", a.name, "'");
  feed.slot = new_slot(SlotKind::Feed, a.place, /*persistent=*/true, a.name);
  feed.type = op->result_type(0);
  if (is_shaped(feed.type)) {
    feed.shaped = true;
    feed.dtype = shaped_data_type(feed.type);
    feed.dims = shaped_dims(feed.type);
  }
  value_slot_[op->result(0).impl()] = feed.slot;
}

void PlanBuilder::add_set_parameter_op(Operation* op, std::uint32_t index) {
  const std::uint32_t out = parameter_slot(op->dyn_cast<SetParameterOp>().attrs().parameter_name);
  const Place place = plan().slots[out].place;
  const Lane lane = op_lane(op, index, place);
  const std::uint32_t in = operand_slot(op, 0, place, lane);
  // Copy values the caller or another parameter owns; share temporaries.
  PlanInstruction ins = copy_instruction(std::string(op->name()), op, in, out,
                                         plan().slots[in].persistent, lane);
  ins.op_index = index;
  ins.order = kOrderSideEffect;
  ins.place = place;
  add_instruction(std::move(ins));
}

// A kiln.fetch op takes its value on the host (a device value is copied).
void PlanBuilder::add_fetch_op(Operation* op, std::uint32_t index) {
  const Place place = host_place();
  const Lane lane = op_lane(op, index, place);
  const std::uint32_t in = operand_slot(op, 0, place, lane);
  // A kiln.fetch op is a side effect kept in order: it sees the value as of
  // its place in the program, so a later in-place op works on a copy
  // (add_kernel_op); a fetch target naming it gets the value.
  plan().slots[in].fetch_reads++;
  const std::uint32_t out = new_slot(SlotKind::FetchOp, place, true,
                                     "@fetch." + op->dyn_cast<FetchOp>().attrs().name);
  fetch_op_slot_[op] = out;
  PlanInstruction ins = copy_instruction(std::string(op->name()), op, in, out,
                                         plan().slots[in].persistent, lane);
  ins.op_index = index;
  ins.order = kOrderSideEffect;
  ins.place = place;
  add_instruction(std::move(ins));
}

// The op's kernel at the plan's place; in a device program, an op the
// device has no kernel for runs on the CPU (as Paddle's and TensorFlow's
// soft placement do), with copies inserted around it and one warning per
// plan naming such ops.
PlanBuilder::KernelChoice PlanBuilder::choose_kernel(Operation* op, std::uint32_t index) {
  const DataType dtype = kernel_dtype(*op);
  const Place place = plan_->options.place;
  // Host streams run the CPU kernels; any other place has kernels of its own.
  const PlaceKind backend = place.kind == PlaceKind::HostStream ? PlaceKind::Cpu : place.kind;
  const KernelRegistry& registry = KernelRegistry::instance();
  if (const KernelInfo* k = registry.find(op->info().id(), backend, dtype)) return {k, place};
  if (is_device(place))
    if (const KernelInfo* k = registry.find(op->info().id(), PlaceKind::Cpu, dtype)) {
      cpu_fallback_.insert(std::string(op->name()));
      return {k, Place::cpu()};
    }
  try {
    registry.get(*op, backend, dtype);
  } catch (const Error& e) {
    throw Error(e.kind(), op_ref(index, *op) + ": " + e.message());
  }
  throw_error(ErrorKind::Internal, "kernel registry lookup disagrees with itself");
}

void PlanBuilder::add_kernel_op(Operation* op, std::uint32_t index) {
  const auto [kernel, place] = choose_kernel(op, index);
  // An asynchronous kernel (a receive) is started by a host worker and
  // completes through its callback; it never occupies a stream.
  const Lane lane = kernel->async_fn ? Lane::host() : op_lane(op, index, place);
  std::vector<std::uint32_t> ins;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i) ins.push_back(operand_slot(op, i, place, lane));
  std::vector<std::uint32_t> outs(op->num_results(), kNoIndex);
  const auto write_back = bind_inplace_outputs(op, place, lane, ins, outs);
  for (std::uint32_t o = 0; o < outs.size(); ++o)
    if (outs[o] == kNoIndex) {
      outs[o] = new_slot(SlotKind::Temporary, place, false);
      plan().slots[outs[o]].type = op->result_type(o);
    }
  for (auto [o, i] : op->info().impl()->view_map) plan().slots[outs[o]].alias = plan().slots[ins[i]].alias;
  // Tensors an array shares its elements' buffers with.
  if (op->isa<ArrayWriteOp>()) array_elements_.insert(plan().slots[ins[2]].alias);
  else if (op->isa<ArrayFromTensorOp>()) array_elements_.insert(plan().slots[ins[0]].alias);
  else if (op->isa<ArrayReadOp>() || op->isa<ArrayReadOrZerosOp>()) array_elements_.insert(outs[0]);
  add_instruction(kernel_instruction(op, index, *kernel, lane, place, std::move(ins), outs));
  for (std::uint32_t o = 0; o < op->num_results(); ++o) value_slot_[op->result(o).impl()] = outs[o];
  for (auto [o, home] : write_back) {
    add_transfer(outs[o], home, op, lane);
    value_slot_[op->result(o).impl()] = home;
  }
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> PlanBuilder::bind_inplace_outputs(
    Operation* op, Place place, Lane lane, std::vector<std::uint32_t>& ins,
    std::vector<std::uint32_t>& outs) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> write_back;  // (output index, home slot)
  for (auto [o, i] : inplace_pairs(*op)) {
    std::uint32_t s = ins[i];
    // Only a parameter needs it: a temporary's later readers read the
    // result's slot, and a feed must not change under the caller.
    if (const std::uint32_t home = value_slot_.at(op->operand_source(i).impl());
        home != s && plan().slots[plan().slots[home].alias].kind == SlotKind::Parameter)
      write_back.emplace_back(o, home);
    const PlanSlot& slot = plan().slots[s];
    const PlanSlot& root = plan().slots[slot.alias];  // a view writes its source's buffer
    // A while's carried array is the runner's own variable, which holds its
    // own copy of the array (sharing only the elements' buffers): an
    // in-place op may update it, so a loop appends without copying.
    const bool own_array = root.kind == SlotKind::Argument && carried_arguments_.count(slot.alias) &&
                           is_tensor_array(root.type);
    if (root.kind == SlotKind::Feed || (root.kind == SlotKind::Argument && !own_array) ||
        (slot.fetch_reads > 0 && slot.kind != SlotKind::Parameter) ||
        array_elements_.count(slot.alias)) {
      // A feed must not change under the caller, nor a value a kiln.fetch op
      // already took (a parameter's fetch op took a deep copy, and an
      // optimizer must update the parameter itself), nor an array's element:
      // the op works on a copy (seed 004 "SetFeedVarsInplaceSkip").
      const std::uint32_t copy = new_slot(SlotKind::Temporary, place, false);
      PlanInstruction c = copy_instruction("copy", op, s, copy, /*deep=*/true, lane);
      c.place = place;
      add_instruction(std::move(c));
      ins[i] = s = copy;
    }
    outs[o] = s;
  }
  return write_back;
}

// ---- phase: fetches, after every op ----

// A fetch reads its slot after the whole program ran (as Paddle appends its
// fetch ops), so it observes every writer of its variable, in-place ops
// included, and stream work (a run synchronizes its streams first). It needs
// no instruction; the slot is kept from GC.
Value find_named_fetch(const Block& block, std::string_view name, Operation** fetch_op) {
  *fetch_op = nullptr;
  for (Operation* op : block) {
    if (auto fo = op->dyn_cast<FetchOp>(); fo && fo.attrs().name == name) {
      *fetch_op = op;  // its value as of the op's place in the program
      return op->operand_source(0);
    }
    if (auto d = op->dyn_cast<DataOp>(); d && d.attrs().name == name) return op->result(0);
    if (auto p = op->dyn_cast<ParameterOp>(); p && p.attrs().parameter_name == name) return op->result(0);
  }
  return Value();
}

void require_fetchable(Value v, std::size_t k) {
  Block* owner = v.defining_op() ? v.defining_op()->parent_block() : cast<BlockArgument>(v).owner();
  if (Operation* region_op = owner ? owner->parent_op() : nullptr)
    throw_error(ErrorKind::InvalidArgument, "fetch #", k, " names a value defined inside a region of op '",
                region_op->name(), "'; fetch the op's results (values leave a region through its kiln.yield)");
}

void PlanBuilder::plan_fetches() {
  for (std::uint32_t k = 0; k < fetch_values_.size(); ++k) {
    std::uint32_t from;
    if (fetch_ops_[k]) {
      from = fetch_op_slot_.at(fetch_ops_[k]);  // what the kiln.fetch op took
    } else {
      auto it = value_slot_.find(fetch_values_[k].impl());
      if (it == value_slot_.end()) {
        require_fetchable(fetch_values_[k], k);
        throw_error(ErrorKind::InvalidArgument, "fetch #", k,
                    " names a value no instruction makes (an unfed data op's result?)");
      }
      from = it->second;
    }
    if (is_tensor_array(plan().slots[from].type))
      throw_error(ErrorKind::InvalidArgument, "fetch #", k, " names a ",
                  plan().slots[from].type.to_string(),
                  ": a fetch returns tensors (stack the array with kiln.array_stack)");
    // A device value is fetched as a host copy (a sync successor's work).
    bool deep = plan().slots[from].kind == SlotKind::Parameter;
    if (is_device(plan().slots[from].place)) {
      from = slot_at(from, host_place(), nullptr, Lane::host());
      deep = false;
    }
    plan().slots[from].fetch_reads++;
    plan().fetches.push_back({from, deep});
  }
}

// ---- phase: outputs nothing reads ----

// An op result with no use in the program, whose slot no instruction reads
// and no fetch takes: a multi-output kernel (conv2d_grad's dx when x is a
// data op) may skip computing it.
void PlanBuilder::mark_unused_outputs() {
  ExecutionPlan& p = plan();
  std::vector<bool> read(p.slots.size(), false);
  for (const PlanInstruction& in : p.instructions)
    for (auto s : in.reads) read[s] = true;
  for (PlanInstruction& in : p.instructions) {
    if (!in.op || in.writes.size() != in.op->num_results()) continue;
    for (std::uint32_t k = 0; k < in.writes.size() && k < 64; ++k) {
      const std::uint32_t s = in.writes[k];
      if (in.op->result(k).use_empty() && !read[s] && p.slots[s].fetch_reads == 0 &&
          p.slots[s].alias == s)
        in.unused_outputs |= std::uint64_t{1} << k;
    }
  }
}

// ---- phase: the dependency DAG over alias classes ----

void PlanBuilder::build_dependencies() {
  ExecutionPlan& p = plan();
  const std::uint32_t n = p.size();
  DependencyBuilder deps(n, static_cast<std::uint32_t>(p.slots.size()));
  std::vector<std::uint32_t> r, w;
  for (const PlanInstruction& in : p.instructions) {
    r.clear();
    w.clear();
    for (auto s : in.reads) r.push_back(p.slots[s].alias);
    for (auto s : in.writes) w.push_back(p.slots[s].alias);
    deps.add_instruction(r, w, in.order);
  }
  deps.build();
  deps_ = std::make_unique<DependencyBuilder>(std::move(deps));
  p.succ_off.assign(n + 1, 0);
  p.dep_count.assign(n, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto s = deps_->successors(i);
    p.succ.insert(p.succ.end(), s.begin(), s.end());
    p.succ_off[i + 1] = static_cast<std::uint32_t>(p.succ.size());
    p.dep_count[i] = deps_->num_predecessors(i);
    if (p.dep_count[i] == 0) p.roots.push_back(i);
  }
}

// ---- phase: stream lanes, out-events and waits (executor.md §4) ----

// Every non-direct edge of the reduced DAG (RAW, WAR and WAW alike) gets an
// event: its source records one after its launch, its target waits on it.
// Reduced edges suffice: an event completes only after everything its
// stream ran before, waits included, so waits compose along paths.
void PlanBuilder::analyze_streams() {
  ExecutionPlan& p = plan();
  if (!p.has_streams()) return;
  const std::uint32_t n = p.size();
  p.lane.assign(n, -1);
  p.records_event.assign(n, 0);
  for (std::uint32_t i = 0; i < n; ++i)
    if (p.instructions[i].lane.is_stream) p.lane[i] = p.instructions[i].lane.stream;
  std::vector<std::vector<std::uint32_t>> waits(n);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t s : p.successors(i)) {
      if (successor_kind(p.instructions[i].lane, p.instructions[s].lane) == SuccessorKind::Direct) continue;
      p.records_event[i] = 1;
      waits[s].push_back(i);
    }
  p.wait_off.assign(n + 1, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    p.wait.insert(p.wait.end(), waits[i].begin(), waits[i].end());
    p.wait_off[i + 1] = static_cast<std::uint32_t>(p.wait.size());
  }
}

// ---- phase: GC — each temporary freed by its last users (seed 001 §3.3.2) ----

void PlanBuilder::plan_gc() {
  ExecutionPlan& p = plan();
  const std::uint32_t n = p.size();
  const auto num_slots = static_cast<std::uint32_t>(p.slots.size());
  p.ref_count.assign(num_slots, 0);
  std::vector<std::vector<std::uint32_t>> frees(n);
  if (p.options.gc) {
    std::vector<bool> keep(num_slots, false);
    for (std::uint32_t s = 0; s < num_slots; ++s) keep[s] = p.slots[s].persistent || p.slots[s].fetch_reads > 0;
    for (Value v : p.options.skip_gc)
      if (Value c = clone_of(v))
        if (auto it = value_slot_.find(c.impl()); it != value_slot_.end())
          keep[it->second] = p.slots[it->second].kept = true;
    std::vector<std::vector<std::uint32_t>> users(num_slots);
    for (std::uint32_t i = 0; i < n; ++i) {
      for (auto s : p.instructions[i].reads) users[s].push_back(i);
      for (auto s : p.instructions[i].writes) users[s].push_back(i);
    }
    for (std::uint32_t s = 0; s < num_slots; ++s) {
      auto& u = users[s];
      if (keep[s] || u.empty()) continue;
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      const auto last = deps_->last_users(u);
      p.ref_count[s] = static_cast<std::int32_t>(last.size());
      for (auto i : last) frees[i].push_back(s);
    }
  }
  p.gc_off.assign(n + 1, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    p.gc.insert(p.gc.end(), frees[i].begin(), frees[i].end());
    p.gc_off[i + 1] = static_cast<std::uint32_t>(p.gc.size());
  }
  deps_.reset();  // its memory goes now
  plan_stream_records();
}

// A device buffer comes from the cache of the stream its writer runs on
// (the compute stream's, or a copy or named stream's own:
// RunState::context_allocator) and goes back to it when freed: work queued
// on that stream is ordered before the block's next user there, but work
// on another stream is not. So a buffer that work on a copy or named stream
// touched is recorded, when GC lets it go, on every device stream that
// touched it, the compute stream included: the block goes back to its cache
// once all their work on it is done. Buffers only the compute stream
// touched need no record.
void PlanBuilder::plan_stream_records() {
  ExecutionPlan& p = plan();
  const auto num_slots = static_cast<std::uint32_t>(p.slots.size());
  std::vector<std::uint8_t> off_compute(p.stream_names.size(), 0);
  bool any = false;
  for (std::size_t k = 0; k < p.stream_names.size(); ++k) {
    off_compute[k] = is_device(p.stream_places[k]) && p.stream_names[k] != p.stream_places[k].to_string();
    any = any || off_compute[k];
  }
  if (!any) return;
  std::vector<std::vector<std::uint32_t>> lanes(num_slots);
  std::vector<std::uint8_t> touched_off_compute(num_slots, 0);
  for (const PlanInstruction& in : p.instructions) {
    if (!in.lane.is_stream || !is_device(p.stream_places[static_cast<std::size_t>(in.lane.stream)])) continue;
    const auto k = static_cast<std::uint32_t>(in.lane.stream);
    for (const auto* list : {&in.reads, &in.writes})
      for (std::uint32_t s : *list) {
        if (p.ref_count[s] <= 0 || !is_device(p.slots[s].place)) continue;
        touched_off_compute[s] |= off_compute[k];
        if (std::find(lanes[s].begin(), lanes[s].end(), k) == lanes[s].end()) lanes[s].push_back(k);
      }
  }
  p.record_off.assign(num_slots + 1, 0);
  for (std::uint32_t s = 0; s < num_slots; ++s) {
    if (touched_off_compute[s]) p.record.insert(p.record.end(), lanes[s].begin(), lanes[s].end());
    p.record_off[s + 1] = static_cast<std::uint32_t>(p.record.size());
  }
}

// ---- phase: the buffer plan ----

namespace {
// Bytes of a tensor type with a fully known shape; 0 when not known.
std::size_t static_bytes(Type t) {
  if (!t || !is_shaped(t)) return 0;
  std::size_t n = size_of(shaped_data_type(t));
  for (std::int64_t d : shaped_dims(t)) {
    if (d < 0) return 0;
    n *= static_cast<std::size_t>(d);
  }
  return n;
}
}  // namespace

// Small temporaries, within the budget, keep a buffer from run to run
// instead of freeing and allocating it each run (which costs more than the
// kernels of a small model). One whose shape is static and small stays
// resident: GC never touches it, the run's end parks it (a user sees it
// collected) and its kernel's alloc_output reuses the buffer in place, as a
// static buffer assignment does. One whose shape is
// only known at run time is recycled: GC keeps its buffer as the variable's
// spare when it is small enough (Variable::recycle). Views (alias != own
// slot) get neither: their writer's buffer is shared.
void PlanBuilder::plan_buffers() {
  ExecutionPlan& p = plan();
  p.recycle_max.assign(p.slots.size(), 0);
  if (p.options.recycle_bytes == 0) return;
  std::size_t budget = p.options.recycle_budget;
  const auto limit = static_cast<std::uint32_t>(std::min<std::size_t>(p.options.recycle_bytes, UINT32_MAX));
  std::vector<std::uint8_t> resident(p.slots.size(), 0);
  for (std::uint32_t s = 0; s < p.slots.size() && budget >= limit; ++s) {
    if (p.ref_count[s] == 0 || p.slots[s].alias != s) continue;
    const std::size_t bytes = static_bytes(p.slots[s].type);
    if (bytes > limit) continue;
    if (bytes > 0) resident[s] = 1;
    else p.recycle_max[s] = limit;
    budget -= limit;
  }
  // Resident slots leave the GC tables.
  std::vector<std::uint32_t> gc, gc_off(p.gc_off.size(), 0);
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    for (std::uint32_t k = p.gc_off[i]; k < p.gc_off[i + 1]; ++k)
      if (!resident[p.gc[k]]) gc.push_back(p.gc[k]);
    gc_off[i + 1] = static_cast<std::uint32_t>(gc.size());
  }
  p.resident.clear();
  for (std::uint32_t s = 0; s < p.slots.size(); ++s)
    if (resident[s]) {
      p.ref_count[s] = 0;
      p.resident.push_back(s);
    }
  p.gc = std::move(gc);
  p.gc_off = std::move(gc_off);
}

// ---- phase: what the thread plan chooses from ----

void PlanBuilder::summarize_for_thread_plan() {
  ExecutionPlan& p = plan();
  p.has_blas = std::any_of(p.instructions.begin(), p.instructions.end(),
                           [](const PlanInstruction& in) { return in.calls_blas; });
  p.has_intra_op = std::any_of(p.instructions.begin(), p.instructions.end(),
                               [](const PlanInstruction& in) { return in.may_split; });
  p.has_async = std::any_of(p.instructions.begin(), p.instructions.end(),
                            [](const PlanInstruction& in) { return in.async_fn != nullptr; });
  p.has_parallelism = p.roots.size() > 1;
  for (std::uint32_t i = 0; i < p.size() && !p.has_parallelism; ++i)
    p.has_parallelism = p.succ_off[i + 1] - p.succ_off[i] > 1;
  if (plan().is_region()) return;
  for (const auto& [src, id] : source_ids_)
    if (auto it = value_slot_.find(clone_values_[id].impl()); it != value_slot_.end())
      p.source_slot.emplace(src, it->second);
}

// ---- helpers ----

std::uint32_t PlanBuilder::new_slot(SlotKind kind, Place place, bool persistent, std::string name) {
  const auto s = static_cast<std::uint32_t>(plan().slots.size());
  PlanSlot slot;
  slot.kind = kind;
  slot.place = place;
  slot.alias = s;
  slot.persistent = persistent;
  slot.name = std::move(name);
  plan().slots.push_back(std::move(slot));
  return s;
}

std::uint32_t PlanBuilder::parameter_slot(const std::string& name) {
  if (auto it = parameter_slots_.find(name); it != parameter_slots_.end()) return it->second;
  const std::uint32_t s = new_slot(SlotKind::Parameter, plan().options.place, true, name);
  parameter_slots_.emplace(name, s);
  return s;
}

void PlanBuilder::add_instruction(PlanInstruction in) {
  plan().instructions.push_back(std::move(in));
}

// The slot holding operand `i` of `op` at `place`, with a transfer
// inserted (once per slot and place) where the value lives elsewhere.
std::uint32_t PlanBuilder::operand_slot(Operation* op, std::uint32_t i, Place place, Lane lane) {
  Value v = op->operand_source(i);
  auto it = value_slot_.find(v.impl());
  if (it == value_slot_.end())
    throw_error(ErrorKind::Unimplemented, "op '", op->name(), "' operand #", i,
                " is defined inside a region or by an unfed data op");
  return slot_at(it->second, place, op, lane);
}

// Slot `s`'s value at `place`: s itself, or a copy made by a transfer
// instruction (seed 001's data-transfer step). Between host places the copy
// runs on the consumer's lane; host → device on the device's h2d copy
// stream, device → host on its d2h stream into pinned memory.
std::uint32_t PlanBuilder::slot_at(std::uint32_t s, Place place, Operation* op, Lane lane) {
  if (plan().slots[s].place == place) return s;
  const std::uint64_t key = std::uint64_t(s) << 32 |
                            std::uint64_t(static_cast<std::uint8_t>(place.kind)) << 16 |
                            static_cast<std::uint16_t>(place.device);
  if (auto t = transfers_.find(key); t != transfers_.end()) return t->second;
  const std::uint32_t out = new_slot(SlotKind::Temporary, place, false);
  plan().slots[out].type = plan().slots[s].type;
  add_transfer(s, out, op, lane);
  transfers_.emplace(key, out);
  return out;
}

// A copy of slot `from` into slot `to` at to's place.
void PlanBuilder::add_transfer(std::uint32_t from, std::uint32_t to, Operation* op, Lane lane) {
  const Place src = plan().slots[from].place, dst = plan().slots[to].place;
  PlanInstruction in;
  in.name = "memcpy " + src.to_string() + "->" + dst.to_string();
  in.op = op;
  in.fn = &transfer_kernel;
  in.reads = {from};
  in.writes = {to};
  in.place = dst;
  if (is_device(dst)) {
    in.lane = is_device(src) ? stream_lane(dst.to_string(), dst)
                             : stream_lane(dst.to_string() + "/h2d", dst);
  } else if (is_device(src)) {
    in.lane = stream_lane(src.to_string() + "/d2h", src);
    in.pinned = true;
  } else {
    in.lane = lane;
  }
  add_instruction(std::move(in));
}

// Where values a device program hands to the host live.
Place PlanBuilder::host_place() const {
  return is_device(plan_->options.place) ? Place::cpu() : plan_->options.place;
}

// The lane of an op's instructions, for an op whose kernel runs at
// `place`: its execution_stream attribute, else the place's default stream
// (host_stream:N, or cuda:N's compute stream), else the host. An op a
// device program runs on the CPU runs on the host.
Lane PlanBuilder::op_lane(Operation* op, std::uint32_t index, Place place) {
  if (plan().is_region()) {
    if (op->attribute(kExecutionStreamAttr))
      throw_error(ErrorKind::Unimplemented, op_ref(index, *op),
                  " inside a region of a control-flow op names an execution stream; regions "
                  "run on the host");
    return Lane::host();
  }
  if (is_device(plan().options.place) && !is_device(place)) return Lane::host();
  const Place stream_place = is_device(place) ? place : Place::host_stream(0);
  if (Attribute a = op->attribute(kExecutionStreamAttr)) {
    auto name = a.dyn_cast<StrAttribute>();
    if (!name || name.value().empty())
      throw_error(ErrorKind::InvalidArgument, op_ref(index, *op), ": attribute '",
                  kExecutionStreamAttr, "' must name a stream (a non-empty string), got ",
                  a.to_string());
    return stream_lane(std::string(name.value()), stream_place, op, index);
  }
  if (place.kind == PlaceKind::HostStream || is_device(place))
    return stream_lane(place.to_string(), place, op, index);
  return Lane::host();
}

Lane PlanBuilder::stream_lane(const std::string& name, Place place, Operation* op,
                              std::uint32_t index) {
  auto it = stream_index_.find(name);
  if (it == stream_index_.end()) {
    if (plan().stream_names.size() >= 1024) {
      if (op)
        throw_error(ErrorKind::OutOfRange, op_ref(index, *op),
                    ": more than 1024 execution streams in one program");
      throw_error(ErrorKind::OutOfRange, "more than 1024 execution streams in one program");
    }
    it = stream_index_.emplace(name, static_cast<std::int16_t>(plan().stream_names.size())).first;
    plan().stream_names.push_back(name);
    plan().stream_places.push_back(place);
  }
  return Lane::on_stream(it->second);
}

}  // namespace kiln
