// Comparisons, logic and selection. Comparisons (equal … greater_equal) and
// the logical binaries (logical_and / or / xor) are families declared once as
// lists of math structs, broadcasting numpy-style and giving bool results
// (no gradient: backward never follows a bool value). Also logical_not,
// isnan / isfinite, where(cond, x, y), clip (torch.clamp), masked_fill and
// triu / tril on the last two dims — these with their Vjps.
#pragma once

#include <cmath>

#include "kiln/dialect/compare_math.h"
#include "kiln/dialect/grad_op.h"

namespace kiln {

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
// converted to the element type), bf16 and f16 (compared in f32, a bound
// rounded once where it is the result). clip_grad(x, dout) -> dx = dout
// where min <= x <= max, else 0.
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
