// Shape-manipulation ops: expand (broadcast_to), stack, flatten, squeeze,
// unsqueeze, pad (constant mode) and cumsum. flatten / squeeze / unsqueeze
// are ViewLike like kiln.reshape (the output shares the input's buffer);
// the others are pure (ReadOnly, ValueSemantics).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {

// x broadcast to `shape` (PyTorch expand / Paddle expand): shape may have
// more dims than x (new leading dims); x's dims align with shape's trailing
// dims, each must be 1 or equal to the target; -1 keeps x's dim (not allowed
// for a new leading dim). Any dtype. Vjp: kiln.reduce_as back to x.
struct ExpandOp : Op<ExpandOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.expand";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, shape));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& shape);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};
// numpy's name for the same op.
using BroadcastToOp = ExpandOp;

// Joins tensors of one shape and dtype (variadic operands, at least one)
// along a new dim `axis` in [-(rank + 1), rank]. Any dtype. Vjp: the grad
// split along `axis`, each piece viewed with its operand's shape.
struct StackOp : Op<StackOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.stack";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = -1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& xs,
                    std::int64_t axis = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Dims start_axis..stop_axis (inclusive, negative counts from the end)
// merged into one; a rank-0 input gives [1]. A view. Vjp: reshape_as.
struct FlattenOp : Op<FlattenOp, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.flatten";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  KILN_ATTRIBUTES((std::int64_t, start_axis), (std::int64_t, stop_axis));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t start_axis = 0,
                    std::int64_t stop_axis = -1);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Drops size-1 dims: those named in `axes` (a named dim that is not 1 is
// kept, as in PyTorch / Paddle; a named dim unknown at build time is an
// error), or, with `axes` empty, every dim that is 1 (dims unknown at build
// time are kept). A view. Vjp: reshape_as.
struct SqueezeOp : Op<SqueezeOp, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.squeeze";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  KILN_ATTRIBUTES((std::vector<std::int64_t>, axes));
  static void build(Builder& b, OperationArgument& arg, Value x,
                    const std::vector<std::int64_t>& axes = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Inserts size-1 dims at `axes` (numpy expand_dims): positions in the
// result, of rank rank(x) + len(axes), each in [-out_rank, out_rank) and
// distinct. A view. Vjp: reshape_as.
struct UnsqueezeOp : Op<UnsqueezeOp, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.unsqueeze";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  KILN_ATTRIBUTES((std::vector<std::int64_t>, axes));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& axes);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Constant padding, PyTorch F.pad order: pads = (last_before, last_after,
// prev_before, prev_after, …), at most two per dim; negative pads crop.
// New elements are `value`. f32, f64, i32, i64. Every result dim must be
// >= 0. Vjp: pad of the grad with the pads negated (the slice of the grad
// that x's elements went to; zeros where x was cropped).
struct PadOp : Op<PadOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.pad";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, pads), (double, value));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& pads,
                    double value = 0.0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Running sum along `axis`: out[i] = Σ_{j <= i} x[j]; exclusive: Σ_{j < i};
// reverse: sums from the end (Σ_{j >= i}, or j > i when exclusive).
// f32, f64, i32, i64. Vjp: the cumsum of the grad in the other direction
// (same exclusive).
struct CumsumOp : Op<CumsumOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.cumsum";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis), (bool, exclusive), (bool, reverse));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t axis,
                    bool exclusive = false, bool reverse = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
