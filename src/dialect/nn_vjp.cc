// Vjp of the softmax family (nn_ops.h), the reductions (reduce_ops.h), the
// shape / indexing ops (tensor_ops.h) and dropout (random_ops.h). Shapes
// unknown at build time (-1) are read at run time by the grad ops, which
// take the forward operand whose shape they need as an operand.
#include "kiln/dialect/grad_ops.h"
#include "kiln/dialect/math_ops.h"
#include "kiln/dialect/nn_ops.h"
#include "kiln/dialect/random_ops.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/tensor_ops.h"

namespace kiln {

using vjp::differentiable;

namespace {

// The out_grad of a one-result op whose operand #0 is the differentiable
// one; null when there is nothing to do.
Value flowing_grad(Operation* op, const std::vector<Value>& out_grads) {
  vjp::check_out_grads(op, out_grads);
  if (!out_grads[0] || !differentiable(op->operand_source(0))) return {};
  return out_grads[0];
}

}  // namespace

// ---- softmax family ----

std::vector<Value> SoftmaxOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  return {b.create<SoftmaxGradOp>(op->result(0), d, SoftmaxOp(op).attrs().axis).result()};
}

std::vector<Value> LogSoftmaxOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  return {b.create<LogSoftmaxGradOp>(op->result(0), d, LogSoftmaxOp(op).attrs().axis).result()};
}

// Results (softmax, loss): the loss's grad gives (softmax - onehot)·dloss;
// a grad of the softmax result adds softmax_grad along the class axis. The
// label gets none.
std::vector<Value> SoftmaxWithCrossEntropyOp::vjp(Builder& b, Operation* op,
                                                  const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(2);
  if (vjp::all_null(g) || !differentiable(op->operand_source(0))) return grads;
  Value softmax = op->result(0);
  Value dx;
  if (g[1])
    dx = b.create<SoftmaxWithCrossEntropyGradOp>(softmax, op->operand_source(1), g[1],
                                                 SoftmaxWithCrossEntropyOp(op).attrs().ignore_index)
             .result();
  if (g[0]) {
    Value ds = b.create<SoftmaxGradOp>(softmax, g[0], -1).result();
    dx = dx ? Value(b.create<AddOp>(dx, ds).result()) : ds;
  }
  grads[0] = dx;
  return grads;
}

// ---- reductions ----

std::vector<Value> SumOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto a = SumOp(op).attrs();
  return {b.create<SumGradOp>(op->operand_source(0), d, a.axis, a.keepdim).result()};
}

std::vector<Value> MeanOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto a = MeanOp(op).attrs();
  return {b.create<MeanGradOp>(op->operand_source(0), d, a.axis, a.keepdim).result()};
}

std::vector<Value> MaxOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto a = MaxOp(op).attrs();
  return {b.create<MaxGradOp>(op->operand_source(0), op->result(0), d, a.axis, a.keepdim)
              .result()};
}

// ---- shape ops ----

// The grad viewed with x's run-time shape.
std::vector<Value> ReshapeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  return {b.create<ReshapeAsOp>(d, op->operand_source(0)).result()};
}

// The inverse permutation.
std::vector<Value> TransposeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto perm = TransposeOp(op).attrs().perm;
  auto rank = static_cast<std::int64_t>(perm.size());
  std::vector<std::int64_t> inv(perm.size());
  for (std::int64_t i = 0; i < rank; ++i) inv[perm[i] < 0 ? perm[i] + rank : perm[i]] = i;
  return {b.create<TransposeOp>(d, inv).result()};
}

// The grad cut into pieces shaped like the operands (at run time).
std::vector<Value> ConcatOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  std::vector<Value> grads(op->num_operands());
  if (!d) return grads;
  auto split = b.create<SplitAsOp>(d, op->operands(), ConcatOp(op).attrs().axis);
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    grads[i] = split.operation()->result(i);
  return grads;
}

// The results' grads joined again; a result without one contributes zeros.
std::vector<Value> SplitOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  if (vjp::all_null(g) || !differentiable(op->operand_source(0))) return {Value()};
  std::vector<Value> parts;
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    parts.push_back(g[i] ? g[i] : vjp::zeros(b, op->result(i)));
  return {b.create<ConcatOp>(parts, SplitOp(op).attrs().axis).result()};
}

std::vector<Value> SliceOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto a = SliceOp(op).attrs();
  return {b.create<SliceGradOp>(op->operand_source(0), d, a.axes, a.starts, a.ends).result()};
}

// Grad w.r.t. x only; the index gets none.
std::vector<Value> GatherOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value(), Value()};
  return {b.create<GatherGradOp>(op->operand_source(0), op->operand_source(1), d,
                                 GatherOp(op).attrs().axis)
              .result(),
          Value()};
}

// Grad w.r.t. the weight only (a dense scatter-add); the ids get none.
std::vector<Value> EmbeddingOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value(), Value()};
  return {b.create<EmbeddingGradOp>(op->operand_source(0), op->operand_source(1), d,
                                    EmbeddingOp(op).attrs().padding_idx)
              .result(),
          Value()};
}

// Through the mask result (#1); the mask's own grad (if any) is ignored.
std::vector<Value> DropoutOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto a = DropoutOp(op).attrs();
  return {b.create<DropoutGradOp>(d, op->result(1), a.p, a.is_test).result()};
}

}  // namespace kiln
