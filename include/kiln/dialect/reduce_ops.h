// Reductions over axes: sum, mean, max (seed 001's reduce_sum / reduce_mean /
// reduce_max). Attributes: `axis` — the axes to reduce (negative ones count
// from the end; empty = every axis) — and `keepdim` (reduced axes stay as 1).
#pragma once

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

// The reduced axes in [0, rank), sorted; kiln::Error naming the op for an
// axis out of [-rank, rank) or one given twice. Empty `axes` = all axes.
std::vector<int> normalize_reduce_axes(std::string_view op, const std::vector<std::int64_t>& axes,
                                       int rank);
// Result type of a reduction (shared by sum / mean / max).
std::vector<Type> infer_reduce(std::string_view op, const std::vector<Type>& in,
                               const std::vector<std::int64_t>& axis, bool keepdim,
                               bool floating_only);

template <typename ConcreteOp, bool FloatingOnly = false>
struct Reduction {
  static constexpr int num_operands = 1, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::vector<std::int64_t>, axis), (bool, keepdim));
  };
  static void build(Builder&, OperationArgument& arg, Value x,
                    const std::vector<std::int64_t>& axis = {}, bool keepdim = false) {
    arg.add_operand(x);
    arg.attributes = to_named_attributes(Attributes{axis, keepdim});
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
    auto a = from_attributes<Attributes>(attrs, ConcreteOp::name);
    return infer_reduce(ConcreteOp::name, in, a.axis, a.keepdim, FloatingOnly);
  }
};

// Σ over the axes (f32, f64, i32, i64; result in the input dtype). Empty
// axes sum to 0.
struct SumOp : Op<SumOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               Reduction<SumOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sum";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  using Reduction::Attributes;
};

// Mean over the axes (f32, f64). The mean of no elements is NaN.
struct MeanOp : Op<MeanOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                Reduction<MeanOp, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.mean";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  using Reduction::Attributes;
};

// Max over the axes (f32, f64, i32, i64); NaN wins. Reducing an axis of
// extent 0 is a kiln::Error naming the op.
struct MaxOp : Op<MaxOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               Reduction<MaxOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.max";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  using Reduction::Attributes;
};

}  // namespace kiln
