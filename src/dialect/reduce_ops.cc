#include "kiln/dialect/reduce_ops.h"

#include <algorithm>

namespace kiln {

KILN_REGISTER_OP(SumOp);
KILN_REGISTER_OP(MeanOp);
KILN_REGISTER_OP(MaxOp);

std::vector<int> normalize_reduce_axes(std::string_view op, const std::vector<std::int64_t>& axes,
                                       int rank) {
  std::vector<int> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (std::int64_t a : axes) {
    if (a < -rank || a >= rank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", a,
                  " is out of range for rank ", rank, " (expected [", -rank, ", ", rank, "))");
    int n = static_cast<int>(a < 0 ? a + rank : a);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", n, " is given twice in ",
                  meta::dims_string(axes));
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Type> infer_reduce(std::string_view op, const std::vector<Type>& in,
                               const std::vector<std::int64_t>& axis, bool keepdim,
                               bool floating_only) {
  Type x = meta::tensor_operand(op, in, 0);
  DataType dt = shaped_data_type(x);
  if (floating_only) meta::require_floating(op, dt);
  const auto& xs = shaped_dims(x);
  auto axes = normalize_reduce_axes(op, axis, static_cast<int>(xs.size()));
  std::vector<std::int64_t> out;
  for (int i = 0; i < static_cast<int>(xs.size()); ++i) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), i);
    if (!reduced) out.push_back(xs[i]);
    else if (keepdim) out.push_back(1);
  }
  return {meta::result_like(in, dt, std::move(out))};
}

}  // namespace kiln
