// The shared InferMeta of GradOf<Fwd> and the helpers every Vjp uses
// (kiln/dialect/grad_op.h).
#include "kiln/dialect/grad_op.h"
#include "kiln/dialect/tensor_array_ops.h"

#include <algorithm>

#include "kiln/dialect/tensor_ops.h"

namespace kiln {

namespace detail {

std::vector<Type> infer_grad(std::string_view op, const std::vector<Type>& in, int num_operands,
                             const int* results_like, std::size_t num_results) {
  if (num_operands >= 0) meta::require_count(op, in, static_cast<std::size_t>(num_operands));
  for (std::size_t i = 0; i < in.size(); ++i) (void)meta::tensor_operand(op, in, i);
  std::vector<Type> out;
  out.reserve(num_results);
  for (std::size_t r = 0; r < num_results; ++r) {
    auto i = static_cast<std::size_t>(results_like[r]);
    Type t = meta::tensor_operand(op, in, i);
    meta::require_floating(op, shaped_data_type(t), i);
    out.push_back(meta::result_like(in, shaped_data_type(t), shaped_dims(t)));
  }
  return out;
}

}  // namespace detail

namespace vjp {

bool differentiable(Value v) {
  if (!v) return false;
  Type t = v.type();
  if (is_tensor_array(t)) return is_floating(t.cast<TensorArrayType>().data_type());
  return t && is_shaped(t) && is_floating(shaped_data_type(t));
}

bool all_null(const std::vector<Value>& out_grads) {
  return std::none_of(out_grads.begin(), out_grads.end(), [](Value v) { return bool(v); });
}

void check_out_grads(Operation* op, const std::vector<Value>& out_grads) {
  if (out_grads.size() != op->num_results())
    throw_error(ErrorKind::InvalidArgument, "vjp of op '", op->name(), "' needs one output ",
                "gradient (or a null Value) per result: ", op->num_results(), " results, got ",
                out_grads.size());
}

Value single_grad(Operation* op, const std::vector<Value>& out_grads) {
  check_out_grads(op, out_grads);
  return out_grads[0];
}

namespace {
bool fully_known(const std::vector<std::int64_t>& d) {
  return std::all_of(d.begin(), d.end(), [](std::int64_t v) { return v >= 0; });
}
}  // namespace

Value reduce_to(Builder& b, Value grad, Value operand) {
  const auto& g = shaped_dims(grad.type());
  const auto& x = shaped_dims(operand.type());
  if (g == x && fully_known(x)) return grad;
  return b.create<ReduceAsOp>(grad, operand).result();
}

Value reduce_to_operand(Builder& b, Value grad, Value operand, Value other) {
  const auto& g = shaped_dims(grad.type());
  const auto& x = shaped_dims(operand.type());
  const auto& y = shaped_dims(other.type());
  // grad has the broadcast shape of x and y. It is x's shape for certain
  // when every dim of x is known and equal to grad's, or unknown with y's
  // aligned dim 1 or absent (then the result's dim is x's at run time).
  bool same = g.size() == x.size();
  for (std::size_t i = 0; same && i < x.size(); ++i) {
    std::size_t from_end = x.size() - i;
    std::int64_t yd = from_end <= y.size() ? y[y.size() - from_end] : 1;
    if (x[i] >= 0) same = g[i] == x[i];
    else same = yd == 1;
  }
  if (same) return grad;
  return b.create<ReduceAsOp>(grad, operand).result();
}

Value zeros(Builder& b, Value like) {
  Type t = like.type();
  if (is_tensor_array(t)) {  // an array's zero: no elements
    auto a = t.cast<TensorArrayType>();
    return b.create<ArrayCreateOp>(a.data_type(), a.dims()).result();
  }
  const auto& d = shaped_dims(t);
  if (fully_known(d)) return b.create<FullOp>(d, 0.0, shaped_data_type(t)).result();
  return b.create<ZerosLikeOp>(like).result();
}

}  // namespace vjp

}  // namespace kiln
