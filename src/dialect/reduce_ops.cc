#include "kiln/dialect/reduce_ops.h"

#include <algorithm>

namespace kiln {

KILN_REGISTER_OP(SumOp, GradOf<SumOp>, MeanOp, GradOf<MeanOp>, MaxOp, GradOf<MaxOp>, ProdOp,
                 GradOf<ProdOp>);

std::vector<int> normalize_reduce_axes(std::string_view op, const std::vector<std::int64_t>& axes,
                                       int rank) {
  std::vector<int> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (std::int64_t a : axes) {
    if (a < -rank || a >= rank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", a,
                  " is out of range for rank ", rank, " (expected [", -rank, ", ", rank, "))");
    int n = static_cast<int>(a < 0 ? a + rank : a);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", n, " is given twice in ",
                  meta::dims_string(axes));
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Type> infer_reduce(std::string_view op, const std::vector<Type>& in,
                               const std::vector<std::int64_t>& axis, bool keepdim,
                               bool floating_only) {
  Type x = meta::tensor_operand(op, in, 0);
  DataType dt = shaped_data_type(x);
  if (floating_only) meta::require_floating(op, dt);
  const auto& xs = shaped_dims(x);
  auto axes = normalize_reduce_axes(op, axis, static_cast<int>(xs.size()));
  std::vector<std::int64_t> out;
  for (int i = 0; i < static_cast<int>(xs.size()); ++i) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), i);
    if (!reduced) out.push_back(xs[i]);
    else if (keepdim) out.push_back(1);
  }
  return {meta::result_like(in, dt, std::move(out))};
}

// ---- reductions ----

std::vector<Value> SumOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<SumOp>>(op, op->operand_source(0), d).result()};
}

std::vector<Value> MeanOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<MeanOp>>(op, op->operand_source(0), d).result()};
}

std::vector<Value> MaxOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<MaxOp>>(op, op->operand_source(0), op->result(0), d).result()};
}

std::vector<Value> ProdOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<ProdOp>>(op, op->operand_source(0), d).result()};
}

namespace detail {

void check_reduction_grad(std::string_view op, const std::vector<Type>& in,
                          DictionaryAttribute attrs) {
  auto a = from_attributes<SumOp::Attributes>(attrs, op);
  const auto& axis = a.axis;
  const bool keepdim = a.keepdim;
  Type x = meta::float_operand(op, in, 0);
  Type dout = meta::tensor_operand(op, in, in.size() - 1);
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(dout), 0, in.size() - 1);
  // dout must have the reduced shape of x.
  auto reduced = infer_reduce(op, {x}, axis, keepdim, true);
  if (!meta::compatible_dims(shaped_dims(reduced[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout ", meta::dims_string(shaped_dims(dout)),
                " must have x's reduced shape ", meta::dims_string(shaped_dims(reduced[0])));
  for (std::size_t i = 1; i + 1 < in.size(); ++i) {  // max_grad's `out`
    Type o = meta::tensor_operand(op, in, i);
    meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(o), 0, i);
    if (!meta::compatible_dims(shaped_dims(reduced[0]), shaped_dims(o)))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' out ", meta::dims_string(shaped_dims(o)),
                  " must have x's reduced shape ", meta::dims_string(shaped_dims(reduced[0])));
  }
}

}  // namespace detail

}  // namespace kiln
