// Control flow (seed 001 §1, seed 002 §3.2): kiln.if and kiln.while own
// regions whose blocks end in kiln.yield. Both are IsolatedFromAbove: every
// outer value a region reads is an operand of the op and arrives as a block
// argument, so dependencies, gradients and the executor's bindings follow the
// operands alone. They have no kernel: the executor runs each region as a
// child plan of its own (kiln/exec/control_flow.h).
//
//   %r... = kiln.if(%pred, %cap...)
//     then ^(%cap'...) { ...; kiln.yield(%t...) }
//     else ^(%cap'...) { ...; kiln.yield(%f...) }
//
//   %r... = kiln.while(%cond, %init..., %cap...) {max_iterations}
//     body ^(%carried..., %cap'...) { ...; kiln.yield(%next_cond, %next...) }
//
// The while has Paddle PIR's form — a condition operand and one body that
// yields the next condition with the next values — rather than a separate
// condition region: one child plan runs per iteration instead of two, and
// the frontend builds the condition twice (before the loop and at the end of
// the body), as paddle.static.nn.while_loop does. Its results are the
// carried values after the last iteration; its first N operands after the
// condition are their initial values (N = the number of results), the rest
// are captures.
//
// A condition is a bool tensor of one element (any rank, dims 1 or -1). A
// yielded value fits its result when dtype and rank are equal and every dim
// is equal or -1 in the result (branches of an if may give different shapes
// at run time; the result type is their join).
#pragma once

#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/op.h"
#include "kiln/ir/region.h"

namespace kiln {

struct YieldOp : Op<YieldOp, ReadOnly, Terminator> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.yield";
  static constexpr int num_operands = -1, num_results = 0;
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& values);
};

struct IfOp : Op<IfOp, IsolatedFromAbove> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.if";
  static constexpr int num_operands = -1, num_results = -1, num_regions = 2;
  // The regions are left empty; the caller moves the then / else blocks in
  // (Region::push_back), each with one argument per capture.
  static void build(Builder& b, OperationArgument& arg, Value pred,
                    const std::vector<Value>& captures, const std::vector<Type>& result_types);
  void verify() const;

  Value pred() const { return op_->operand_source(0); }
  std::uint32_t num_captures() const { return op_->num_operands() - 1; }
  Region& then_region() const { return op_->region(0); }
  Region& else_region() const { return op_->region(1); }
};

struct WhileOp : Op<WhileOp, IsolatedFromAbove> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.while";
  static constexpr int num_operands = -1, num_results = -1, num_regions = 1;
  // max_iterations: -1 = unbounded; otherwise running more iterations is a
  // kiln::Error (OutOfRange).
  KILN_ATTRIBUTES((std::int64_t, max_iterations));
  // The result types are the inits' types unless given (a carried value
  // whose shape changes across iterations has -1 dims there). The body
  // region is left empty; the caller moves its block in, with arguments
  // (carried..., captures...).
  static void build(Builder& b, OperationArgument& arg, Value cond,
                    const std::vector<Value>& inits, const std::vector<Value>& captures,
                    std::int64_t max_iterations = -1,
                    const std::vector<Type>& result_types = {});
  void verify() const;

  Value cond() const { return op_->operand_source(0); }
  std::uint32_t num_carried() const { return op_->num_results(); }
  std::uint32_t num_captures() const { return op_->num_operands() - 1 - op_->num_results(); }
  Region& body_region() const { return op_->region(0); }
};

// Whether `value` fits a slot declared as `declared`: the same type, or
// shaped types of one kind, dtype and rank whose dims are equal or -1 in
// `declared`.
bool type_fits(Type value, Type declared);
// The most specific type both a and b fit (dims that differ become -1);
// null when they differ in kind, dtype or rank.
Type join_types(Type a, Type b);
// Whether t can be a condition: a bool tensor of one element.
bool is_condition_type(Type t);

}  // namespace kiln
