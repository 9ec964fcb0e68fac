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

Type float_operand(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  Type t = tensor_operand(op, in, i);
  require_floating(op, shaped_data_type(t), i);
  return t;
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

bool compatible_dims(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && a[i] >= 0 && b[i] >= 0) return false;
  return true;
}

void require_like(std::string_view op, const std::vector<Type>& in, std::size_t i, std::size_t j) {
  Type a = tensor_operand(op, in, i), b = tensor_operand(op, in, j);
  require_same_dtype(op, shaped_data_type(a), shaped_data_type(b), i, j);
  if (!compatible_dims(shaped_dims(a), shaped_dims(b)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operands #", i, " and #", j,
                " must have one shape, got ", dims_string(shaped_dims(a)), " and ",
                dims_string(shaped_dims(b)));
}

void require_count(std::string_view op, const std::vector<Type>& in, std::size_t n) {
  if (in.size() != n)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes ", n, " operands, got ",
                in.size());
}

std::string dims_string(const std::vector<std::int64_t>& dims) {
  std::string r = "[";
  for (std::size_t k = 0; k < dims.size(); ++k) r += (k ? ", " : "") + std::to_string(dims[k]);
  return r + "]";
}

std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::int64_t rank,
                            std::string_view what) {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " ", axis,
                " is out of range for rank ", rank, " (expected [", -rank, ", ", rank, "))");
  return axis < 0 ? axis + rank : axis;
}

void check_shape_attr(std::string_view op, const std::vector<std::int64_t>& shape) {
  for (auto d : shape)
    if (d < -1)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' shape dims must be >= -1, got ", d);
}

}  // namespace kiln::meta

namespace kiln {

std::vector<std::int64_t> broadcast_shapes(std::string_view op, const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b) {
  std::size_t n = std::max(a.size(), b.size());
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db) out[i] = da;
    else if (da == 1) out[i] = db;
    else if (db == 1) out[i] = da;
    else if (da == -1) out[i] = db;
    else if (db == -1) out[i] = da;
    else
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot broadcast shapes ",
                  meta::dims_string(a), " and ", meta::dims_string(b));
  }
  return out;
}

}  // namespace kiln
