// The math of the unary family (unary_ops.h): one struct per op with its
// name, dtypes, forward function and the derivative its gradient op
// computes, and the lists that every backend expands into kernels. Free of
// the IR, so nvcc compiles it into the CUDA kernels (KILN_HOST_DEVICE).
#pragma once

#include <cmath>
#include <string_view>
#include <type_traits>

#include "kiln/support/host_device.h"

namespace kiln {

// Which value a unary op's gradient op reads besides dout.
enum class GradReads { Input, Output };

// y = max(x, 0); dx = dout where y > 0.
struct ReluMath {
  static constexpr std::string_view name = "kiln.relu", inplace_name = "kiln.relu_";
  static constexpr bool floating_only = false;
  static constexpr GradReads grad_reads = GradReads::Output;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return x > T(0) ? x : T(0); }
  template <typename T> KILN_HOST_DEVICE static T backward(T y, T d) { return y > T(0) ? d : T(0); }
};
struct TanhMath {
  static constexpr std::string_view name = "kiln.tanh";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Output;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::tanh(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T y, T d) { return d * (T(1) - y * y); }
};
// 1 / (1 + exp(-x))
struct SigmoidMath {
  static constexpr std::string_view name = "kiln.sigmoid";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Output;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return T(1) / (T(1) + std::exp(-x)); }
  template <typename T> KILN_HOST_DEVICE static T backward(T y, T d) { return d * y * (T(1) - y); }
};
struct ExpMath {
  static constexpr std::string_view name = "kiln.exp";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Output;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::exp(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T y, T d) { return d * y; }
};
// Natural log; log(0) = -inf, log(x < 0) = NaN (IEEE, no error).
struct LogMath {
  static constexpr std::string_view name = "kiln.log";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::log(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d / x; }
};
// sqrt(x < 0) = NaN (IEEE, no error).
struct SqrtMath {
  static constexpr std::string_view name = "kiln.sqrt", inplace_name = "kiln.sqrt_";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Output;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::sqrt(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T y, T d) { return T(0.5) * d / y; }
};
struct SquareMath {
  static constexpr std::string_view name = "kiln.square";
  static constexpr bool floating_only = false;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return x * x; }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return T(2) * x * d; }
};
// |x| (|INT_MIN| wraps to INT_MIN, as numpy); dx = sign(x)·dout, 0 at 0.
struct AbsMath {
  static constexpr std::string_view name = "kiln.abs";
  static constexpr bool floating_only = false;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
    } else {
      return std::fabs(x);
    }
  }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return x > T(0) ? d : x < T(0) ? -d : T(0); }
};
struct NegMath {
  static constexpr std::string_view name = "kiln.neg";
  static constexpr bool floating_only = false;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(U(0) - static_cast<U>(x));
    } else {
      return -x;
    }
  }
  template <typename T> KILN_HOST_DEVICE static T backward(T, T d) { return -d; }
};

// Trigonometric and hyperbolic functions, erf (libm's; IEEE results outside
// the domain, no error). Their gradients read the input.
struct SinMath {
  static constexpr std::string_view name = "kiln.sin";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::sin(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d * std::cos(x); }
};
struct CosMath {
  static constexpr std::string_view name = "kiln.cos";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::cos(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return -d * std::sin(x); }
};
struct TanMath {
  static constexpr std::string_view name = "kiln.tan";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Output;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::tan(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T y, T d) { return d * (T(1) + y * y); }
};
struct AsinMath {
  static constexpr std::string_view name = "kiln.asin";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::asin(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d / std::sqrt(T(1) - x * x); }
};
struct AcosMath {
  static constexpr std::string_view name = "kiln.acos";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::acos(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return -d / std::sqrt(T(1) - x * x); }
};
struct AtanMath {
  static constexpr std::string_view name = "kiln.atan";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::atan(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d / (T(1) + x * x); }
};
struct SinhMath {
  static constexpr std::string_view name = "kiln.sinh";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::sinh(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d * std::cosh(x); }
};
struct CoshMath {
  static constexpr std::string_view name = "kiln.cosh";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::cosh(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d * std::sinh(x); }
};
struct AsinhMath {
  static constexpr std::string_view name = "kiln.asinh";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::asinh(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d / std::sqrt(x * x + T(1)); }
};
struct AcoshMath {
  static constexpr std::string_view name = "kiln.acosh";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::acosh(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d / std::sqrt(x * x - T(1)); }
};
struct AtanhMath {
  static constexpr std::string_view name = "kiln.atanh";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::atanh(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) { return d / (T(1) - x * x); }
};
// The error function; d/dx erf(x) = 2/√π · exp(-x²).
struct ErfMath {
  static constexpr std::string_view name = "kiln.erf";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::erf(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) {
    return d * T(1.1283791670955126) * std::exp(-x * x);
  }
};
// Rounding (floor, ceil, round half to even as ONNX and numpy) and sign:
// piecewise constant, so their gradient is zero.
struct FloorMath {
  static constexpr std::string_view name = "kiln.floor";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::floor(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T, T) { return T(0); }
};
struct CeilMath {
  static constexpr std::string_view name = "kiln.ceil";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::ceil(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T, T) { return T(0); }
};
struct RoundMath {
  static constexpr std::string_view name = "kiln.round";
  static constexpr bool floating_only = true;
  static constexpr GradReads grad_reads = GradReads::Input;
  // nearbyint under the default rounding mode: half to even.
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return std::nearbyint(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T, T) { return T(0); }
};
// -1, 0 or 1 (NaN stays NaN).
struct SignMath {
  static constexpr std::string_view name = "kiln.sign";
  static constexpr bool floating_only = false;
  static constexpr GradReads grad_reads = GradReads::Input;
  template <typename T> KILN_HOST_DEVICE static T forward(T x) {
    if constexpr (std::is_floating_point_v<T>)
      if (x != x) return x;
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
  }
  template <typename T> KILN_HOST_DEVICE static T backward(T, T) { return T(0); }
};

// gelu (unary_ops.h's GeluOp, an op of its own: its `approximate` attribute
// picks the form). forward(x) and backward(x, dout) from the input.
// Exact: x·Φ(x), dx = dout·(Φ(x) + x·φ(x)). The CPU's f32 kernels compute Φ
// and φ from one vectorized exp instead (their own kernels, same math).
struct GeluErfMath {
  template <typename T> KILN_HOST_DEVICE static T cdf(T x) {
    return T(0.5) * std::erfc(-x * T(0.70710678118654752440));  // Φ(x), 1/√2
  }
  template <typename T> KILN_HOST_DEVICE static T forward(T x) { return x * cdf(x); }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) {
    const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);  // φ(x), 1/√(2π)
    return d * (cdf(x) + x * pdf);
  }
};
// The tanh form: 0.5·x·(1 + tanh(k·(x + c·x³))), k = √(2/π), c = 0.044715.
struct GeluTanhMath {
  template <typename T> KILN_HOST_DEVICE static T forward(T x) {
    const T k = T(0.79788456080286535588);
    return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
  }
  template <typename T> KILN_HOST_DEVICE static T backward(T x, T d) {
    const T k = T(0.79788456080286535588), c = T(0.044715);
    const T t = std::tanh(k * (x + c * x * x * x));
    return d * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
  }
};

template <typename... Maths>
struct MathList {};
// The family: what kernels expand, per backend.
using UnaryFamily =
    MathList<ReluMath, TanhMath, SigmoidMath, ExpMath, LogMath, SqrtMath, SquareMath, AbsMath,
             NegMath, SinMath, CosMath, TanMath, AsinMath, AcosMath, AtanMath, SinhMath, CoshMath,
             AsinhMath, AcoshMath, AtanhMath, ErfMath, FloorMath, CeilMath, RoundMath, SignMath>;
using InplaceUnaryFamily = MathList<ReluMath, SqrtMath>;

}  // namespace kiln
