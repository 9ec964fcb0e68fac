// ONNX's layout ops: Transpose, Flatten, Concat, Shape (of static dims), and
// Reshape / Squeeze /
// Unsqueeze, whose shape or axes (inputs in later opsets) must be known at
// import (initializers or Constant nodes): kiln takes them as attributes.
#include <algorithm>

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

// allowzero = 0 (the default): a 0 copies the input's dim and one -1 is
// inferred, as kiln.reshape does.
std::vector<Value> reshape(NodeContext& c) {
  const std::vector<std::int64_t> shape = c.constant_ints(1, "Reshape's shape");
  if (c.int_attr("allowzero", 0) != 0)
    for (auto d : shape)
      if (d == 0) c.unsupported("Reshape with allowzero = 1 and a 0 in the shape");
  return {c.b.create<ReshapeOp>(c.input(0), shape).result()};
}

// Axes: an attribute before opset 13, an input (optional for Squeeze) since.
std::vector<std::int64_t> axes_of(NodeContext& c, bool required) {
  if (c.opset < 13) return c.ints_attr("axes");
  if (c.inputs.size() < 2 || !c.inputs[1]) {
    if (required) c.unsupported("no axes input");
    return {};
  }
  return c.constant_ints(1, "the axes");
}

std::vector<Value> squeeze(NodeContext& c) {
  const std::vector<std::int64_t> axes = axes_of(c, false);
  if (axes.empty())  // every dim of extent 1: they must be known
    for (auto d : shaped_dims(c.input(0).type()))
      if (d < 0) c.unsupported("Squeeze without axes of an input with a dim known only at run time");
  return {c.b.create<SqueezeOp>(c.input(0), axes).result()};
}

std::vector<Value> unsqueeze(NodeContext& c) {
  return {c.b.create<UnsqueezeOp>(c.input(0), axes_of(c, true)).result()};
}

std::vector<Value> concat(NodeContext& c) {
  if (!c.has_attr("axis")) c.unsupported("Concat without an axis");
  std::vector<Value> xs;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) xs.push_back(c.input(i));
  return {c.b.create<ConcatOp>(xs, c.int_attr("axis", 0)).result()};
}

// The input's dims [start:end) (opset 15's attributes), as a constant: the
// dims must be known at import (their values then fold onward).
std::vector<Value> shape(NodeContext& c) {
  const auto& d = shaped_dims(c.input(0).type());
  const auto rank = static_cast<std::int64_t>(d.size());
  auto clamp = [&](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + rank : i, 0, rank); };
  const std::int64_t start = clamp(c.int_attr("start", 0)), end = clamp(c.int_attr("end", rank));
  std::vector<std::int64_t> dims;
  for (std::int64_t i = start; i < end; ++i) {
    if (d[static_cast<std::size_t>(i)] < 0)
      c.unsupported("Shape of an input whose dim " + std::to_string(i) + " is known only at run time");
    dims.push_back(d[static_cast<std::size_t>(i)]);
  }
  Tensor value = Tensor::from_vector<std::int64_t>(Dims{static_cast<std::int64_t>(dims.size())}, dims);
  c.known_outputs = {value};
  return {constant_value(c.b, value)};
}

}  // namespace

void add_tensor_ops(OpTable& t) {
  t["Shape"] = {&shape, 1};
  t["Transpose"] = {&transpose, 1};
  t["Flatten"] = {&flatten, 9};
  t["Reshape"] = {&reshape, 5};
  t["Squeeze"] = {&squeeze, 1};
  t["Unsqueeze"] = {&unsqueeze, 1};
  t["Concat"] = {&concat, 4};
}

}  // namespace kiln::onnx::detail
