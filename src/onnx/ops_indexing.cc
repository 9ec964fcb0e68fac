// ONNX's element-wise indexing: GatherElements → kiln.take_along_axis,
// ScatterElements (and its opset 9–10 name Scatter) → kiln.put_along_axis,
// GatherND → kiln.gather_nd, ScatterND → kiln.scatter_nd. Negative indices
// count from the end of their dim, as ONNX says; reduction none / add / mul
// (opset 16).
#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

std::string reduction(const NodeContext& c) {
  const auto* r = c.attribute("reduction");
  const std::string s = r ? r->s() : "none";
  if (s != "none" && s != "add" && s != "mul") c.unsupported("reduction '" + s + "'");
  return s;
}

std::vector<Value> gather_elements(NodeContext& c) {
  return {c.b.create<TakeAlongAxisOp>(c.input(0), c.input(1), c.int_attr("axis", 0)).result()};
}

std::vector<Value> scatter_elements(NodeContext& c) {
  return {c.b.create<PutAlongAxisOp>(c.input(0), c.input(1), c.input(2), c.int_attr("axis", 0),
                                     reduction(c))
              .result()};
}

std::vector<Value> gather_nd(NodeContext& c) {
  return {c.b.create<GatherNdOp>(c.input(0), c.input(1), c.int_attr("batch_dims", 0)).result()};
}

std::vector<Value> scatter_nd(NodeContext& c) {
  return {c.b.create<ScatterNdOp>(c.input(0), c.input(1), c.input(2), reduction(c)).result()};
}

}  // namespace

void add_indexing_ops(OpTable& t) {
  t["GatherElements"] = {&gather_elements, 11};
  t["ScatterElements"] = {&scatter_elements, 11};
  t["Scatter"] = {&scatter_elements, 9, 10};
  t["GatherND"] = {&gather_nd, 11};
  t["ScatterND"] = {&scatter_nd, 11};
}

}  // namespace kiln::onnx::detail
