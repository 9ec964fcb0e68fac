// Broadcasting binary elementwise ops (numpy rules), one family declared once
// as a list of math structs — name, dtypes, forward(a, b) shared by every
// backend's kernels (kernels/cpu/binary.cc), and the gradient of each
// operand in the broadcast shape — plus add_n. The remainders mod (the
// divisor's sign) and fmod (the dividend's sign) are members too.
#pragma once

#include <cmath>
#include <type_traits>
#include <utility>

#include "kiln/dialect/grad_op.h"

namespace kiln {

// The gradients (dx, dy) of a binary op in its broadcast result's shape (null
// where an operand needs none); the op's Vjp sums them back to x's and y's.
using BinaryGrads = std::pair<Value, Value>;

struct AddMath {
  static constexpr std::string_view name = "kiln.add";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) { return a + b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
struct SubMath {
  static constexpr std::string_view name = "kiln.sub";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) { return a - b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
struct MulMath {
  static constexpr std::string_view name = "kiln.mul";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) { return a * b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
// Integers divide truncating toward zero (C++); an integer division by zero
// is a kiln::Error naming the op (the kernels check before the loop).
struct DivMath {
  static constexpr std::string_view name = "kiln.div";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // b == -1 negates (wrapping) so that MIN / -1 does not trap.
      using U = std::make_unsigned_t<T>;
      return b == -1 ? static_cast<T>(U(0) - static_cast<U>(a)) : static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
// max(x, y); NaN wins (as torch.maximum). The gradient goes to the larger
// operand, split in half on ties (maximum_grad).
struct MaximumMath {
  static constexpr std::string_view name = "kiln.maximum";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) { return (a > b || a != a) ? a : b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
struct MinimumMath {
  static constexpr std::string_view name = "kiln.minimum";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) { return (a < b || a != a) ? a : b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
// x ** y (f32, f64).
struct PowMath {
  static constexpr std::string_view name = "kiln.pow";
  static constexpr bool floating_only = true;
  template <typename T> static T forward(T a, T b) { return std::pow(a, b); }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};

namespace detail {
// The remainder of a / b truncated toward zero (C's % and fmod); b == -1
// gives 0 so that MIN % -1 does not trap. Integer b must not be 0.
template <typename T> T truncated_remainder(T a, T b) {
  if constexpr (std::is_integral_v<T>) return b == -1 ? T(0) : static_cast<T>(a % b);
  else return std::fmod(a, b);
}
}  // namespace detail

// x mod y with the sign of y (Python's %, numpy.mod; ONNX Mod with fmod = 0);
// exact for integers. An integer mod by zero is a kiln::Error naming the op
// (as div). Gradients: dx = dout, dy = -dout·(x - out) / y.
struct ModMath {
  static constexpr std::string_view name = "kiln.mod";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) {
    const T r = detail::truncated_remainder(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
  }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
// x mod y with the sign of x (C's fmod and %; ONNX Mod with fmod = 1).
// Integer mod by zero: a kiln::Error naming the op. Gradients as mod's.
struct FmodMath {
  static constexpr std::string_view name = "kiln.fmod";
  static constexpr bool floating_only = false;
  template <typename T> static T forward(T a, T b) { return detail::truncated_remainder(a, b); }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};

namespace detail {
std::vector<Type> infer_binary(std::string_view op, const std::vector<Type>& in,
                               bool floating_only);
std::vector<Value> binary_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads,
                              BinaryGrads (*grads)(Builder&, Operation*, Value));
// (dx, dy) = <op>_grad(x, y, dout): both in dout's (broadcast) shape.
struct MinMaxGradSpec : GradSpec<3, 2, 2> {
  static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute);
};
}  // namespace detail

// out = Math::forward(x, y), broadcast; f32, f64 (and i32, i64 unless
// floating_only); both operands of one dtype.
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
    return detail::infer_binary(name, in, Math::floating_only);
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

template <typename... Maths>
struct BinaryMathList {};
using BinaryFamily =
    BinaryMathList<AddMath, SubMath, MulMath, DivMath, MaximumMath, MinimumMath, PowMath, ModMath,
                   FmodMath>;

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
