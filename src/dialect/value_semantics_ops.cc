// kiln.to_vtensor and kiln.to_tensor (kiln/dialect/value_semantics_ops.h).
#include "kiln/dialect/value_semantics_ops.h"

#include "kiln/dialect/infer_meta_util.h"
#include "kiln/support/error.h"

namespace kiln {

KILN_REGISTER_OP(ToVTensorOp, ToTensorOp);

namespace {
template <typename From, typename To>
std::vector<Type> convert(std::string_view op, const std::vector<Type>& in, std::string_view from) {
  meta::require_count(op, in, 1);
  if (!in[0].isa<From>())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes a ", from, ", got ", in[0].to_string());
  return {To::get(shaped_data_type(in[0]), shaped_dims(in[0]))};
}
}  // namespace

std::vector<Type> ToVTensorOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  return convert<TensorType, VTensorType>(name, in, "tensor");
}

std::vector<Type> ToTensorOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  return convert<VTensorType, TensorType>(name, in, "vtensor");
}

}  // namespace kiln
