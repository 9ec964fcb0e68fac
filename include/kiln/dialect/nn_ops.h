// Neural-network ops: softmax and log_softmax along an axis (numerically
// stable: the max is subtracted first), softmax_with_cross_entropy —
// Paddle's fused softmax + cross-entropy with integer hard labels — and
// cross_entropy, the same loss keeping each row's log-sum-exp instead of
// the softmax (a language model's vocabulary makes the softmax the step's
// largest tensor).
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "kiln/dialect/grad_op.h"
#include "kiln/ir/half_operands.h"

namespace kiln {

// exp(x - max) / Σ exp(x - max) along `axis` (default -1). f32, f64.
struct SoftmaxOp : Op<SoftmaxOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.softmax";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t axis = -1);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // softmax_grad(out, dout) {axis}: out · (dout - Σ_axis dout · out)
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// x - max - log Σ exp(x - max) along `axis` (default -1). f32, f64.
struct LogSoftmaxOp : Op<LogSoftmaxOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.log_softmax";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t axis = -1);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // log_softmax_grad(out, dout) {axis}: dout - exp(out) · Σ_axis dout
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// (softmax, loss) = kiln.softmax_with_cross_entropy(logits, label)
//   logits [N, C] (or [..., C]: classes on the last axis), f32 / f64;
//   label  [N] or [N, 1] (the leading dims of logits, optionally with a
//          trailing 1), i64 or i32;
//   softmax: like logits; loss [N, 1] (leading dims + 1), the logits' dtype:
//   loss[i] = -log softmax[i, label[i]], and 0 where label[i] == ignore_index
//   (default -100, as PyTorch / Paddle). Any other label outside [0, C) is a
//   kiln::Error naming the op, the row and the label.
struct SoftmaxWithCrossEntropyOp
    : Op<SoftmaxWithCrossEntropyOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.softmax_with_cross_entropy";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 2;
  KILN_ATTRIBUTES((std::int64_t, ignore_index));
  static void build(Builder& b, OperationArgument& arg, Value logits, Value label,
                    std::int64_t ignore_index = -100);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // softmax_with_cross_entropy_grad(softmax, label, dloss) {ignore_index}:
  // dlogits[i, j] = dloss[i] · (softmax[i, j] - [j == label[i]]), 0 on rows
  // whose label is ignore_index.
  struct Grad : GradSpec<3, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// (loss, lse) = kiln.cross_entropy(logits, label)
//   logits and label as softmax_with_cross_entropy's, the logits also bf16
//   or f16 (read as they are, computed in f32); loss and lse [..., 1]
//   (leading dims + 1), the logits' dtype (f32 for 16-bit logits):
//   lse[i] = log Σ_j exp(logits[i, j]), loss[i] = lse[i] - logits[i, label[i]]
//   (0 where label[i] == ignore_index). No [N, C] result: the gradient
//   recomputes the softmax from the logits and lse, so the logits are the
//   only class-sized tensor between the forward and the backward. The
//   frontend's nn::functional::cross_entropy builds it. Mixed precision
//   passes it low logits without an f32 copy (HalfOperandsInterface).
struct CrossEntropyOp
    : Op<CrossEntropyOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface, HalfOperandsInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.cross_entropy";
  static constexpr std::array<std::uint32_t, 1> half_operands{0};
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 2;
  KILN_ATTRIBUTES((std::int64_t, ignore_index));
  static void build(Builder& b, OperationArgument& arg, Value logits, Value label,
                    std::int64_t ignore_index = -100);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // cross_entropy_grad(logits, lse, label, dloss) {ignore_index}:
  // dlogits[i, j] = dloss[i] · (exp(logits[i, j] - lse[i]) - [j == label[i]]),
  // 0 on rows whose label is ignore_index; in the logits' dtype (for 16-bit
  // logits computed in f32, rounded once).
  struct Grad : GradSpec<4, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// kiln.cross_entropy_grad_(logits, lse, label, dloss) {ignore_index}:
// cross_entropy_grad written over the logits (result 0 is operand 0). The
// inplace pass makes it where the logits die at the gradient, so the
// logits and their gradient share one class-sized buffer.
struct CrossEntropyGradInplaceOp : Op<CrossEntropyGradInplaceOp, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.cross_entropy_grad_";
  static constexpr int num_operands = 4, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  KILN_ATTRIBUTES((std::int64_t, ignore_index));
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
