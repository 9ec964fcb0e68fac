// Element-wise indexing ops: take_along_axis / put_along_axis (numpy's names;
// torch.gather / torch.scatter, ONNX GatherElements / ScatterElements) and
// gather_nd / scatter_nd (ONNX GatherND / ScatterND, TensorFlow's gather_nd /
// tensor_scatter_nd_*). Indices are i32 or i64; a negative index counts from
// the end of its dim (ONNX's rule); one outside [-dim, dim) is a kiln::Error
// (OutOfRange) at run time naming the op and the index, raised before
// anything is written. Pure (ReadOnly, ValueSemantics): the put / scatter ops
// return an updated copy of x. Data: f32, f64, i32, i64, bool.
#pragma once

#include <string>

#include "kiln/dialect/grad_op.h"

namespace kiln {

// out[i0, …, i_axis, …] = x[i0, …, index[i0, …, i_axis, …], …]: index has x's
// rank, every dim but `axis` at most x's, and out has index's dims. Vjp:
// put_along_axis with reduction "add" of the grad into zeros like x
// (repeated indices add up).
struct TakeAlongAxisOp : Op<TakeAlongAxisOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.take_along_axis";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value x, Value index, std::int64_t axis);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// x with updates written along `axis` at index (take_along_axis's inverse):
// out[i0, …, index[i0, …, i_axis, …], …] ∘= updates[i0, …, i_axis, …], where
// index and updates have one shape, x's rank, every dim but `axis` at most
// x's. reduction: "none" (assign; with repeated indices the last one in
// row-major order wins), "add", "mul", "max", "min". Vjp for "none" (exact
// for distinct indices: x's grad is zero where an update landed, updates'
// grad is the grad taken along the axis) and "add"; the others have none
// (kiln::Error, Unimplemented).
struct PutAlongAxisOp : Op<PutAlongAxisOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.put_along_axis";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 3, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis), (std::string, reduction));
  static void build(Builder& b, OperationArgument& arg, Value x, Value index, Value updates,
                    std::int64_t axis, const std::string& reduction = "none");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ONNX GatherND: index [b…, m…, k] (the first batch_dims dims equal x's)
// picks, for each of its tuples, the slice x[b…, t0, …, t_{k-1}, :…];
// out.dims = index.dims[:-1] + x.dims[batch_dims + k:]. k (index's last dim)
// must be known at build time and batch_dims + k <= rank(x). Vjp (batch_dims
// 0): scatter_nd with reduction "add" of the grad into zeros like x.
struct GatherNdOp : Op<GatherNdOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gather_nd";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, batch_dims));
  static void build(Builder& b, OperationArgument& arg, Value x, Value index,
                    std::int64_t batch_dims = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ONNX ScatterND: x with each slice updates[m…] combined into
// x[index[m…, 0], …, index[m…, k-1], :…] (index [m…, k], updates.dims =
// index.dims[:-1] + x.dims[k:]). reduction as put_along_axis's ("none": the
// last of repeated tuples wins). Vjp for "none" (exact for distinct tuples)
// and "add", as put_along_axis's.
struct ScatterNdOp : Op<ScatterNdOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.scatter_nd";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 3, num_results = 1;
  KILN_ATTRIBUTES((std::string, reduction));
  static void build(Builder& b, OperationArgument& arg, Value x, Value index, Value updates,
                    const std::string& reduction = "none");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
