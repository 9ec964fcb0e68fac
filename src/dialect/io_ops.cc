// kiln.data and kiln.fetch (kiln/dialect/io_ops.h).
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/io_ops.h"


namespace kiln {

KILN_REGISTER_OP(DataOp, FetchOp);

void DataOp::build(Builder&, OperationArgument& arg, const std::string& name,
                   const std::vector<std::int64_t>& shape, DataType dtype, Place place) {
  if (name.empty()) throw_error(ErrorKind::InvalidArgument, "op 'kiln.data' needs a name");
  arg.attributes = to_named_attributes(Attributes{name, shape, dtype, place});
}

std::vector<Type> DataOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::check_shape_attr(name, a.shape);
  return {TensorType::get(a.dtype, a.shape)};
}

void FetchOp::build(Builder&, OperationArgument& arg, Value v, const std::string& name,
                    std::int32_t col) {
  arg.add_operand(v);
  arg.attributes = to_named_attributes(Attributes{name, col});
}

}  // namespace kiln
