// The unary ops of kiln/dialect/unary_ops.h: their InferMeta, Vjp and
// gradient ops, and their registration.
#include "kiln/dialect/unary_ops.h"

namespace kiln {

namespace {
template <typename... Maths>
struct RegisterUnaryFamily;
template <typename... Maths>
struct RegisterUnaryFamily<MathList<Maths...>> {
  OpRegistrar<UnaryOp<Maths>..., GradOf<UnaryOp<Maths>>...> ops;
};
template <typename... Maths>
struct RegisterInplaceFamily;
template <typename... Maths>
struct RegisterInplaceFamily<MathList<Maths...>> {
  OpRegistrar<InplaceUnaryOp<Maths>...> ops;
};
const RegisterUnaryFamily<UnaryFamily> unary_family;
const RegisterInplaceFamily<InplaceUnaryFamily> inplace_family;
}  // namespace

KILN_REGISTER_OP(GeluOp, GradOf<GeluOp>, ScaleOp, AssignOp, CastOp);

namespace detail {

std::vector<Type> infer_unary(std::string_view op, const std::vector<Type>& in,
                              bool floating_only) {
  if (in.size() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes 1 operand, got ", in.size());
  Type x = meta::tensor_operand(op, in, 0);
  if (floating_only) meta::require_floating(op, shaped_data_type(x));
  return {x};
}

std::vector<Type> infer_inplace_unary(std::string_view op, const std::vector<Type>& in,
                                      bool floating_only) {
  auto out = infer_unary(op, in, floating_only);
  meta::require_mutable(op, in[0]);
  return out;
}

void UnaryGradSpec::check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_like(op, in, 0, 1);
}

}  // namespace detail

// ---- gelu ----

void GeluOp::build(Builder&, OperationArgument& arg, Value x, bool approximate) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{approximate});
}
std::vector<Type> GeluOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  return detail::infer_unary(name, in, true);
}
std::vector<Value> GeluOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return detail::unary_vjp<GeluOp, GradReads::Input>(b, op, g);
}

// ---- scale ----

void ScaleOp::build(Builder&, OperationArgument& arg, Value x, double scale, double bias,
                    bool bias_after_scale) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{scale, bias, bias_after_scale});
}
std::vector<Type> ScaleOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  return detail::infer_unary(name, in, false);
}
// The bias does not depend on x: d/dx (s·x + c) = s.
std::vector<Value> ScaleOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value{}};
  return {b.create<ScaleOp>(d, ScaleOp(op).attrs().scale, 0.0).result()};
}

// ---- assign ----

std::vector<Value> AssignOp::vjp(Builder&, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value{}};
  return {d};
}

// ---- cast ----

namespace {
bool castable(DataType t) { return t != DataType::Undefined && size_of(t) != 0; }
}  // namespace

void CastOp::build(Builder&, OperationArgument& arg, Value x, DataType dtype) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{dtype});
}
std::vector<Type> CastOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0);
  DataType from = shaped_data_type(x);
  if (!castable(from) || !castable(a.dtype))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' casts between defined dtypes, got ", to_string(from), " -> ", to_string(a.dtype));
  return {meta::result_like(in, a.dtype, shaped_dims(x))};
}
// Float → float: the grad cast back to x's dtype; no grad through integers.
std::vector<Value> CastOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0)) || !vjp::differentiable(op->result(0)))
    return {Value{}};
  DataType from = shaped_data_type(op->operand_source(0).type());
  if (shaped_data_type(d.type()) == from) return {d};
  return {b.create<CastOp>(d, from).result()};
}

}  // namespace kiln
