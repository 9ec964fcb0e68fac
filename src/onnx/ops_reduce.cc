// ONNX's reductions with kiln counterparts: ReduceSum, ReduceMean, ReduceMax.
// Axes are an attribute until ReduceSum's opset 13 (the others' 18, past
// kiln's range); as an input they must be known at import. No axes reduce
// every dim, unless noop_with_empty_axes = 1 (then the input is the result).
#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

template <typename OpT, bool AxesInputFrom13>
std::vector<Value> reduce(NodeContext& c) {
  std::vector<std::int64_t> axes;
  if (AxesInputFrom13 && c.opset >= 13) {
    if (c.inputs.size() > 1 && c.inputs[1]) axes = c.constant_ints(1, "the axes");
  } else {
    axes = c.ints_attr("axes");
  }
  if (axes.empty() && c.int_attr("noop_with_empty_axes", 0) != 0) return {c.input(0)};
  return {c.b.create<OpT>(c.input(0), axes, c.int_attr("keepdims", 1) != 0).result()};
}

}  // namespace

void add_reduce_ops(OpTable& t) {
  t["ReduceSum"] = {&reduce<SumOp, true>, 1};
  t["ReduceMean"] = {&reduce<MeanOp, false>, 1};
  t["ReduceMax"] = {&reduce<MaxOp, false>, 1};
}

}  // namespace kiln::onnx::detail
