#include "kiln/dialect/infer_meta_util.h"

#include <algorithm>
#include <string>

namespace kiln::meta {

Type tensor_operand(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  if (i >= in.size() || !in[i] || !is_shaped(in[i]))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", i, " must be a tensor, got ",
                i < in.size() && in[i] ? in[i].to_string() : std::string("nothing"));
  return in[i];
}

Type result_like(const std::vector<Type>& in, DataType dtype, std::vector<std::int64_t> dims) {
  bool all_v = !in.empty() &&
               std::all_of(in.begin(), in.end(), [](Type t) { return t.isa<VTensorType>(); });
  if (all_v) return VTensorType::get(dtype, std::move(dims));
  return TensorType::get(dtype, std::move(dims));
}

void require_floating(std::string_view op, DataType dtype, std::size_t operand) {
  if (!is_floating(dtype))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", operand,
                " must have a floating dtype (f16, bf16, f32, f64), got ", to_string(dtype));
}

void require_same_dtype(std::string_view op, DataType a, DataType b, std::size_t ia,
                        std::size_t ib) {
  if (a != b)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operands must have one dtype, got ",
                to_string(a), " (operand #", ia, ") and ", to_string(b), " (operand #", ib, ")");
}

void require_mutable(std::string_view op, Type t) {
  if (t.isa<VTensorType>())
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' writes its operand in place, so it cannot take a vtensor (value semantics)");
}

std::string dims_string(const std::vector<std::int64_t>& dims) {
  std::string r = "[";
  for (std::size_t k = 0; k < dims.size(); ++k) r += (k ? ", " : "") + std::to_string(dims[k]);
  return r + "]";
}

}  // namespace kiln::meta
