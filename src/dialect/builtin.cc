#include "kiln/dialect/builtin.h"

#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/tensor_array_type.h"

namespace kiln {

KILN_REGISTER_OP(ParameterOp, SetParameterOp, ConstantOp);

void register_builtin_dialect(IrContext* ctx) {
  auto* d = ctx->get_or_register_dialect<BuiltinDialect>();
  d->register_types<Float16Type, BFloat16Type, Float32Type, Float64Type, Int8Type, Int32Type,
                    Int64Type, BoolType, TensorType, VTensorType, VectorType, TensorArrayType>();
  d->register_attributes<BoolAttribute, Int32Attribute, Int64Attribute, Float32Attribute,
                         Float64Attribute, StrAttribute, ArrayAttribute, DictionaryAttribute,
                         TypeAttribute, DataTypeAttribute, PlaceAttribute>();
}

void ParameterOp::build(Builder&, OperationArgument& arg, const std::string& name, Type type) {
  if (!type) throw_error(ErrorKind::InvalidArgument, "builtin.parameter '", name, "' needs a type");
  arg.attributes = to_named_attributes(Attributes{name});
  arg.add_result(type);
}

void SetParameterOp::build(Builder&, OperationArgument& arg, Value value, const std::string& name) {
  arg.add_operand(value);
  arg.attributes = to_named_attributes(Attributes{name});
}

void ConstantOp::build(Builder&, OperationArgument& arg, Attribute value, Type type) {
  arg.add_attribute("value", value);
  arg.add_result(type);
}

void ConstantOp::verify() const {
  if (!op_->attribute("value"))
    throw_error(ErrorKind::InvalidArgument, "op 'builtin.constant' is missing attribute 'value'");
}

}  // namespace kiln
