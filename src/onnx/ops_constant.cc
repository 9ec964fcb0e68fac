// ONNX's Constant: its value (a TensorProto, or since opset 12 a float,
// floats, int or ints attribute) as builtin.constant.
#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

// The node's value attribute as a tensor.
Tensor constant_tensor(const NodeContext& c) {
  if (const auto* a = c.attribute("value"))
    return tensor_of(a->t(), c.where() + " value");
  if (const auto* a = c.attribute("value_float"))
    return Tensor::from_vector<float>(Dims(), {a->f()});
  if (const auto* a = c.attribute("value_floats"))
    return Tensor::from_vector<float>(Dims{a->floats_size()},
                                      std::vector<float>(a->floats().begin(), a->floats().end()));
  if (const auto* a = c.attribute("value_int"))
    return Tensor::from_vector<std::int64_t>(Dims(), {a->i()});
  if (const auto* a = c.attribute("value_ints"))
    return Tensor::from_vector<std::int64_t>(
        Dims{a->ints_size()}, std::vector<std::int64_t>(a->ints().begin(), a->ints().end()));
  const std::string kind = c.node.attribute_size() ? c.node.attribute(0).name() : "no attribute";
  c.unsupported("Constant with " + kind + "; kiln imports value, value_float(s) and value_int(s)");
}

std::vector<Value> constant(NodeContext& c) {
  c.known_outputs = {constant_tensor(c)};
  return {constant_value(c.b, c.known_outputs[0])};
}

}  // namespace

void add_constant_ops(OpTable& t) { t["Constant"] = {&constant, 1}; }

}  // namespace kiln::onnx::detail
