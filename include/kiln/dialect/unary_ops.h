// Unary elementwise ops. The pure ones form one family, declared once as a
// list of math structs (unary_math.h): each gives the op's name, its dtypes,
// its forward function and the derivative its gradient op computes — every
// backend's kernels are expanded from the same list (kernels/cpu/unary.cc,
// kernels/cuda/unary.cu). Adding an activation is one struct there and one
// entry in UnaryFamily.
//
// Also: gelu (exact or tanh form), scale, assign, cast, and the in-place
// twins relu_ / sqrt_ (Inplace: output 0 aliases input 0, seed 002 §2.5.2).
#pragma once

#include <cmath>
#include <type_traits>

#include "kiln/dialect/grad_op.h"
#include "kiln/dialect/unary_math.h"

namespace kiln {

namespace detail {
std::vector<Type> infer_unary(std::string_view op, const std::vector<Type>& in,
                              bool floating_only);
std::vector<Type> infer_inplace_unary(std::string_view op, const std::vector<Type>& in,
                                      bool floating_only);
// The Vjp of every unary op: dx = <op>_grad(x or y, dout) (GradOf<GradOp>).
template <typename GradOp, GradReads reads>
std::vector<Value> unary_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads) {
  Value d = vjp::single_grad(op, out_grads);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value{}};
  Value a = reads == GradReads::Output ? Value(op->result(0)) : op->operand_source(0);
  return {b.create<GradOf<GradOp>>(op, a, d).result()};
}
// Shape checks of a unary gradient op: (a, dout) of one float dtype and shape.
struct UnaryGradSpec : GradSpec<2, 0> {
  static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute);
};
}  // namespace detail

// y = Math::forward(x); f32, f64 (and i32, i64 unless floating_only).
template <typename Math>
struct UnaryOp
    : Op<UnaryOp<Math>, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op<UnaryOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>::Op;
  using Grad = detail::UnaryGradSpec;
  static constexpr std::string_view name = Math::name;
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return detail::infer_unary(name, in, Math::floating_only);
  }
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
    return detail::unary_vjp<UnaryOp, Math::grad_reads>(b, op, g);
  }
};

// The in-place twin (Math::inplace_name): x = Math::forward(x); the operand
// must be a tensor (not a vtensor). Its gradient op is the out-of-place op's.
template <typename Math>
struct InplaceUnaryOp : Op<InplaceUnaryOp<Math>, Inplace, InferMetaInterface, VjpInterface> {
  using Op<InplaceUnaryOp, Inplace, InferMetaInterface, VjpInterface>::Op;
  static constexpr std::string_view name = Math::inplace_name;
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return detail::infer_inplace_unary(name, in, Math::floating_only);
  }
  // The result is a distinct SSA value holding forward(x), which is all an
  // Output-reading gradient needs.
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
    static_assert(Math::grad_reads == GradReads::Output, "x is overwritten in place");
    return detail::unary_vjp<UnaryOp<Math>, GradReads::Output>(b, op, g);
  }
};

using ReluOp = UnaryOp<ReluMath>;
using TanhOp = UnaryOp<TanhMath>;
using SigmoidOp = UnaryOp<SigmoidMath>;
using ExpOp = UnaryOp<ExpMath>;
using LogOp = UnaryOp<LogMath>;
using SqrtOp = UnaryOp<SqrtMath>;
using SquareOp = UnaryOp<SquareMath>;
using AbsOp = UnaryOp<AbsMath>;
using NegOp = UnaryOp<NegMath>;
using SinOp = UnaryOp<SinMath>;
using CosOp = UnaryOp<CosMath>;
using TanOp = UnaryOp<TanMath>;
using AsinOp = UnaryOp<AsinMath>;
using AcosOp = UnaryOp<AcosMath>;
using AtanOp = UnaryOp<AtanMath>;
using SinhOp = UnaryOp<SinhMath>;
using CoshOp = UnaryOp<CoshMath>;
using AsinhOp = UnaryOp<AsinhMath>;
using AcoshOp = UnaryOp<AcoshMath>;
using AtanhOp = UnaryOp<AtanhMath>;
using ErfOp = UnaryOp<ErfMath>;
using FloorOp = UnaryOp<FloorMath>;
using CeilOp = UnaryOp<CeilMath>;
using RoundOp = UnaryOp<RoundMath>;
using SignOp = UnaryOp<SignMath>;
using Relu_Op = InplaceUnaryOp<ReluMath>;
using Sqrt_Op = InplaceUnaryOp<SqrtMath>;


// gelu(x) = x · Φ(x). approximate = false: the exact erf form (PyTorch's
// default, approximate='none'); true: the tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). f32, f64.
struct GeluOp : Op<GeluOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gelu";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((bool, approximate));
  // gelu_grad(x, dout) {approximate}
  using Grad = detail::UnaryGradSpec;
  static void build(Builder& b, OperationArgument& arg, Value x, bool approximate = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// Paddle's scale: bias_after_scale ? scale·x + bias : scale·(x + bias)
// (+ ints: computed in double, truncated back). dx = scale·dout.
struct ScaleOp : Op<ScaleOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.scale";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((double, scale), (double, bias), (bool, bias_after_scale));
  static void build(Builder& b, OperationArgument& arg, Value x, double scale = 1.0,
                    double bias = 0.0, bool bias_after_scale = true);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// A copy of x in its own buffer (every dtype). dx = dout.
struct AssignOp : Op<AssignOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.assign";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return detail::infer_unary(name, in, false);
  }
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// x converted to `dtype` (any two dtypes, either way). Float → integer
// truncates toward zero, saturates at the integer's range, NaN → 0; integer
// → narrower integer wraps (keeps the low bits, as C and numpy); → f16 /
// bf16 rounds to nearest even; → bool is x != 0. The gradient (float →
// float) is cast back.
struct CastOp : Op<CastOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.cast";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((DataType, dtype));
  static void build(Builder& b, OperationArgument& arg, Value x, DataType dtype);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

}  // namespace kiln
