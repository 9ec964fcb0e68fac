// Dataflow control flow (seed 003, second half: TensorFlow's Switch, Merge,
// Enter, Exit and NextIteration): loops and conditionals as plain ops of one
// block instead of regions. The executor runs a program holding them with a
// frame propagator (kiln/exec/frame_plan.h): values are tagged with a frame
// and an iteration, and a value may be dead (the untaken side of a switch).
//
//   %f, %t  = kiln.switch(%data, %pred)       %pred false: %f live, %t dead
//   %v, %k  = kiln.merge(%a, %b, ...)         the first live input, its index
//   %x'     = kiln.enter(%x) {frame_name, is_constant, parallel_iterations}
//   %y      = kiln.exit(%x')                  back to the enclosing frame
//   kiln.next_iteration(%next, %v)            %next reaches merge %v's next iteration
//
// SSA needs every operand defined before its use, so the back edge of a loop
// is spelled from its source: next_iteration names the merge it feeds by
// that merge's first result (its second operand is a target, not a read).
// At run time the merge's inputs are its operands, then one per
// next_iteration naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dialect/builtin.h"

namespace kiln {

// kiln.switch(%data, %pred) -> (%output_false, %output_true). The predicate
// is a bool tensor of one element; the output it does not select is dead.
struct SwitchOp : Op<SwitchOp, SideEffect, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.switch";
  static constexpr int num_operands = 2, num_results = 2;
  static void build(Builder& b, OperationArgument& arg, Value data, Value pred);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  Value data() const { return op_->operand_source(0); }
  Value pred() const { return op_->operand_source(1); }
  OpResult output_false() const { return op_->result(0); }
  OpResult output_true() const { return op_->result(1); }
};

// kiln.merge(%in...) -> (%output, %value_index): forwards the first live
// input and its index (an i64 scalar); dead only when every input that can
// arrive is dead. Inputs may differ in static dims (the output has -1 there).
struct MergeOp : Op<MergeOp, SideEffect, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.merge";
  static constexpr int num_operands = -1, num_results = 2;
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& inputs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  OpResult output() const { return op_->result(0); }
  OpResult value_index() const { return op_->result(1); }
};

// kiln.enter(%x) {frame_name, is_constant, parallel_iterations}: %x in the
// child frame `frame_name` of the frame %x lives in. A constant enter's value
// is seen by every iteration of the frame; any other reaches iteration 0.
// parallel_iterations (>= 1): at most this many iterations of the frame are
// live at once; every enter of a frame must agree on it.
struct EnterOp : Op<EnterOp, SideEffect, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.enter";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::string, frame_name), (bool, is_constant), (std::int64_t, parallel_iterations));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::string& frame_name,
                    bool is_constant = false, std::int64_t parallel_iterations = 10);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.exit(%x): %x, from a frame to the frame that entered it.
struct ExitOp : Op<ExitOp, SideEffect, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.exit";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.next_iteration(%next, %merged): %next becomes an input of the merge
// whose output is %merged, in the iteration after this one. A dead %next
// starts no iteration.
struct NextIterationOp : Op<NextIterationOp, SideEffect, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.next_iteration";
  static constexpr int num_operands = 2, num_results = 0;
  static void build(Builder& b, OperationArgument& arg, Value next, Value merged);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  void verify() const;
  Value next() const { return op_->operand_source(0); }
  // The merge this op feeds.
  Operation* target() const { return op_->operand_source(1).defining_op(); }
};

// Whether `op` is one of the five ops above.
bool is_dataflow_op(const Operation& op);
// Whether `block` runs as a dataflow program (frames, dead values; its plan
// has a FramePlan): it holds one of the five ops above, or a kiln.recv with
// passes_dead (a part of a partitioned dataflow program).
bool has_dataflow_ops(const Block& block);

}  // namespace kiln
