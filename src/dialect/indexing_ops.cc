// The indexing ops of kiln/dialect/indexing_ops.h: InferMeta, Vjp and
// registration.
#include "kiln/dialect/indexing_ops.h"

#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/tensor_ops.h"

namespace kiln {

KILN_REGISTER_OP(TakeAlongAxisOp, PutAlongAxisOp, GatherNdOp, ScatterNdOp);

namespace {

void require_data(std::string_view op, DataType dt) {
  if (dt != DataType::Float32 && dt != DataType::Float64 && dt != DataType::Int32 &&
      dt != DataType::Int64 && dt != DataType::Bool)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes f32, f64, i32, i64 or bool data, got ",
                to_string(dt));
}

void require_index(std::string_view op, Type index) {
  if (!meta::is_index_dtype(shaped_data_type(index)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index must be i32 or i64, got ",
                to_string(shaped_data_type(index)));
}

void require_reduction(std::string_view op, const std::string& r) {
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' reduction '", r,
                "' is not one of none, add, mul, max, min");
}

// index (of x's rank) fits x along every dim but `axis` (unknown dims pass);
// returns the normalized axis.
std::int64_t check_along_axis(std::string_view op, const std::vector<std::int64_t>& xs,
                              const std::vector<std::int64_t>& is, std::int64_t axis) {
  const auto rank = static_cast<std::int64_t>(xs.size());
  if (rank == 0) throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs an x of rank >= 1");
  if (is.size() != xs.size())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index ", meta::dims_string(is),
                " must have x's rank ", rank, " (x is ", meta::dims_string(xs), ")");
  const std::int64_t a = meta::normalize_axis(op, axis, rank);
  for (std::int64_t d = 0; d < rank; ++d)
    if (d != a && xs[d] >= 0 && is[d] > xs[d])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' index ", meta::dims_string(is),
                  " is larger than x ", meta::dims_string(xs), " in dim ", d,
                  " (only the axis dim ", a, " may differ freely)");
  return a;
}

}  // namespace

// ---- take_along_axis ----

void TakeAlongAxisOp::build(Builder&, OperationArgument& arg, Value x, Value index, std::int64_t axis) {
  arg.add_operand(x);
  arg.add_operand(index);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> TakeAlongAxisOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0), index = meta::tensor_operand(name, in, 1);
  require_data(name, shaped_data_type(x));
  require_index(name, index);
  check_along_axis(name, shaped_dims(x), shaped_dims(index), a.axis);
  return {meta::result_like(in, shaped_data_type(x), shaped_dims(index))};
}

std::vector<Value> TakeAlongAxisOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  Value x = op->operand_source(0), index = op->operand_source(1);
  if (!d || !vjp::differentiable(x)) return {Value(), Value()};
  const auto axis = TakeAlongAxisOp(op).attrs().axis;
  return {b.create<PutAlongAxisOp>(vjp::zeros(b, x), index, d, axis, "add").result(), Value()};
}

// ---- put_along_axis ----

void PutAlongAxisOp::build(Builder&, OperationArgument& arg, Value x, Value index, Value updates,
                           std::int64_t axis, const std::string& reduction) {
  arg.add_operand(x);
  arg.add_operand(index);
  arg.add_operand(updates);
  arg.attributes = to_named_attributes(Attributes{axis, reduction});
}

std::vector<Type> PutAlongAxisOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 3);
  Type x = meta::tensor_operand(name, in, 0), index = meta::tensor_operand(name, in, 1);
  Type updates = meta::tensor_operand(name, in, 2);
  require_data(name, shaped_data_type(x));
  require_index(name, index);
  meta::require_same_dtype(name, shaped_data_type(x), shaped_data_type(updates), 0, 2);
  require_reduction(name, a.reduction);
  check_along_axis(name, shaped_dims(x), shaped_dims(index), a.axis);
  if (!meta::compatible_dims(shaped_dims(index), shaped_dims(updates)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' updates ",
                meta::dims_string(shaped_dims(updates)), " must have index's shape ",
                meta::dims_string(shaped_dims(index)));
  return {meta::result_like(in, shaped_data_type(x), shaped_dims(x))};
}

std::vector<Value> PutAlongAxisOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  Value x = op->operand_source(0), index = op->operand_source(1), updates = op->operand_source(2);
  std::vector<Value> out(3);
  const bool need_x = vjp::differentiable(x), need_u = vjp::differentiable(updates);
  if (!d || (!need_x && !need_u)) return out;
  const auto a = PutAlongAxisOp(op).attrs();
  if (a.reduction != "none" && a.reduction != "add")
    throw_error(ErrorKind::Unimplemented, "op '", name, "' has no gradient for reduction '",
                a.reduction, "' (only none and add)");
  if (need_x)
    out[0] = a.reduction == "add"
                 ? d
                 : b.create<PutAlongAxisOp>(d, index, vjp::zeros(b, updates), a.axis, "none").result();
  if (need_u) out[2] = b.create<TakeAlongAxisOp>(d, index, a.axis).result();
  return out;
}

// ---- gather_nd / scatter_nd ----

namespace {

// k = index's last dim, known at build time and fitting x's rank after the
// batch dims; returns k.
std::int64_t check_nd(std::string_view op, const std::vector<std::int64_t>& xs,
                      const std::vector<std::int64_t>& is, std::int64_t batch_dims) {
  const auto rx = static_cast<std::int64_t>(xs.size()), ri = static_cast<std::int64_t>(is.size());
  if (batch_dims < 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' batch_dims ", batch_dims, " must be >= 0");
  if (ri < 1 || ri <= batch_dims)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index ", meta::dims_string(is),
                " needs rank > batch_dims (", batch_dims, ") and >= 1");
  const std::int64_t k = is.back();
  if (k < 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index ", meta::dims_string(is),
                " must have its last dim (the tuple length) known at build time");
  if (batch_dims + k > rx)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index tuples of length ", k,
                " after ", batch_dims, " batch dims do not fit x ", meta::dims_string(xs));
  for (std::int64_t d = 0; d < batch_dims; ++d)
    if (xs[d] >= 0 && is[d] >= 0 && xs[d] != is[d])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' batch dim ", d, " of index ",
                  meta::dims_string(is), " differs from x ", meta::dims_string(xs));
  return k;
}

}  // namespace

void GatherNdOp::build(Builder&, OperationArgument& arg, Value x, Value index, std::int64_t batch_dims) {
  arg.add_operand(x);
  arg.add_operand(index);
  arg.attributes = to_named_attributes(Attributes{batch_dims});
}

std::vector<Type> GatherNdOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0), index = meta::tensor_operand(name, in, 1);
  require_data(name, shaped_data_type(x));
  require_index(name, index);
  const auto& xs = shaped_dims(x);
  const auto& is = shaped_dims(index);
  const std::int64_t k = check_nd(name, xs, is, a.batch_dims);
  std::vector<std::int64_t> out(is.begin(), is.end() - 1);
  out.insert(out.end(), xs.begin() + a.batch_dims + k, xs.end());
  if (out.size() > 9)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' result rank ", out.size(),
                " exceeds the maximum rank 9");
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

void ScatterNdOp::build(Builder&, OperationArgument& arg, Value x, Value index, Value updates,
                        const std::string& reduction) {
  arg.add_operand(x);
  arg.add_operand(index);
  arg.add_operand(updates);
  arg.attributes = to_named_attributes(Attributes{reduction});
}

std::vector<Type> ScatterNdOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 3);
  Type x = meta::tensor_operand(name, in, 0), index = meta::tensor_operand(name, in, 1);
  Type updates = meta::tensor_operand(name, in, 2);
  require_data(name, shaped_data_type(x));
  require_index(name, index);
  meta::require_same_dtype(name, shaped_data_type(x), shaped_data_type(updates), 0, 2);
  require_reduction(name, a.reduction);
  const auto& xs = shaped_dims(x);
  const auto& is = shaped_dims(index);
  const std::int64_t k = check_nd(name, xs, is, 0);
  std::vector<std::int64_t> want(is.begin(), is.end() - 1);
  want.insert(want.end(), xs.begin() + k, xs.end());
  if (!meta::compatible_dims(want, shaped_dims(updates)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' updates ",
                meta::dims_string(shaped_dims(updates)), " must be ", meta::dims_string(want),
                " (index's dims but the last, then x's dims after the first ", k, ")");
  return {meta::result_like(in, shaped_data_type(x), xs)};
}

std::vector<Value> GatherNdOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  Value x = op->operand_source(0), index = op->operand_source(1);
  if (!d || !vjp::differentiable(x)) return {Value(), Value()};
  if (GatherNdOp(op).attrs().batch_dims != 0)
    throw_error(ErrorKind::Unimplemented, "op '", name, "' has no gradient with batch_dims > 0");
  return {b.create<ScatterNdOp>(vjp::zeros(b, x), index, d, "add").result(), Value()};
}

std::vector<Value> ScatterNdOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  Value x = op->operand_source(0), index = op->operand_source(1), updates = op->operand_source(2);
  std::vector<Value> out(3);
  const bool need_x = vjp::differentiable(x), need_u = vjp::differentiable(updates);
  if (!d || (!need_x && !need_u)) return out;
  const std::string reduction = ScatterNdOp(op).attrs().reduction;
  if (reduction != "none" && reduction != "add")
    throw_error(ErrorKind::Unimplemented, "op '", name, "' has no gradient for reduction '",
                reduction, "' (only none and add)");
  if (need_x)
    out[0] = reduction == "add"
                 ? d
                 : b.create<ScatterNdOp>(d, index, vjp::zeros(b, updates), "none").result();
  if (need_u) out[2] = b.create<GatherNdOp>(d, index, std::int64_t{0}).result();
  return out;
}

}  // namespace kiln
