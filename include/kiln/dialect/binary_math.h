// The math of the broadcasting binary family (binary_ops.h): one struct
// per op with its name, dtypes, forward function and gradients, and the list
// every backend expands into kernels. Free of the IR (the gradient builders
// are only declared), so nvcc compiles it into the CUDA kernels.
#pragma once

#include <cmath>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kiln/support/host_device.h"

namespace kiln {

class Builder;
class Operation;
class Value;

// The gradients (dx, dy) of a binary op in its broadcast result's shape (null
// where an operand needs none); the op's Vjp sums them back to x's and y's.
using BinaryGrads = std::pair<Value, Value>;

struct AddMath {
  static constexpr std::string_view name = "kiln.add";
  static constexpr bool floating_only = false;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) { return a + b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
struct SubMath {
  static constexpr std::string_view name = "kiln.sub";
  static constexpr bool floating_only = false;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) { return a - b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
struct MulMath {
  static constexpr std::string_view name = "kiln.mul";
  static constexpr bool floating_only = false;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) { return a * b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
// Integers divide truncating toward zero (C++); an integer division by zero
// is a kiln::Error naming the op (the kernels check before the loop).
struct DivMath {
  static constexpr std::string_view name = "kiln.div";
  static constexpr bool floating_only = false;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // b == -1 negates (wrapping) so that MIN / -1 does not trap.
      using U = std::make_unsigned_t<T>;
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return static_cast<T>(U(0) - static_cast<U>(a));
      return static_cast<T>(a / b);
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
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) { return (a > b || a != a) ? a : b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
struct MinimumMath {
  static constexpr std::string_view name = "kiln.minimum";
  static constexpr bool floating_only = false;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) { return (a < b || a != a) ? a : b; }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
// x ** y (f32, f64).
struct PowMath {
  static constexpr std::string_view name = "kiln.pow";
  static constexpr bool floating_only = true;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) { return std::pow(a, b); }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};

namespace detail {
// The remainder of a / b truncated toward zero (C's % and fmod); b == -1
// gives 0 so that MIN % -1 does not trap. Integer b must not be 0.
template <typename T> KILN_HOST_DEVICE T truncated_remainder(T a, T b) {
  if constexpr (std::is_signed_v<T> && std::is_integral_v<T>) return b == -1 ? T(0) : static_cast<T>(a % b);
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(a % b);
  else return std::fmod(a, b);
}
}  // namespace detail

// x mod y with the sign of y (Python's %, numpy.mod; ONNX Mod with fmod = 0);
// exact for integers. An integer mod by zero is a kiln::Error naming the op
// (as div). Gradients: dx = dout, dy = -dout·(x - out) / y.
struct ModMath {
  static constexpr std::string_view name = "kiln.mod";
  static constexpr bool floating_only = false;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) {
    const T r = detail::truncated_remainder(a, b);
    if constexpr (std::is_unsigned_v<T>) return r;
    else return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
  }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};
// x mod y with the sign of x (C's fmod and %; ONNX Mod with fmod = 1).
// Integer mod by zero: a kiln::Error naming the op. Gradients as mod's.
struct FmodMath {
  static constexpr std::string_view name = "kiln.fmod";
  static constexpr bool floating_only = false;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) { return detail::truncated_remainder(a, b); }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);
};

// x << y and x >> y, elementwise on integers (ONNX BitShift; numpy's
// left_shift / right_shift). A count outside [0, width) shifts every bit
// out: 0, or -1 for a negative x shifted right. No gradient.
struct ShiftLeftMath {
  static constexpr std::string_view name = "kiln.shift_left";
  static constexpr bool floating_only = false;
  static constexpr bool integer_only = true;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return static_cast<U>(b) >= sizeof(T) * 8 ? T(0) : static_cast<T>(static_cast<U>(a) << b);
  }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);  // none
};
struct ShiftRightMath {
  static constexpr std::string_view name = "kiln.shift_right";
  static constexpr bool floating_only = false;
  static constexpr bool integer_only = true;
  template <typename T> KILN_HOST_DEVICE static T forward(T a, T b) {
    using U = std::make_unsigned_t<T>;
    if (static_cast<U>(b) >= sizeof(T) * 8) {
      if constexpr (std::is_signed_v<T>) return a < T(0) ? T(-1) : T(0);
      else return T(0);
    }
    return static_cast<T>(a >> b);
  }
  static BinaryGrads grads(Builder& b, Operation* op, Value dout);  // none
};

// Whether a Math computes on integers only (the shifts).
template <typename Math>
consteval bool integer_only_of() {
  if constexpr (requires { Math::integer_only; }) return Math::integer_only;
  else return false;
}
template <typename Math>
inline constexpr bool integer_only_math = integer_only_of<Math>();

template <typename... Maths>
struct BinaryMathList {};
using BinaryFamily =
    BinaryMathList<AddMath, SubMath, MulMath, DivMath, MaximumMath, MinimumMath, PowMath, ModMath,
                   FmodMath, ShiftLeftMath, ShiftRightMath>;

}  // namespace kiln
