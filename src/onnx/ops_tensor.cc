// ONNX's layout ops whose parameters are attributes: Transpose, Flatten.
#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

std::vector<Value> transpose(NodeContext& c) {
  Value x = c.input(0);
  std::vector<std::int64_t> perm = c.ints_attr("perm");
  if (perm.empty()) {  // default: the dims reversed
    const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
    for (std::int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  return {c.b.create<TransposeOp>(x, perm).result()};
}

// [d0 … d(axis-1)] and [d(axis) …] each multiplied out; dims must be known.
std::vector<Value> flatten(NodeContext& c) {
  Value x = c.input(0);
  const auto& d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  std::int64_t axis = c.int_attr("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) c.unsupported("Flatten axis out of range");
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < rank; ++i) {
    if (d[static_cast<std::size_t>(i)] < 0)
      c.unsupported("Flatten of an input with a dim known only at run time");
    (i < axis ? outer : inner) *= d[static_cast<std::size_t>(i)];
  }
  return {c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{outer, inner}).result()};
}

}  // namespace

void add_tensor_ops(OpTable& t) {
  t["Transpose"] = {&transpose, 1};
  t["Flatten"] = {&flatten, 9};
}

}  // namespace kiln::onnx::detail
