// Broadcasting binary elementwise ops (numpy rules), one family declared once
// as a list of math structs (binary_math.h) — name, dtypes, forward(a, b)
// shared by every backend's kernels (kernels/cpu/binary.cc,
// kernels/cuda/binary.cu), and the gradient of each operand in the
// broadcast shape — plus add_n. The remainders mod (the
// divisor's sign) and fmod (the dividend's sign) are members too.
#pragma once

#include <cmath>
#include <type_traits>
#include <utility>

#include "kiln/dialect/binary_math.h"
#include "kiln/dialect/grad_op.h"

namespace kiln {

namespace detail {
std::vector<Type> infer_binary(std::string_view op, const std::vector<Type>& in,
                               bool floating_only, bool integer_only = false);
std::vector<Value> binary_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads,
                              BinaryGrads (*grads)(Builder&, Operation*, Value));
// (dx, dy) = <op>_grad(x, y, dout): both in dout's (broadcast) shape.
struct MinMaxGradSpec : GradSpec<3, 2, 2> {
  static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute);
};
}  // namespace detail

// out = Math::forward(x, y), broadcast; both operands of one dtype: floats
// (f32, f64; f16 and bf16 computed in f32) and integers (i8 to u64) unless
// floating_only; integers only where integer_only.
template <typename Math>
struct BinaryOp
    : Op<BinaryOp<Math>, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op<BinaryOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>::Op;
  using Grad = detail::MinMaxGradSpec;  // used by maximum / minimum only
  static constexpr std::string_view name = Math::name;
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x, Value y) {
    arg.add_operand(x);
    arg.add_operand(y);
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return detail::infer_binary(name, in, Math::floating_only, integer_only_math<Math>);
  }
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
    return detail::binary_vjp(b, op, g, &Math::grads);
  }
};

using AddOp = BinaryOp<AddMath>;
using SubOp = BinaryOp<SubMath>;
using MulOp = BinaryOp<MulMath>;
using DivOp = BinaryOp<DivMath>;
using MaximumOp = BinaryOp<MaximumMath>;
using MinimumOp = BinaryOp<MinimumMath>;
using PowOp = BinaryOp<PowMath>;
using ModOp = BinaryOp<ModMath>;
using FmodOp = BinaryOp<FmodMath>;
using ShiftLeftOp = BinaryOp<ShiftLeftMath>;
using ShiftRightOp = BinaryOp<ShiftRightMath>;


// x0 + x1 + … (one or more operands of one dtype and one shape; no
// broadcasting). Variadic: num_operands = -1. Every operand gets dout.
struct AddNOp : Op<AddNOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.add_n";
  static constexpr int num_operands = -1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& xs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

}  // namespace kiln
