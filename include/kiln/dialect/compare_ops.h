// Comparisons, logic and selection. Comparisons (equal … greater_equal) and
// the logical binaries (logical_and / or / xor) are families declared once as
// lists of math structs, broadcasting numpy-style and giving bool results
// (no gradient: backward never follows a bool value). Also logical_not,
// isnan / isfinite, where(cond, x, y), clip (torch.clamp), masked_fill and
// triu / tril on the last two dims — these with their Vjps.
#pragma once

#include <cmath>

#include "kiln/dialect/grad_op.h"

namespace kiln {

// ---- comparisons: out = forward(x, y) as bool, broadcast ----
// f32, f64, i32, i64; equal / not_equal take bool too.

struct EqualMath {
  static constexpr std::string_view name = "kiln.equal";
  static constexpr bool allows_bool = true;
  template <typename T> static bool forward(T a, T b) { return a == b; }
};
struct NotEqualMath {
  static constexpr std::string_view name = "kiln.not_equal";
  static constexpr bool allows_bool = true;
  template <typename T> static bool forward(T a, T b) { return a != b; }
};
struct LessThanMath {
  static constexpr std::string_view name = "kiln.less_than";
  static constexpr bool allows_bool = false;
  template <typename T> static bool forward(T a, T b) { return a < b; }
};
struct LessEqualMath {
  static constexpr std::string_view name = "kiln.less_equal";
  static constexpr bool allows_bool = false;
  template <typename T> static bool forward(T a, T b) { return a <= b; }
};
struct GreaterThanMath {
  static constexpr std::string_view name = "kiln.greater_than";
  static constexpr bool allows_bool = false;
  template <typename T> static bool forward(T a, T b) { return a > b; }
};
struct GreaterEqualMath {
  static constexpr std::string_view name = "kiln.greater_equal";
  static constexpr bool allows_bool = false;
  template <typename T> static bool forward(T a, T b) { return a >= b; }
};

// ---- logical binaries: bool × bool → bool, broadcast ----

struct LogicalAndMath {
  static constexpr std::string_view name = "kiln.logical_and";
  static bool forward(bool a, bool b) { return a & b; }
};
struct LogicalOrMath {
  static constexpr std::string_view name = "kiln.logical_or";
  static bool forward(bool a, bool b) { return a | b; }
};
struct LogicalXorMath {
  static constexpr std::string_view name = "kiln.logical_xor";
  static bool forward(bool a, bool b) { return a ^ b; }
};

// ---- float predicates: float → bool, elementwise ----

struct IsNanMath {
  static constexpr std::string_view name = "kiln.isnan";
  template <typename T> static bool forward(T x) { return x != x; }
};
struct IsFiniteMath {
  static constexpr std::string_view name = "kiln.isfinite";
  // x - x is 0 for finite x, NaN for ±inf and NaN (vectorizes; no libm call).
  template <typename T> static bool forward(T x) { return (x - x) == T(0); }
};

namespace detail {
std::vector<Type> infer_compare(std::string_view op, const std::vector<Type>& in, bool allows_bool);
std::vector<Type> infer_logical(std::string_view op, const std::vector<Type>& in);
std::vector<Type> infer_predicate(std::string_view op, const std::vector<Type>& in);
}  // namespace detail

template <typename Math>
struct CompareOp : Op<CompareOp<Math>, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op<CompareOp, ReadOnly, ValueSemantics, InferMetaInterface>::Op;
  static constexpr std::string_view name = Math::name;
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x, Value y) {
    arg.add_operand(x);
    arg.add_operand(y);
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return detail::infer_compare(name, in, Math::allows_bool);
  }
};

template <typename Math>
struct LogicalOp : Op<LogicalOp<Math>, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op<LogicalOp, ReadOnly, ValueSemantics, InferMetaInterface>::Op;
  static constexpr std::string_view name = Math::name;
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x, Value y) {
    arg.add_operand(x);
    arg.add_operand(y);
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return detail::infer_logical(name, in);
  }
};

// f32, f64 → bool of the same shape.
template <typename Math>
struct PredicateOp : Op<PredicateOp<Math>, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op<PredicateOp, ReadOnly, ValueSemantics, InferMetaInterface>::Op;
  static constexpr std::string_view name = Math::name;
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return detail::infer_predicate(name, in);
  }
};

using EqualOp = CompareOp<EqualMath>;
using NotEqualOp = CompareOp<NotEqualMath>;
using LessThanOp = CompareOp<LessThanMath>;
using LessEqualOp = CompareOp<LessEqualMath>;
using GreaterThanOp = CompareOp<GreaterThanMath>;
using GreaterEqualOp = CompareOp<GreaterEqualMath>;
using LogicalAndOp = LogicalOp<LogicalAndMath>;
using LogicalOrOp = LogicalOp<LogicalOrMath>;
using LogicalXorOp = LogicalOp<LogicalXorMath>;
using IsNanOp = PredicateOp<IsNanMath>;
using IsFiniteOp = PredicateOp<IsFiniteMath>;

template <typename... Maths>
struct CompareMathList {};
using CompareFamily = CompareMathList<EqualMath, NotEqualMath, LessThanMath, LessEqualMath,
                                      GreaterThanMath, GreaterEqualMath>;
using LogicalFamily = CompareMathList<LogicalAndMath, LogicalOrMath, LogicalXorMath>;
using PredicateFamily = CompareMathList<IsNanMath, IsFiniteMath>;

// not x (bool → bool).
struct LogicalNotOp : Op<LogicalNotOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.logical_not";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute);
};

// out = cond ? x : y, the three broadcast together; cond bool, x and y of one
// dtype (f32, f64, i32, i64, bool). dx = where(cond, dout, 0) summed to x's
// shape, dy = where(cond, 0, dout) summed to y's (composed, no grad op).
struct WhereOp : Op<WhereOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.where";
  static constexpr int num_operands = 3, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value cond, Value x, Value y);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// min(max(x, min), max) elementwise (torch.clamp: when min > max every
// element becomes max; NaN stays NaN). f32, f64 and the integers (the bounds are
// converted to the element type). clip_grad(x, dout) -> dx = dout where
// min <= x <= max, else 0.
struct ClipOp : Op<ClipOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.clip";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((double, min), (double, max));
  static void build(Builder&, OperationArgument& arg, Value x, double min, double max);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// out = x with `value` where mask (bool, broadcast to x's shape; the result
// has x's shape). f32, f64, i32, i64. dx = masked_fill(dout, mask, 0).
struct MaskedFillOp
    : Op<MaskedFillOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.masked_fill";
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((double, value));
  static void build(Builder&, OperationArgument& arg, Value x, Value mask, double value);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// ---- triu / tril: keep one triangle of the last two dims, zero the rest ----
// Element (i, j) of each matrix is kept when j - i >= diagonal (triu) or
// j - i <= diagonal (tril), as torch.triu / torch.tril. Rank >= 2; f32, f64,
// i32, i64, bool. The gradient is the same op applied to dout.

struct TriuMath {
  static constexpr std::string_view name = "kiln.triu";
  static constexpr bool upper = true;  // keeps j - i >= diagonal
};
struct TrilMath {
  static constexpr std::string_view name = "kiln.tril";
  static constexpr bool upper = false;  // keeps j - i <= diagonal
};

namespace detail {
std::vector<Type> infer_triangle(std::string_view op, const std::vector<Type>& in);
}  // namespace detail

template <typename Math>
struct TriangleOp
    : Op<TriangleOp<Math>, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op<TriangleOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>::Op;
  static constexpr std::string_view name = Math::name;
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, diagonal));
  static void build(Builder&, OperationArgument& arg, Value x, std::int64_t diagonal = 0) {
    arg.add_operand(x);
    arg.attributes = to_named_attributes(Attributes{diagonal});
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
    (void)from_attributes<Attributes>(attrs, name);
    return detail::infer_triangle(name, in);
  }
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads) {
    Value d = vjp::single_grad(op, out_grads);
    if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
    std::int64_t diagonal = from_attributes<Attributes>(op->attributes(), name).diagonal;
    return {b.create<TriangleOp>(d, diagonal).result()};
  }
};

using TriuOp = TriangleOp<TriuMath>;
using TrilOp = TriangleOp<TrilMath>;

}  // namespace kiln
