// Ops whose shape, bounds or axes are tensors computed at run time (ONNX
// models exported with dynamic axes: Shape → Gather → Concat → Reshape):
// kiln.shape / kiln.numel read a tensor's run-time dims; reshape_by,
// expand_by, slice_by, squeeze_by, unsqueeze_by, split_by, sum_by, tile and
// full_by take them as a small 1-D integer operand their kernels read on the
// host; kiln.range makes a sequence whose length is known only at run time.
// Result dims not known at build time are -1. Also kiln.strided_slice:
// slicing with steps (negative included) by attributes.
//
// reshape_by, expand_by and full_by take `known_dims`: result dims a
// builder knows although the shape operand is computed at run time (an
// importer that sees [shape(x)[0], 12] knows the 12), -1 where unknown,
// empty for none. The result type takes them; the kernel checks them, so a
// wrong one is a kiln::Error naming the op, never a silent mismatch.
#pragma once

#include <array>
#include <cstdint>

#include "kiln/dialect/grad_op.h"
#include "kiln/ir/half_operands.h"

namespace kiln {

// kiln.shape(x): i64 [rank(x)], x's dims at run time (x's data unread, so
// a 16-bit x is read as it is: HalfOperandsInterface).
struct ShapeOp : Op<ShapeOp, ReadOnly, ValueSemantics, InferMetaInterface, HalfOperandsInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.shape";
  static constexpr std::array<std::uint32_t, 1> half_operands{0};
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.numel(x): i64 scalar, x's element count at run time (x's data
// unread, as shape's).
struct NumelOp : Op<NumelOp, ReadOnly, ValueSemantics, InferMetaInterface, HalfOperandsInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.numel";
  static constexpr std::array<std::uint32_t, 1> half_operands{0};
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.reshape_by(x, shape): kiln.reshape with the shape as a 1-D i32/i64
// operand of static length (the result's rank): 0 copies the input's dim
// (unless allowzero: then it is a 0 dim), one -1 is inferred. A view.
// Vjp: reshape_as back to x; the shape gets no gradient.
struct ReshapeByOp : Op<ReshapeByOp, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reshape_by";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  KILN_ATTRIBUTES((bool, allowzero), (std::vector<std::int64_t>, known_dims));
  static void build(Builder& b, OperationArgument& arg, Value x, Value shape, bool allowzero = false,
                    const std::vector<std::int64_t>& known_dims = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.expand_by(x, shape): x and the shape broadcast together, numpy style
// (ONNX Expand: a shape dim of 1 keeps x's dim). Any dtype. Vjp: reduce_as
// back to x.
struct ExpandByOp : Op<ExpandByOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.expand_by";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, known_dims));
  static void build(Builder& b, OperationArgument& arg, Value x, Value shape,
                    const std::vector<std::int64_t>& known_dims = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// The elements a strided slice takes from a dim of size `dim` (ONNX Slice):
// negative start/end count from the end; then both clamp to [0, dim] for a
// positive step, start to [0, dim - 1] and end to [-1, dim - 1] for a
// negative one. Returns (first index, count). kiln::Error naming `op` for a
// zero step.
// `dims` (a result's inferred dims) with the known_dims of a run-time shape
// op merged in; kiln::Error naming `op` when their lengths or a dim disagree.
std::vector<std::int64_t> merge_known_dims(std::string_view op, std::vector<std::int64_t> dims,
                                           const std::vector<std::int64_t>& known_dims);

std::pair<std::int64_t, std::int64_t> strided_slice_range(std::string_view op, std::int64_t start,
                                                          std::int64_t end, std::int64_t step,
                                                          std::int64_t dim);

// x[starts[k]:ends[k]:steps[k]] along each axes[k] (ONNX Slice, steps may be
// negative, never 0); other dims whole. Vjp: strided_slice_grad.
struct StridedSliceOp
    : Op<StridedSliceOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.strided_slice";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, axes), (std::vector<std::int64_t>, starts),
                  (std::vector<std::int64_t>, ends), (std::vector<std::int64_t>, steps));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& axes,
                    const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends,
                    const std::vector<std::int64_t>& steps);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // strided_slice_grad(x, dout): zeros like x, dout written where the slice
  // took its elements from.
  struct Grad : GradSpec<2, 0> {};
};

// kiln.slice_by(x, starts, ends, axes, steps): kiln.strided_slice with its
// bounds as 1-D i32/i64 operands of one length (read at run time). Result
// dims are -1. Vjp: slice_by_grad(x, starts, ends, axes, steps, dout).
struct SliceByOp : Op<SliceByOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.slice_by";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 5, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x, Value starts, Value ends, Value axes,
                    Value steps);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  struct Grad : GradSpec<6, 0> {};
};

// kiln.squeeze_by(x, axes) / kiln.unsqueeze_by(x, axes): kiln.squeeze /
// kiln.unsqueeze with the axes a 1-D i32/i64 operand (read at run time). A
// squeezed dim must be 1. Views; Vjp: reshape_as.
struct SqueezeByOp : Op<SqueezeByOp, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.squeeze_by";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value x, Value axes);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};
struct UnsqueezeByOp : Op<UnsqueezeByOp, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.unsqueeze_by";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value x, Value axes);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.split_by(x, sizes) {axis}: x cut along `axis` into parts of the run-time
// sizes (1-D i32/i64 of static length: one result per part), which must add
// up to the dim. Vjp: the grads joined again (zeros for a part without one).
struct SplitByOp : Op<SplitByOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.split_by";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = -1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value x, Value sizes, std::int64_t axis);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.sum_by(x, axes) {keepdims}: the sum over the run-time axes (1-D
// i32/i64 of static length k > 0, distinct); rank(x) - k dims without
// keepdims. f32, f64, i32, i64. No Vjp.
struct SumByOp : Op<SumByOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sum_by";
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((bool, keepdims));
  static void build(Builder& b, OperationArgument& arg, Value x, Value axes, bool keepdims);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.tile(x, repeats): x repeated repeats[i] times along dim i (numpy
// tile; repeats a 1-D i32/i64 operand with one entry >= 0 per dim). Any
// dtype. No Vjp.
struct TileOp : Op<TileOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.tile";
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x, Value repeats);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.full_by(shape) {value, dtype}: kiln.full with the shape a 1-D
// i32/i64 operand (ONNX ConstantOfShape). f32, f64, i32, i64, bool.
struct FullByOp : Op<FullByOp, ReadOnly, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.full_by";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((double, value), (DataType, dtype), (std::vector<std::int64_t>, known_dims));
  static void build(Builder& b, OperationArgument& arg, Value shape, double value,
                    DataType dtype = DataType::Float32, const std::vector<std::int64_t>& known_dims = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.range(start, limit, delta): [start, start + delta, …) up to limit
// (excluded), max(ceil((limit - start) / delta), 0) elements (ONNX Range,
// numpy arange). Three scalars (rank 0 or [1]) of one dtype: f32, f64, i32,
// i64; delta != 0. Result: 1-D of that dtype, its length -1 at build time.
struct RangeOp : Op<RangeOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.range";
  static constexpr int num_operands = 3, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value start, Value limit, Value delta);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
