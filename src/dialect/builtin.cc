#include "kiln/dialect/builtin.h"

#include "kiln/dialect/infer_meta_util.h"
#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/tensor_array_type.h"
#include "kiln/ir/tensor_attribute.h"

namespace kiln {

KILN_REGISTER_OP(ParameterOp, SetParameterOp, ConstantOp);

void register_builtin_dialect(IrContext* ctx) {
  auto* d = ctx->get_or_register_dialect<BuiltinDialect>();
  d->register_types<Float16Type, BFloat16Type, Float32Type, Float64Type, Int8Type, Int32Type,
                    Int64Type, BoolType, UInt8Type, Int16Type, UInt16Type, UInt32Type,
                    UInt64Type, TensorType, VTensorType, VectorType, TensorArrayType>();
  d->register_attributes<BoolAttribute, Int32Attribute, Int64Attribute, Float32Attribute,
                         Float64Attribute, StrAttribute, ArrayAttribute, DictionaryAttribute,
                         TypeAttribute, DataTypeAttribute, PlaceAttribute, TensorAttribute>();
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
  Attribute v = op_->attribute("value");
  if (!v) throw_error(ErrorKind::InvalidArgument, "op 'builtin.constant' is missing attribute 'value'");
  // A tensor value must have the result's dtype and dims.
  if (auto t = v.dyn_cast<TensorAttribute>()) {
    Type r = op_->result_type(0);
    if (!is_shaped(r) || shaped_data_type(r) != t.dtype() || shaped_dims(r) != t.dims())
      throw_error(ErrorKind::InvalidArgument, "op 'builtin.constant' holds a ", to_string(t.dtype()),
                  " tensor of dims ", meta::dims_string(t.dims()), " but its result is ",
                  r.to_string());
  }
}

}  // namespace kiln
