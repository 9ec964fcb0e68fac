// The ops of kiln/dialect/norm_ops.h: InferMeta, Vjp, gradient ops and
// registration.
#include "kiln/dialect/norm_ops.h"

#include <cmath>
#include <initializer_list>
#include <string>

#include "kiln/dialect/data_format.h"

namespace kiln {

KILN_REGISTER_OP(LayerNormOp, GradOf<LayerNormOp>, RmsNormOp, GradOf<RmsNormOp>, BatchNormOp,
                 GradOf<BatchNormOp>, FusedBatchNormOp, GradOf<FusedBatchNormOp>);

namespace {

// The product of dims (-1 when any is unknown).
std::int64_t product(const std::vector<std::int64_t>& d, std::size_t from, std::size_t to) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < to; ++i) {
    if (d[i] < 0) return -1;
    n *= d[i];
  }
  return n;
}

void check_epsilon(std::string_view op, double epsilon) {
  if (!(epsilon > 0) || std::isinf(epsilon))
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' attribute epsilon must be finite and > 0, got ", epsilon);
}

// x's rows for layer_norm / rms_norm: the normalized axis in [1, rank).
std::size_t norm_axis(std::string_view op, const std::vector<std::int64_t>& xd,
                      std::int64_t begin_norm_axis) {
  const auto rank = static_cast<std::int64_t>(xd.size());
  std::int64_t a = begin_norm_axis < 0 ? begin_norm_axis + rank : begin_norm_axis;
  if (rank < 1 || a < 0 || a >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' begin_norm_axis ", begin_norm_axis,
                " is out of range for x ", meta::dims_string(xd), " of rank ", rank,
                " (expected [", -rank, ", ", rank, "), with rank >= 1)");
  return static_cast<std::size_t>(a);
}

// operand i (weight / bias) must be shaped like the normalized dims of x, or
// flattened to [N]; and have x's dtype.
void check_affine(std::string_view op, const std::vector<Type>& in, std::size_t i,
                  std::string_view what, const std::vector<std::int64_t>& xd, std::size_t axis) {
  Type t = meta::tensor_operand(op, in, i);
  meta::require_same_dtype(op, shaped_data_type(in[0]), shaped_data_type(t), 0, i);
  const auto& wd = shaped_dims(t);
  std::vector<std::int64_t> norm(xd.begin() + static_cast<std::ptrdiff_t>(axis), xd.end());
  const std::int64_t n = product(xd, axis, xd.size());
  if (meta::compatible_dims(wd, norm)) return;
  if (wd.size() == 1 && (wd[0] == n || wd[0] < 0 || n < 0)) return;
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i, ") ",
              meta::dims_string(wd), " does not match the normalized shape ",
              meta::dims_string(norm), " of x ", meta::dims_string(xd), " (expected ",
              meta::dims_string(norm), " or [", n, "])");
}

// The [M] statistics' type for layer_norm / rms_norm.
Type stats_type(const std::vector<Type>& in, const std::vector<std::int64_t>& xd,
                std::size_t axis) {
  return meta::result_like(in, norm_stats_dtype(shaped_data_type(in[0])), {product(xd, 0, axis)});
}

// The statistics operand (mean / rstd) of a gradient op: norm_stats_dtype
// of x's, [M].
void check_stats(std::string_view op, const std::vector<Type>& in, std::size_t i,
                 std::string_view what, std::int64_t m) {
  const DataType want = norm_stats_dtype(shaped_data_type(in[0])), got = shaped_data_type(in[i]);
  if (got != want)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i, ") is ", to_string(got),
                ", expected ", to_string(want), " for x of ", to_string(shaped_data_type(in[0])));
  const auto& d = shaped_dims(in[i]);
  if (!meta::compatible_dims(d, {m}))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i, ") ",
                meta::dims_string(d), " must be [", m, "]");
}

// batch_norm's per-channel operand i: batch_norm_param_dtype of x's, [C].
void check_channel(std::string_view op, const std::vector<Type>& in, std::size_t i,
                   std::string_view what, std::int64_t c) {
  Type t = meta::tensor_operand(op, in, i);
  const DataType x = shaped_data_type(in[0]), want = batch_norm_param_dtype(x), got = shaped_data_type(t);
  if (got != want)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i, ") is ", to_string(got),
                ", expected ", to_string(want), " for x (operand #0) of ", to_string(x));
  const auto& d = shaped_dims(t);
  if (!meta::compatible_dims(d, {c}))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i, ") ",
                meta::dims_string(d), " must be [C] = [", c, "] (C: dim 1 of x)");
}

// batch_norm's x: a floating tensor of rank >= 2 ([N, C, ...]).
const std::vector<std::int64_t>& batch_norm_x(std::string_view op, const std::vector<Type>& in) {
  Type x = meta::float_operand(op, in, 0);
  const auto& xd = shaped_dims(x);
  if (xd.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must have rank >= 2 ([N, C, ...]), got ",
                meta::dims_string(xd));
  return xd;
}

// batch_norm's channel count: x's axis 1, or its last axis for NHWC (rank 4 only).
std::int64_t batch_norm_channels(std::string_view op, const std::vector<std::int64_t>& xd,
                                 const std::string& format) {
  if (!data_format::channels_last(op, format)) return xd[1];
  if (xd.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' data_format NHWC needs a rank-4 x ([N, H, W, C]), got ",
                meta::dims_string(xd));
  return xd[3];
}

// The grad of operand i when it is differentiable, else null.
Value if_differentiable(Operation* op, std::uint32_t i, Value g) {
  return vjp::differentiable(op->operand_source(i)) ? g : Value();
}

}  // namespace

// ---- layer_norm ----

void LayerNormOp::build(Builder&, OperationArgument& arg, Value x, Value weight, Value bias,
                        std::int64_t begin_norm_axis, double epsilon) {
  arg.add_operand(x);
  arg.add_operand(weight);
  arg.add_operand(bias);
  arg.attributes = to_named_attributes(Attributes{begin_norm_axis, epsilon});
}

std::vector<Type> LayerNormOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 3);
  Type x = meta::float_operand(name, in, 0);
  const auto& xd = shaped_dims(x);
  const std::size_t axis = norm_axis(name, xd, a.begin_norm_axis);
  check_epsilon(name, a.epsilon);
  check_affine(name, in, 1, "weight", xd, axis);
  check_affine(name, in, 2, "bias", xd, axis);
  if (!meta::compatible_dims(shaped_dims(in[1]), shaped_dims(in[2])))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' weight ",
                meta::dims_string(shaped_dims(in[1])), " and bias ",
                meta::dims_string(shaped_dims(in[2])), " must have one shape");
  Type s = stats_type(in, xd, axis);
  return {meta::result_like(in, shaped_data_type(x), xd), s, s};
}

void LayerNormOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                              DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, op);
  Type x = meta::float_operand(op, in, 0);
  const auto& xd = shaped_dims(x);
  const std::size_t axis = norm_axis(op, xd, a.begin_norm_axis);
  check_epsilon(op, a.epsilon);
  check_affine(op, in, 1, "weight", xd, axis);
  const std::int64_t m = product(xd, 0, axis);
  check_stats(op, in, 2, "mean", m);
  check_stats(op, in, 3, "rstd", m);
  meta::require_like(op, in, 0, 4);
}

std::vector<Value> LayerNormOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(3);
  if (!g[0]) return grads;
  auto grad = b.create<GradOf<LayerNormOp>>(op, op->operand_source(0), op->operand_source(1),
                                            op->result(1), op->result(2), g[0]);
  for (std::uint32_t i = 0; i < 3; ++i) grads[i] = if_differentiable(op, i, grad.result(i));
  return grads;
}

// ---- rms_norm ----

void RmsNormOp::build(Builder&, OperationArgument& arg, Value x, Value weight,
                      std::int64_t begin_norm_axis, double epsilon) {
  arg.add_operand(x);
  arg.add_operand(weight);
  arg.attributes = to_named_attributes(Attributes{begin_norm_axis, epsilon});
}

std::vector<Type> RmsNormOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::float_operand(name, in, 0);
  const auto& xd = shaped_dims(x);
  const std::size_t axis = norm_axis(name, xd, a.begin_norm_axis);
  check_epsilon(name, a.epsilon);
  check_affine(name, in, 1, "weight", xd, axis);
  return {meta::result_like(in, shaped_data_type(x), xd), stats_type(in, xd, axis)};
}

void RmsNormOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                            DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, op);
  Type x = meta::float_operand(op, in, 0);
  const auto& xd = shaped_dims(x);
  const std::size_t axis = norm_axis(op, xd, a.begin_norm_axis);
  check_epsilon(op, a.epsilon);
  check_affine(op, in, 1, "weight", xd, axis);
  check_stats(op, in, 2, "rstd", product(xd, 0, axis));
  meta::require_like(op, in, 0, 3);
}

std::vector<Value> RmsNormOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(2);
  if (!g[0]) return grads;
  auto grad = b.create<GradOf<RmsNormOp>>(op, op->operand_source(0), op->operand_source(1),
                                          op->result(1), g[0]);
  for (std::uint32_t i = 0; i < 2; ++i) grads[i] = if_differentiable(op, i, grad.result(i));
  return grads;
}

// ---- batch_norm ----

void BatchNormOp::build(Builder&, OperationArgument& arg, Value x, Value scale, Value bias,
                        Value running_mean, Value running_var, double momentum, double epsilon,
                        bool is_test, std::string data_format) {
  for (Value v : {x, scale, bias, running_mean, running_var}) arg.add_operand(v);
  arg.attributes = to_named_attributes(Attributes{momentum, epsilon, is_test, std::move(data_format)});
}

namespace {

// batch_norm's and fused_batch_norm's result types, after their checks.
std::vector<Type> batch_norm_meta(std::string_view op, const std::vector<Type>& in, double momentum,
                                  double epsilon, const std::string& format) {
  meta::require_count(op, in, 5);
  const auto& xd = batch_norm_x(op, in);
  check_epsilon(op, epsilon);
  if (!(momentum >= 0 && momentum <= 1))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' attribute momentum must be in [0, 1], got ", momentum);
  const std::int64_t c = batch_norm_channels(op, xd, format);
  check_channel(op, in, 1, "scale", c);
  check_channel(op, in, 2, "bias", c);
  check_channel(op, in, 3, "running_mean", c);
  check_channel(op, in, 4, "running_var", c);
  meta::require_mutable(op, in[3]);
  meta::require_mutable(op, in[4]);
  const DataType dt = shaped_data_type(in[0]);
  Type stat = meta::result_like(in, batch_norm_param_dtype(dt), {c});
  return {meta::result_like(in, dt, xd), in[3], in[4], stat, stat};
}

// The gradient ops' operands: x, scale, then `per_channel` more [C] ones
// named in order, then dy like x.
void check_batch_norm_grad(std::string_view op, const std::vector<Type>& in, double epsilon,
                           const std::string& format, std::initializer_list<std::string_view> per_channel) {
  const auto& xd = batch_norm_x(op, in);
  check_epsilon(op, epsilon);
  const std::int64_t c = batch_norm_channels(op, xd, format);
  check_channel(op, in, 1, "scale", c);
  std::size_t i = 2;
  for (std::string_view what : per_channel) check_channel(op, in, i++, what, c);
  meta::require_like(op, in, 0, i);
}

}  // namespace

std::vector<Type> BatchNormOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  return batch_norm_meta(name, in, a.momentum, a.epsilon, a.data_format);
}

void BatchNormOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                              DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, op);
  check_batch_norm_grad(op, in, a.epsilon, a.data_format, {"saved_mean", "saved_invstd"});
}

std::vector<Value> BatchNormOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(5);
  if (!g[0]) return grads;
  auto grad = b.create<GradOf<BatchNormOp>>(op, op->operand_source(0), op->operand_source(1),
                                            op->result(3), op->result(4), g[0]);
  for (std::uint32_t i = 0; i < 3; ++i) grads[i] = if_differentiable(op, i, grad.result(i));
  return grads;
}

// ---- fused_batch_norm ----

namespace {

void check_activation(std::string_view op, const std::string& activation) {
  if (activation != "relu" && activation != "relu6")
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' activation '", activation,
                "' is not one it fuses (expected \"relu\" or \"relu6\")");
}

}  // namespace

void FusedBatchNormOp::build(Builder&, OperationArgument& arg, Value x, Value scale, Value bias,
                             Value running_mean, Value running_var, double momentum, double epsilon,
                             bool is_test, std::string data_format, std::string activation) {
  for (Value v : {x, scale, bias, running_mean, running_var}) arg.add_operand(v);
  arg.attributes = to_named_attributes(
      Attributes{momentum, epsilon, is_test, std::move(data_format), std::move(activation)});
}

std::vector<Type> FusedBatchNormOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  check_activation(name, a.activation);
  return batch_norm_meta(name, in, a.momentum, a.epsilon, a.data_format);
}

void FusedBatchNormOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                                   DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, op);
  check_activation(op, a.activation);
  check_batch_norm_grad(op, in, a.epsilon, a.data_format, {"bias", "saved_mean", "saved_invstd"});
}

std::vector<Value> FusedBatchNormOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(5);
  if (!g[0]) return grads;
  auto grad = b.create<GradOf<FusedBatchNormOp>>(op, op->operand_source(0), op->operand_source(1),
                                                 op->operand_source(2), op->result(3), op->result(4), g[0]);
  for (std::uint32_t i = 0; i < 3; ++i) grads[i] = if_differentiable(op, i, grad.result(i));
  return grads;
}

}  // namespace kiln
