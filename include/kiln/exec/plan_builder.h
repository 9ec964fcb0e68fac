// PlanBuilder: makes an ExecutionPlan, one named phase per step of seed
// 001's pre-analysis — slots and kernel choice (with data transfers where
// places differ), fetches, dependencies, streams and events, GC, the buffer
// plan, and what the thread plan needs to know. Each phase reads what the
// earlier ones wrote into the plan under construction.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/exec/execution_plan.h"

namespace kiln {

class DependencyBuilder;

// kiln::Error (InvalidArgument) naming fetch #k when `v` is defined inside
// a region (a value leaves a region through its op's results only).
void require_fetchable(Value v, std::size_t k);

// The value a fetch by name takes in `block`: a kiln.fetch op's operand
// (the op in *fetch_op), a data op's or a parameter op's result; null when
// none has that name.
Value find_named_fetch(const Block& block, std::string_view name, Operation** fetch_op);

class PlanBuilder {
 public:
  // `feed_names`: the data ops the caller feeds, in feed order.
  PlanBuilder(const Program& program, std::vector<std::string> feed_names,
              const std::vector<FetchTarget>& fetch, ExecutionOptions options);
  // The plan of one region of a control-flow op in `parent`'s program copy:
  // its block arguments are Argument slots, its kiln.yield's operands are
  // the plan's fetches.
  PlanBuilder(const Block& region_block, const PlanBuilder& parent);
  ~PlanBuilder();
  // For a program a pass pipeline made from the caller's: per op of its top
  // block, the number errors and traces give it ("op #k": its position in
  // the caller's program; kNoIndex for an op a pass made). Default: each
  // op's own position.
  PlanBuilder& number_ops(std::vector<std::uint32_t> numbers);
  std::shared_ptr<const ExecutionPlan> build();

 private:
  // Phases, in order.
  void copy_program();
  void resolve_fetch_targets();
  void add_instructions();
  void plan_fetches();
  void mark_unused_outputs();
  void build_dependencies();
  void analyze_streams();
  void plan_gc();
  void plan_stream_records();
  void plan_buffers();
  void summarize_for_thread_plan();
  void plan_frames();

  // add_instructions(), per op kind.
  void add_parameter_op(Operation* op);
  void add_data_op(Operation* op);
  void add_set_parameter_op(Operation* op, std::uint32_t index);
  void add_fetch_op(Operation* op, std::uint32_t index);
  void add_kernel_op(Operation* op, std::uint32_t index);
  void add_control_flow_op(Operation* op, std::uint32_t index, Lane lane);
  // Region plans: block arguments → Argument slots; kiln.yield → fetches.
  void bind_block_arguments();
  void plan_yield();
  struct KernelChoice {
    const KernelInfo* kernel;
    Place place;  // where it runs: the plan's place, or the CPU in a device program
  };
  KernelChoice choose_kernel(Operation* op, std::uint32_t index);
  // Gives each in-place output of kernel op `op` its input's slot in `ins`,
  // or a copy of it (replacing it in `ins`) where the input must not change;
  // sets them in `outs`. Returns the (output index, home slot) pairs of the
  // outputs that update a copy of a parameter (one staged into another slot,
  // e.g. at another place): written back to the parameter after the op.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> bind_inplace_outputs(
      Operation* op, Place place, Lane lane, std::vector<std::uint32_t>& ins,
      std::vector<std::uint32_t>& outs);

  // Helpers.
  std::uint32_t new_slot(SlotKind kind, Place place, bool persistent, std::string name = {});
  std::uint32_t parameter_slot(const std::string& name);
  std::uint32_t operand_slot(Operation* op, std::uint32_t operand, Place place, Lane lane);
  std::uint32_t slot_at(std::uint32_t slot, Place place, Operation* op, Lane lane);
  void add_transfer(std::uint32_t from, std::uint32_t to, Operation* op, Lane lane);
  void add_instruction(PlanInstruction in);
  Place host_place() const;
  Lane op_lane(Operation* op, std::uint32_t index, Place place);
  Lane stream_lane(const std::string& name, Place place, Operation* op = nullptr,
                   std::uint32_t index = kNoIndex);
  Value clone_of(Value source) const;

  ExecutionPlan& plan() { return *plan_; }

  std::shared_ptr<ExecutionPlan> plan_;
  const Program* source_ = nullptr;       // root plans
  const PlanBuilder* root_ = this;        // the builder of the root plan
  const Block* block_ = nullptr;          // the block whose ops become instructions
  std::vector<std::string> feed_names_;
  std::vector<FetchTarget> fetch_;
  std::vector<std::uint32_t> op_numbers_;  // number_ops(); empty: positions

  std::unordered_map<const detail::ValueImpl*, std::uint32_t> source_ids_;  // caller's values → id
  std::vector<Value> clone_values_;                                         // by id
  std::unordered_map<const detail::ValueImpl*, std::uint32_t> value_slot_;  // the clone's values
  std::vector<Value> fetch_values_;                                         // the clone's
  std::vector<Operation*> fetch_ops_;  // per target: the kiln.fetch op it names, or null
  std::unordered_map<Operation*, std::uint32_t> fetch_op_slot_;             // kiln.fetch op → its result
  std::unordered_map<std::string, std::uint32_t> parameter_slots_;
  std::unordered_map<std::uint64_t, std::uint32_t> transfers_;  // (slot, place) → copy's slot
  std::set<std::string> cpu_fallback_;  // ops a device program runs on the CPU
  std::unordered_map<std::string, std::int16_t> stream_index_;
  // Region plans of kiln.while bodies: the Argument slots of carried values
  // (the runner's own variables, not the parent's).
  std::unordered_set<std::uint32_t> carried_arguments_;
  // Slots whose buffer a tensor array may hold as an element: an in-place
  // op on one works on a copy, so the element does not change under it.
  std::unordered_set<std::uint32_t> array_elements_;
  // From build_dependencies() to plan_gc() (its last_users()).
  std::unique_ptr<DependencyBuilder> deps_;
};

}  // namespace kiln
