// Reductions over axes: sum, mean, max, prod (seed 001's reduce_sum /
// reduce_mean / reduce_max / reduce_prod). Attributes: `axis` — the axes to reduce (negative ones count
// from the end; empty = every axis) — and `keepdim` (reduced axes stay as 1).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {

// The reduced axes in [0, rank), sorted; kiln::Error naming the op for an
// axis out of [-rank, rank) or one given twice. Empty `axes` = all axes.
std::vector<int> normalize_reduce_axes(std::string_view op, const std::vector<std::int64_t>& axes,
                                       int rank);
// Result type of a reduction (shared by sum / mean / max).
std::vector<Type> infer_reduce(std::string_view op, const std::vector<Type>& in,
                               const std::vector<std::int64_t>& axis, bool keepdim,
                               bool floating_only);

namespace detail {
// Shape checks of the reductions' gradient ops: dout (and max's out) of x's
// reduced shape under the forward op's axis / keepdim.
void check_reduction_grad(std::string_view op, const std::vector<Type>& in,
                          DictionaryAttribute attrs);
}  // namespace detail

template <typename ConcreteOp, bool FloatingOnly = false>
struct Reduction {
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, axis), (bool, keepdim));
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
// axes sum to 0. sum_grad(x, dout): dout broadcast back to x's dims.
struct SumOp : Op<SumOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               Reduction<SumOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sum";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  using Reduction::Attributes;
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute a) {
      detail::check_reduction_grad(op, in, a);
    }
  };
};

// Mean over the axes (f32, f64). The mean of no elements is NaN.
// mean_grad(x, dout): sum_grad / (elements reduced).
struct MeanOp : Op<MeanOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                Reduction<MeanOp, true> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.mean";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  using Reduction::Attributes;
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute a) {
      detail::check_reduction_grad(op, in, a);
    }
  };
};

// Max over the axes (f32, f64, i32, i64); NaN wins. Reducing an axis of
// extent 0 is a kiln::Error naming the op. max_grad(x, out, dout): dout to
// the elements equal to the max, split evenly among ties.
struct MaxOp : Op<MaxOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
               Reduction<MaxOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.max";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  using Reduction::Attributes;
  struct Grad : GradSpec<3, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute a) {
      detail::check_reduction_grad(op, in, a);
    }
  };
};

// Π over the axes (f32, f64, i32, i64; result in the input dtype). Empty
// axes multiply to 1. prod_grad(x, dout): dout times the product of the
// other elements of x's group (exact where x holds zeros).
struct ProdOp : Op<ProdOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                Reduction<ProdOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.prod";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  using Reduction::Attributes;
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute a) {
      detail::check_reduction_grad(op, in, a);
    }
  };
};

}  // namespace kiln
