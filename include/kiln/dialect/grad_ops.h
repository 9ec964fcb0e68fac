// Gradient ops: what the ops' Vjp functions emit (seed 001 §1.2.2.1, the
// *_grad ops append_backward adds). Shapes that are -1 at build time (the
// batch dim) are taken at run time from an operand, so every op here works
// on programs fed [-1, …] data. Also the helpers the Vjps share.
#pragma once

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

// ---- shape plumbing ----

// kiln.reduce_as(x, target): x summed down to target's run-time shape (the
// inverse of numpy broadcasting: leading dims of x beyond target's rank and
// dims where target has 1 are summed). What broadcasting binary ops' Vjps
// use (Paddle's reduce_as; TensorFlow's BroadcastGradientArgs + reduce_sum).
// Result: x's dtype, target's dims. Only target's dims are read.
struct ReduceAsOp : Op<ReduceAsOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reduce_as";
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x, Value target);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.reshape_as(x, target): x's elements with target's run-time dims (a
// view of x's buffer, like reshape). Element counts must agree.
struct ReshapeAsOp : Op<ReshapeAsOp, ViewLike, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reshape_as";
  static constexpr int num_operands = 2, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value x, Value target);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.zeros_like(x): zeros of x's run-time dims and dtype (x's data unread).
struct ZerosLikeOp : Op<ZerosLikeOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.zeros_like";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.split_as(x, ref0, ref1, …) {axis}: x cut along `axis` into pieces
// shaped like the refs at run time (concat's gradient). Variadic: one result
// per ref; the refs' dims along `axis` must add up to x's.
struct SplitAsOp : Op<SplitAsOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.split_as";
  static constexpr int num_operands = -1, num_results = -1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::int64_t, axis));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<Value>& refs,
                    std::int64_t axis);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- activations: (y or x, dout) -> dx, same shapes ----

// Operands (a, dout) of one float dtype and one shape; result: like a.
template <typename ConcreteOp>
struct UnaryGrad {
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value a, Value dout) {
    arg.add_operand(a);
    arg.add_operand(dout);
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute);
};
std::vector<Type> infer_unary_grad(std::string_view op, const std::vector<Type>& in);
template <typename ConcreteOp>
std::vector<Type> UnaryGrad<ConcreteOp>::infer_meta(const std::vector<Type>& in,
                                                    DictionaryAttribute) {
  return infer_unary_grad(ConcreteOp::name, in);
}

// dx = out > 0 ? dout : 0 (operands: relu's output, dout)
struct ReluGradOp : Op<ReluGradOp, ReadOnly, ValueSemantics, InferMetaInterface>,
                    UnaryGrad<ReluGradOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.relu_grad";
};
// dx = dout · (1 - out²) (operands: tanh's output, dout)
struct TanhGradOp : Op<TanhGradOp, ReadOnly, ValueSemantics, InferMetaInterface>,
                    UnaryGrad<TanhGradOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.tanh_grad";
};
// dx = dout · out · (1 - out) (operands: sigmoid's output, dout)
struct SigmoidGradOp : Op<SigmoidGradOp, ReadOnly, ValueSemantics, InferMetaInterface>,
                       UnaryGrad<SigmoidGradOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sigmoid_grad";
};
// dx = dout · sign(x), 0 at x = 0 (operands: abs's input, dout)
struct AbsGradOp : Op<AbsGradOp, ReadOnly, ValueSemantics, InferMetaInterface>,
                   UnaryGrad<AbsGradOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.abs_grad";
};
// dx = dout · gelu'(x), exact (erf) or tanh form (operands: gelu's input, dout)
struct GeluGradOp : Op<GeluGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gelu_grad";
  static constexpr int num_operands = 2, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (bool, approximate));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, Value dout, bool approximate);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- broadcasting max / min ----

// (dx, dy) = kiln.maximum_grad(x, y, dout): dout routed to the larger of
// x and y (split in half on ties, as PyTorch), both in dout's (broadcast)
// shape — reduce_as brings them back to x's and y's shapes.
struct MaximumGradOp : Op<MaximumGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.maximum_grad";
  static constexpr int num_operands = 3, num_results = 2;
  static void build(Builder& b, OperationArgument& arg, Value x, Value y, Value dout);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};
// The same for the smaller of x and y.
struct MinimumGradOp : Op<MinimumGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.minimum_grad";
  static constexpr int num_operands = 3, num_results = 2;
  static void build(Builder& b, OperationArgument& arg, Value x, Value y, Value dout);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- reductions: attributes as the forward op's (axis, keepdim) ----

template <typename ConcreteOp>
struct ReductionGrad {
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::vector<std::int64_t>, axis), (bool, keepdim));
  };
};
std::vector<Type> infer_reduction_grad(std::string_view op, const std::vector<Type>& in,
                                       const std::vector<std::int64_t>& axis, bool keepdim);

// kiln.sum_grad(x, dout) {axis, keepdim}: dout broadcast back to x's
// run-time dims.
struct SumGradOp : Op<SumGradOp, ReadOnly, ValueSemantics, InferMetaInterface>,
                   ReductionGrad<SumGradOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sum_grad";
  static constexpr int num_operands = 2, num_results = 1;
  using ReductionGrad::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value x, Value dout,
                    const std::vector<std::int64_t>& axis, bool keepdim);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};
// kiln.mean_grad(x, dout) {axis, keepdim}: sum_grad / (elements reduced).
struct MeanGradOp : Op<MeanGradOp, ReadOnly, ValueSemantics, InferMetaInterface>,
                    ReductionGrad<MeanGradOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.mean_grad";
  static constexpr int num_operands = 2, num_results = 1;
  using ReductionGrad::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value x, Value dout,
                    const std::vector<std::int64_t>& axis, bool keepdim);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};
// kiln.max_grad(x, out, dout) {axis, keepdim}: dout to the elements equal to
// the max, split evenly among ties.
struct MaxGradOp : Op<MaxGradOp, ReadOnly, ValueSemantics, InferMetaInterface>,
                   ReductionGrad<MaxGradOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.max_grad";
  static constexpr int num_operands = 3, num_results = 1;
  using ReductionGrad::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value x, Value out, Value dout,
                    const std::vector<std::int64_t>& axis, bool keepdim);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- softmax family ----

// dx = out · (dout - Σ_axis dout · out) (operands: softmax's output, dout)
struct SoftmaxGradOp : Op<SoftmaxGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.softmax_grad";
  static constexpr int num_operands = 2, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::int64_t, axis));
  };
  static void build(Builder& b, OperationArgument& arg, Value out, Value dout, std::int64_t axis);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};
// dx = dout - exp(out) · Σ_axis dout (operands: log_softmax's output, dout)
struct LogSoftmaxGradOp : Op<LogSoftmaxGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.log_softmax_grad";
  static constexpr int num_operands = 2, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::int64_t, axis));
  };
  static void build(Builder& b, OperationArgument& arg, Value out, Value dout, std::int64_t axis);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};
// kiln.softmax_with_cross_entropy_grad(softmax, label, dloss) {ignore_index}:
// dlogits[i, j] = dloss[i] · (softmax[i, j] - [j == label[i]]), 0 on rows whose
// label is ignore_index. Shapes as the forward op's (softmax [..., C], label
// [...] or [..., 1], dloss [..., 1]).
struct SoftmaxWithCrossEntropyGradOp
    : Op<SoftmaxWithCrossEntropyGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.softmax_with_cross_entropy_grad";
  static constexpr int num_operands = 3, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::int64_t, ignore_index));
  };
  static void build(Builder& b, OperationArgument& arg, Value softmax, Value label, Value dloss,
                    std::int64_t ignore_index);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- indexing ----

// kiln.slice_grad(x, dout) {axes, starts, ends}: zeros like x with dout
// written where slice took its elements from.
struct SliceGradOp : Op<SliceGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.slice_grad";
  static constexpr int num_operands = 2, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::vector<std::int64_t>, axes),
                             (std::vector<std::int64_t>, starts), (std::vector<std::int64_t>, ends));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, Value dout,
                    const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& starts,
                    const std::vector<std::int64_t>& ends);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.gather_grad(x, index, dout) {axis}: zeros like x, dout scatter-added
// at the gathered positions (repeated indices add up).
struct GatherGradOp : Op<GatherGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gather_grad";
  static constexpr int num_operands = 3, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::int64_t, axis));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, Value index, Value dout,
                    std::int64_t axis);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.embedding_grad(weight, ids, dout) {padding_idx}: zeros like weight,
// each row of dout added into row ids[k]; the padding row gets nothing.
struct EmbeddingGradOp : Op<EmbeddingGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.embedding_grad";
  static constexpr int num_operands = 3, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::int64_t, padding_idx));
  };
  static void build(Builder& b, OperationArgument& arg, Value weight, Value ids, Value dout,
                    std::int64_t padding_idx);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.dropout_grad(dout, mask) {p, is_test}: dout · mask / (1 - p) in
// training, dout when is_test or p == 0 (mask: dropout's bool output #1).
struct DropoutGradOp : Op<DropoutGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.dropout_grad";
  static constexpr int num_operands = 2, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (double, p), (bool, is_test));
  };
  static void build(Builder& b, OperationArgument& arg, Value dout, Value mask, double p,
                    bool is_test);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- helpers the Vjps share (usable by user ops' Vjps too) ----
namespace vjp {

// Whether gradients flow through a value: a tensor of a floating dtype.
bool differentiable(Value v);
// Whether every out_grad is null (then every input grad is null).
bool all_null(const std::vector<Value>& out_grads);
// kiln::Error unless out_grads has one entry per result of `op`.
void check_out_grads(Operation* op, const std::vector<Value>& out_grads);
// `grad` (shaped like the broadcast result of a binary op) reduced to the
// shape of `operand`; `other` is the binary op's other operand. No op is
// added when the shapes are equal for certain at build time.
Value reduce_to_operand(Builder& b, Value grad, Value operand, Value other);
// `grad` reduced to `operand`'s shape unless both static shapes are equal
// and fully known.
Value reduce_to(Builder& b, Value grad, Value operand);
// Zeros shaped like `like`: kiln.full when its static shape is fully known,
// kiln.zeros_like otherwise.
Value zeros(Builder& b, Value like);

}  // namespace vjp

}  // namespace kiln
