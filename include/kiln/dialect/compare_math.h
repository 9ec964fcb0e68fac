// The math of the comparison, logical and predicate families
// (compare_ops.h): one struct per op with its name and forward function, and
// the lists every backend expands into kernels. Free of the IR, so nvcc
// compiles it into the CUDA kernels (KILN_HOST_DEVICE).
#pragma once

#include <string_view>

#include "kiln/support/host_device.h"

namespace kiln {

// ---- comparisons: out = forward(x, y) as bool, broadcast ----
// f32, f64, i32, i64; equal / not_equal take bool too.

struct EqualMath {
  static constexpr std::string_view name = "kiln.equal";
  static constexpr bool allows_bool = true;
  template <typename T> KILN_HOST_DEVICE static bool forward(T a, T b) { return a == b; }
};
struct NotEqualMath {
  static constexpr std::string_view name = "kiln.not_equal";
  static constexpr bool allows_bool = true;
  template <typename T> KILN_HOST_DEVICE static bool forward(T a, T b) { return a != b; }
};
struct LessThanMath {
  static constexpr std::string_view name = "kiln.less_than";
  static constexpr bool allows_bool = false;
  template <typename T> KILN_HOST_DEVICE static bool forward(T a, T b) { return a < b; }
};
struct LessEqualMath {
  static constexpr std::string_view name = "kiln.less_equal";
  static constexpr bool allows_bool = false;
  template <typename T> KILN_HOST_DEVICE static bool forward(T a, T b) { return a <= b; }
};
struct GreaterThanMath {
  static constexpr std::string_view name = "kiln.greater_than";
  static constexpr bool allows_bool = false;
  template <typename T> KILN_HOST_DEVICE static bool forward(T a, T b) { return a > b; }
};
struct GreaterEqualMath {
  static constexpr std::string_view name = "kiln.greater_equal";
  static constexpr bool allows_bool = false;
  template <typename T> KILN_HOST_DEVICE static bool forward(T a, T b) { return a >= b; }
};

// ---- logical binaries: bool × bool → bool, broadcast ----

struct LogicalAndMath {
  static constexpr std::string_view name = "kiln.logical_and";
  KILN_HOST_DEVICE static bool forward(bool a, bool b) { return a & b; }
};
struct LogicalOrMath {
  static constexpr std::string_view name = "kiln.logical_or";
  KILN_HOST_DEVICE static bool forward(bool a, bool b) { return a | b; }
};
struct LogicalXorMath {
  static constexpr std::string_view name = "kiln.logical_xor";
  KILN_HOST_DEVICE static bool forward(bool a, bool b) { return a ^ b; }
};

// ---- float predicates: float → bool, elementwise ----

struct IsNanMath {
  static constexpr std::string_view name = "kiln.isnan";
  template <typename T> KILN_HOST_DEVICE static bool forward(T x) { return x != x; }
};
struct IsFiniteMath {
  static constexpr std::string_view name = "kiln.isfinite";
  // x - x is 0 for finite x, NaN for ±inf and NaN (vectorizes; no libm call).
  template <typename T> KILN_HOST_DEVICE static bool forward(T x) { return (x - x) == T(0); }
};

template <typename... Maths>
struct CompareMathList {};
using CompareFamily = CompareMathList<EqualMath, NotEqualMath, LessThanMath, LessEqualMath,
                                      GreaterThanMath, GreaterEqualMath>;
using LogicalFamily = CompareMathList<LogicalAndMath, LogicalOrMath, LogicalXorMath>;
using PredicateFamily = CompareMathList<IsNanMath, IsFiniteMath>;

}  // namespace kiln
