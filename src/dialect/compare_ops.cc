// The ops of kiln/dialect/compare_ops.h: InferMeta, Vjps, gradient ops and
// registration.
#include "kiln/dialect/compare_ops.h"

#include "kiln/dialect/tensor_ops.h"

namespace kiln {

namespace {
template <template <typename> class OpT, typename... Maths>
struct RegisterFamily;
template <template <typename> class OpT, typename... Maths>
struct RegisterFamily<OpT, CompareMathList<Maths...>> {
  OpRegistrar<OpT<Maths>...> ops;
};
const RegisterFamily<CompareOp, CompareFamily> compare_family;
const RegisterFamily<LogicalOp, LogicalFamily> logical_family;
const RegisterFamily<PredicateOp, PredicateFamily> predicate_family;
}  // namespace

KILN_REGISTER_OP(LogicalNotOp, WhereOp, ClipOp, GradOf<ClipOp>, MaskedFillOp, TriuOp, TrilOp);

namespace {

bool is_compare_dtype(DataType t, bool allows_bool) {
  return t == DataType::Float32 || t == DataType::Float64 || t == DataType::Int32 ||
         t == DataType::Int64 || (allows_bool && t == DataType::Bool);
}

void require_dtype(std::string_view op, DataType t, std::size_t operand, bool allows_bool,
                   const char* expected) {
  if (!is_compare_dtype(t, allows_bool))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", operand, " is ",
                to_string(t), ", expected ", expected);
}

void require_bool(std::string_view op, DataType t, std::size_t operand) {
  if (t != DataType::Bool)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", operand, " is ",
                to_string(t), ", expected bool");
}

}  // namespace

namespace detail {

std::vector<Type> infer_compare(std::string_view op, const std::vector<Type>& in,
                                bool allows_bool) {
  meta::require_count(op, in, 2);
  Type x = meta::tensor_operand(op, in, 0), y = meta::tensor_operand(op, in, 1);
  DataType dx = shaped_data_type(x), dy = shaped_data_type(y);
  const char* expected = allows_bool ? "f32, f64, i32, i64 or bool" : "f32, f64, i32 or i64";
  require_dtype(op, dx, 0, allows_bool, expected);
  meta::require_same_dtype(op, dx, dy);
  return {meta::result_like(in, DataType::Bool,
                            broadcast_shapes(op, shaped_dims(x), shaped_dims(y)))};
}

std::vector<Type> infer_logical(std::string_view op, const std::vector<Type>& in) {
  meta::require_count(op, in, 2);
  Type x = meta::tensor_operand(op, in, 0), y = meta::tensor_operand(op, in, 1);
  require_bool(op, shaped_data_type(x), 0);
  require_bool(op, shaped_data_type(y), 1);
  return {meta::result_like(in, DataType::Bool,
                            broadcast_shapes(op, shaped_dims(x), shaped_dims(y)))};
}

std::vector<Type> infer_predicate(std::string_view op, const std::vector<Type>& in) {
  meta::require_count(op, in, 1);
  Type x = meta::tensor_operand(op, in, 0);
  DataType t = shaped_data_type(x);
  if (t != DataType::Float32 && t != DataType::Float64)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #0 is ", to_string(t),
                ", expected f32 or f64");
  return {meta::result_like(in, DataType::Bool, shaped_dims(x))};
}

std::vector<Type> infer_triangle(std::string_view op, const std::vector<Type>& in) {
  meta::require_count(op, in, 1);
  Type x = meta::tensor_operand(op, in, 0);
  require_dtype(op, shaped_data_type(x), 0, true, "f32, f64, i32, i64 or bool");
  if (shaped_dims(x).size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs a tensor of rank >= 2 (a batch of ",
                "matrices), got rank ", shaped_dims(x).size(), " ",
                meta::dims_string(shaped_dims(x)));
  return {x};
}

}  // namespace detail

// ---- logical_not ----

std::vector<Type> LogicalNotOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  require_bool(name, shaped_data_type(x), 0);
  return {x};
}

// ---- where ----

void WhereOp::build(Builder&, OperationArgument& arg, Value cond, Value x, Value y) {
  arg.add_operand(cond);
  arg.add_operand(x);
  arg.add_operand(y);
}

std::vector<Type> WhereOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 3);
  Type c = meta::tensor_operand(name, in, 0), x = meta::tensor_operand(name, in, 1),
       y = meta::tensor_operand(name, in, 2);
  require_bool(name, shaped_data_type(c), 0);
  DataType dx = shaped_data_type(x);
  require_dtype(name, dx, 1, true, "f32, f64, i32, i64 or bool");
  meta::require_same_dtype(name, dx, shaped_data_type(y), 1, 2);
  auto xy = broadcast_shapes(name, shaped_dims(x), shaped_dims(y));
  return {meta::result_like(in, dx, broadcast_shapes(name, shaped_dims(c), xy))};
}

std::vector<Value> WhereOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  Value c = op->operand_source(0), x = op->operand_source(1), y = op->operand_source(2);
  std::vector<Value> out(3);
  const bool need_x = vjp::differentiable(x), need_y = vjp::differentiable(y);
  if (!d || (!need_x && !need_y)) return out;
  Value zero = b.create<FullOp>(std::vector<std::int64_t>{}, 0.0, shaped_data_type(d.type()))
                   .result();
  if (need_x) out[1] = vjp::reduce_to(b, b.create<WhereOp>(c, d, zero).result(), x);
  if (need_y) out[2] = vjp::reduce_to(b, b.create<WhereOp>(c, zero, d).result(), y);
  return out;
}

// ---- clip ----

void ClipOp::build(Builder&, OperationArgument& arg, Value x, double min, double max) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{min, max});
}

namespace {
void check_clip_bounds(std::string_view op, const ClipOp::Attributes& a) {
  if (std::isnan(a.min) || std::isnan(a.max))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' bounds must not be NaN, got min ",
                a.min, " and max ", a.max);
}
}  // namespace

std::vector<Type> ClipOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  check_clip_bounds(name, from_attributes<Attributes>(attrs, name));
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const DataType dt = shaped_data_type(x);
  if (!is_floating(dt) && !is_integer(dt))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' operand #0 is ", to_string(dt),
                ", expected a floating or an integer type");
  return {x};
}

std::vector<Value> ClipOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<ClipOp>>(op, op->operand_source(0), d).result()};
}

void ClipOp::Grad::check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_floating(op, shaped_data_type(in[0]));
  meta::require_like(op, in, 0, 1);
}

// ---- masked_fill ----

void MaskedFillOp::build(Builder&, OperationArgument& arg, Value x, Value mask, double value) {
  arg.add_operand(x);
  arg.add_operand(mask);
  arg.attributes = to_named_attributes(Attributes{value});
}

std::vector<Type> MaskedFillOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0), m = meta::tensor_operand(name, in, 1);
  require_dtype(name, shaped_data_type(x), 0, false, "f32, f64, i32 or i64");
  require_bool(name, shaped_data_type(m), 1);
  const auto& xd = shaped_dims(x);
  const auto& md = shaped_dims(m);
  auto out = broadcast_shapes(name, xd, md);
  // The mask broadcasts to x; x itself is never broadcast.
  bool ok = out.size() == xd.size();
  for (std::size_t i = 0; ok && i < out.size(); ++i)
    ok = xd[i] == -1 || out[i] == xd[i];
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' mask ", meta::dims_string(md),
                " must broadcast to the shape of x ", meta::dims_string(xd));
  return {x};
}

std::vector<Value> MaskedFillOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  std::vector<Value> out(2);
  if (!d || !vjp::differentiable(op->operand_source(0))) return out;
  out[0] = b.create<MaskedFillOp>(d, op->operand_source(1), 0.0).result();
  return out;
}

}  // namespace kiln
