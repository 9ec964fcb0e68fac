// Elementwise and linear-algebra ops: broadcasting binary ops (add, sub,
// mul, div, maximum, minimum, pow — numpy rules), unary ops (relu, gelu,
// tanh, sigmoid, exp, log, sqrt, square, abs, neg, scale) with the in-place
// twins relu_ and sqrt_ (Inplace: output 0 aliases input 0, seed 002
// §2.5.2), assign, cast, add_n, and matmul (transpose flags, batched).
#pragma once

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

// Broadcast two shapes numpy-style; -1 (unknown) broadcasts against anything
// but 1. Throws kiln::Error naming `op` when the shapes cannot broadcast.
std::vector<std::int64_t> broadcast_shapes(std::string_view op, const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b);

struct AddOp : Op<AddOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.add";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x, Value y);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct MatmulOp : Op<MatmulOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.matmul";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (bool, transpose_x), (bool, transpose_y));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, Value y, bool transpose_x = false,
                    bool transpose_y = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct ReluOp : Op<ReluOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.relu";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct Relu_Op : Op<Relu_Op, Inplace, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.relu_";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- shared build()/infer_meta() of the elementwise families ----
// An op class mixes one of these in next to its Op<> base:
//   struct SubOp : Op<SubOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
//                  ElementwiseBinary<SubOp> { … };

// Two operands of one dtype, numpy-broadcast; result: the broadcast shape.
std::vector<Type> infer_elementwise_binary(std::string_view op, const std::vector<Type>& in,
                                           bool floating_only);
// One operand; result: the same dtype and shape (tensor/vtensor kept).
std::vector<Type> infer_elementwise_unary(std::string_view op, const std::vector<Type>& in,
                                          bool floating_only);

template <typename ConcreteOp, bool FloatingOnly = false>
struct ElementwiseBinary {
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x, Value y) {
    arg.add_operand(x);
    arg.add_operand(y);
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return infer_elementwise_binary(ConcreteOp::name, in, FloatingOnly);
  }
};

template <typename ConcreteOp, bool FloatingOnly = false>
struct ElementwiseUnary {
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return infer_elementwise_unary(ConcreteOp::name, in, FloatingOnly);
  }
};

// In-place unary: the operand must be a (mutable) tensor, not a vtensor.
template <typename ConcreteOp, bool FloatingOnly = false>
struct InplaceUnary {
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    auto out = infer_elementwise_unary(ConcreteOp::name, in, FloatingOnly);
    meta::require_mutable(ConcreteOp::name, in[0]);
    return out;
  }
};

// ---- broadcasting binary ops (f32, f64, i32, i64 unless said) ----

// x - y
struct SubOp : Op<SubOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseBinary<SubOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sub";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// x * y
struct MulOp : Op<MulOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseBinary<MulOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.mul";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// x / y. Integers divide truncating toward zero (C++); an integer division
// by zero is a kiln::Error naming the op.
struct DivOp : Op<DivOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseBinary<DivOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.div";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// max(x, y) elementwise; NaN wins (as torch.maximum).
struct MaximumOp : Op<MaximumOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                   ElementwiseBinary<MaximumOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.maximum";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// min(x, y) elementwise; NaN wins (as torch.minimum).
struct MinimumOp : Op<MinimumOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                   ElementwiseBinary<MinimumOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.minimum";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// x ** y (f32, f64).
struct PowOp : Op<PowOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseBinary<PowOp, /*FloatingOnly=*/true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.pow";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// ---- unary ops (f32, f64; "+ ints" also i32, i64) ----

// gelu(x) = x · Φ(x). approximate = false: the exact erf form (PyTorch's
// default, approximate='none'); true: the tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
struct GeluOp : Op<GeluOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gelu";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (bool, approximate));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, bool approximate = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct TanhOp : Op<TanhOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                ElementwiseUnary<TanhOp, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.tanh";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// 1 / (1 + exp(-x))
struct SigmoidOp : Op<SigmoidOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                   ElementwiseUnary<SigmoidOp, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sigmoid";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

struct ExpOp : Op<ExpOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseUnary<ExpOp, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.exp";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// Natural log; log(0) = -inf, log(x < 0) = NaN (IEEE, no error).
struct LogOp : Op<LogOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseUnary<LogOp, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.log";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// sqrt(x < 0) = NaN (IEEE, no error).
struct SqrtOp : Op<SqrtOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                ElementwiseUnary<SqrtOp, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sqrt";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// In-place sqrt: output 0 is input 0's variable.
struct Sqrt_Op : Op<Sqrt_Op, Inplace, InferMetaInterface, VjpInterface>,
                 InplaceUnary<Sqrt_Op, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sqrt_";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// x * x (+ ints)
struct SquareOp : Op<SquareOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                  ElementwiseUnary<SquareOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.square";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// |x| (+ ints)
struct AbsOp : Op<AbsOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseUnary<AbsOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.abs";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// -x (+ ints)
struct NegOp : Op<NegOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               ElementwiseUnary<NegOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.neg";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// Paddle's scale: bias_after_scale ? scale·x + bias : scale·(x + bias)
// (+ ints: computed in double, truncated back).
struct ScaleOp : Op<ScaleOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.scale";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (double, scale), (double, bias), (bool, bias_after_scale));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, double scale = 1.0,
                    double bias = 0.0, bool bias_after_scale = true);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// ---- copies and conversions ----

// A copy of x in its own buffer (every dtype).
struct AssignOp : Op<AssignOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                  ElementwiseUnary<AssignOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.assign";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// x converted to `dtype` (f32, f64, i8, i32, i64, bool, either way). Float →
// integer truncates toward zero, saturates at the integer's range, NaN → 0;
// → bool is x != 0.
struct CastOp : Op<CastOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.cast";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (DataType, dtype));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, DataType dtype);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// x0 + x1 + … (one or more operands of one dtype and one shape; no
// broadcasting). Variadic: num_operands = -1.
struct AddNOp : Op<AddNOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.add_n";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = -1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& xs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
