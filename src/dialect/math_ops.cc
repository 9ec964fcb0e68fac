// Definitions of the elementwise / unary / copy ops declared in
// kiln/dialect/math_ops.h (AddOp, MatmulOp, ReluOp and Relu_Op are defined
// in kiln_ops.cc and registered with the dialect there).
#include <algorithm>

#include "kiln/dialect/math_ops.h"

namespace kiln {

KILN_REGISTER_OP(SubOp);
KILN_REGISTER_OP(MulOp);
KILN_REGISTER_OP(DivOp);
KILN_REGISTER_OP(MaximumOp);
KILN_REGISTER_OP(MinimumOp);
KILN_REGISTER_OP(PowOp);
KILN_REGISTER_OP(GeluOp);
KILN_REGISTER_OP(TanhOp);
KILN_REGISTER_OP(SigmoidOp);
KILN_REGISTER_OP(ExpOp);
KILN_REGISTER_OP(LogOp);
KILN_REGISTER_OP(SqrtOp);
KILN_REGISTER_OP(Sqrt_Op);
KILN_REGISTER_OP(SquareOp);
KILN_REGISTER_OP(AbsOp);
KILN_REGISTER_OP(NegOp);
KILN_REGISTER_OP(ScaleOp);
KILN_REGISTER_OP(AssignOp);
KILN_REGISTER_OP(CastOp);
KILN_REGISTER_OP(AddNOp);

std::vector<Type> infer_elementwise_binary(std::string_view op, const std::vector<Type>& in,
                                           bool floating_only) {
  if (in.size() != 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes 2 operands, got ", in.size());
  Type x = meta::tensor_operand(op, in, 0), y = meta::tensor_operand(op, in, 1);
  DataType dx = shaped_data_type(x), dy = shaped_data_type(y);
  meta::require_same_dtype(op, dx, dy);
  if (floating_only) meta::require_floating(op, dx);
  return {meta::result_like(in, dx, broadcast_shapes(op, shaped_dims(x), shaped_dims(y)))};
}

std::vector<Type> infer_elementwise_unary(std::string_view op, const std::vector<Type>& in,
                                          bool floating_only) {
  if (in.size() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes 1 operand, got ", in.size());
  Type x = meta::tensor_operand(op, in, 0);
  if (floating_only) meta::require_floating(op, shaped_data_type(x));
  return {x};
}

void GeluOp::build(Builder&, OperationArgument& arg, Value x, bool approximate) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{approximate});
}
std::vector<Type> GeluOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  return infer_elementwise_unary(name, in, true);
}

void ScaleOp::build(Builder&, OperationArgument& arg, Value x, double scale, double bias,
                    bool bias_after_scale) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{scale, bias, bias_after_scale});
}
std::vector<Type> ScaleOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  return infer_elementwise_unary(name, in, false);
}

namespace {
bool castable(DataType t) {
  switch (t) {
    case DataType::Float32:
    case DataType::Float64:
    case DataType::Int8:
    case DataType::Int32:
    case DataType::Int64:
    case DataType::Bool: return true;
    default: return false;
  }
}
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
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' casts between f32, f64, i8, i32, i64 "
                "and bool, got ", to_string(from), " -> ", to_string(a.dtype));
  return {meta::result_like(in, a.dtype, shaped_dims(x))};
}

void AddNOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& xs) {
  if (xs.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  arg.add_operands(xs);
}
std::vector<Type> AddNOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  if (in.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  Type x0 = meta::tensor_operand(name, in, 0);
  DataType dt = shaped_data_type(x0);
  std::vector<std::int64_t> dims = shaped_dims(x0);
  for (std::size_t i = 1; i < in.size(); ++i) {
    Type xi = meta::tensor_operand(name, in, i);
    meta::require_same_dtype(name, dt, shaped_data_type(xi), 0, i);
    const auto& di = shaped_dims(xi);
    bool ok = di.size() == dims.size();
    for (std::size_t k = 0; ok && k < di.size(); ++k) {
      if (dims[k] == -1) dims[k] = di[k];  // an unknown dim takes a known one
      else if (di[k] != -1 && di[k] != dims[k]) ok = false;
    }
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", name,
                  "' operands must have one shape (no broadcasting), got ",
                  meta::dims_string(shaped_dims(x0)), " (operand #0) and ", meta::dims_string(di),
                  " (operand #", i, ")");
  }
  return {meta::result_like(in, dt, std::move(dims))};
}

}  // namespace kiln
