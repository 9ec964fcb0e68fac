// ONNX's tensor-making ops whose result shape may be known only at run time:
// ConstantOfShape (kiln.full for a shape known at import, else
// kiln.full_by), Range (kiln.range) and Tile (kiln.tile).
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

// The value attribute (a one-element tensor; default float 0) fills the shape.
std::vector<Value> constant_of_shape(NodeContext& c) {
  double value = 0.0;
  DataType dt = DataType::Float32;
  if (const auto* a = c.attribute("value")) {
    const Tensor t = tensor_of(a->t(), c.where() + " value");
    if (t.numel() != 1) c.unsupported("a value attribute of " + std::to_string(t.numel()) + " elements");
    dt = t.dtype();
    switch (dt) {
      case DataType::Float32: value = t.to_vector<float>()[0]; break;
      case DataType::Float64: value = t.to_vector<double>()[0]; break;
      case DataType::Int32: value = t.to_vector<std::int32_t>()[0]; break;
      case DataType::Int64: value = static_cast<double>(t.to_vector<std::int64_t>()[0]); break;
      case DataType::Bool: value = t.to_vector<bool>()[0] ? 1.0 : 0.0; break;
      default: c.unsupported("a value of dtype " + std::string(to_string(dt)));
    }
  }
  if (c.constants[0])
    return {c.b.create<FullOp>(c.constant_ints(0, "ConstantOfShape's shape"), value, dt).result()};
  return {c.b.create<FullByOp>(c.input(0), value, dt).result()};
}

std::vector<Value> range(NodeContext& c) {
  return {c.b.create<RangeOp>(c.input(0), c.input(1), c.input(2)).result()};
}

std::vector<Value> tile(NodeContext& c) {
  return {c.b.create<TileOp>(c.input(0), c.input(1)).result()};
}

}  // namespace

void add_shape_ops(OpTable& t) {
  t["ConstantOfShape"] = {&constant_of_shape, 9};
  t["Range"] = {&range, 11};
  t["Tile"] = {&tile, 6};
}

}  // namespace kiln::onnx::detail
