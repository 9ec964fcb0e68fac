// Export of kiln's run-time shape ops (include/kiln/dialect/shape_ops.h:
// what the importer makes of shapes, bounds and axes computed per run) and
// strided_slice: each is the ONNX op it was imported from, with its shape,
// bounds, axes or repeats operand cast to int64 where kiln has it as int32.
#include "export_table.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"

namespace kiln::onnx::detail {

namespace {

// Operand i as int64 (ONNX's shape, axes and repeats inputs are int64).
std::string as_i64(EmitContext& c, std::size_t i) {
  if (c.in_dtype(i) == DataType::Int64) return c.in(i);
  ::onnx::NodeProto* n = nullptr;
  std::string o = c.node1("Cast", {c.in(i)}, &n);
  set_attr(*n, "to", std::int64_t{::onnx::TensorProto_DataType_INT64});
  return o;
}

// Operand i as a rank-0 tensor (Range's scalars; kiln also takes [1]).
std::string as_scalar(EmitContext& c, std::size_t i) {
  if (c.in_dims(i).empty()) return c.in(i);
  return c.node1("Reshape", {c.in(i), c.const_i64({})});
}

void reshape_by(EmitContext& c) {
  auto& n = c.node("Reshape", {c.in(0), as_i64(c, 1)}, {c.out(0)});
  set_attr(n, "allowzero", static_cast<std::int64_t>(ReshapeByOp::dyn_cast(c.op()).attrs().allowzero));
}

void strided_slice(EmitContext& c) {
  const auto a = StridedSliceOp::dyn_cast(c.op()).attrs();
  c.node("Slice",
         {c.in(0), c.const_i64(a.starts), c.const_i64(a.ends), c.const_i64(a.axes), c.const_i64(a.steps)},
         {c.out(0)});
}

void slice_by(EmitContext& c) {
  c.node("Slice", {c.in(0), as_i64(c, 1), as_i64(c, 2), as_i64(c, 3), as_i64(c, 4)}, {c.out(0)});
}

void split_by(EmitContext& c) {
  std::vector<std::string> outs;
  for (std::uint32_t i = 0; i < c.op()->num_results(); ++i) outs.push_back(c.out(i));
  auto& n = c.node("Split", {c.in(0), as_i64(c, 1)}, outs);
  set_attr(n, "axis", SplitByOp::dyn_cast(c.op()).attrs().axis);
}

void sum_by(EmitContext& c) {
  auto& n = c.node("ReduceSum", {c.in(0), as_i64(c, 1)}, {c.out(0)});
  set_attr(n, "keepdims", static_cast<std::int64_t>(SumByOp::dyn_cast(c.op()).attrs().keepdims));
}

// x and a shape / axes / repeats operand: the ONNX op with that operand as int64.
Emitter with_i64_operand(std::string onnx_type) {
  return [onnx_type](EmitContext& c) { c.node(onnx_type, {c.in(0), as_i64(c, 1)}, {c.out(0)}); };
}

void full_by(EmitContext& c) {
  const auto a = FullByOp::dyn_cast(c.op()).attrs();
  const std::string bytes = c.value_bytes(a.dtype, a.value);
  auto& n = c.node("ConstantOfShape", {as_i64(c, 0)}, {c.out(0)});
  set_attr(n, "value", tensor_proto(a.dtype, {1}, bytes, c.where()));
}

void range(EmitContext& c) {
  c.node("Range", {as_scalar(c, 0), as_scalar(c, 1), as_scalar(c, 2)}, {c.out(0)});
}

}  // namespace

void add_export_shape(ExportTable& t) {
  t["kiln.reshape_by"] = &reshape_by;
  t["kiln.expand_by"] = with_i64_operand("Expand");
  t["kiln.strided_slice"] = &strided_slice;
  t["kiln.slice_by"] = &slice_by;
  t["kiln.squeeze_by"] = with_i64_operand("Squeeze");
  t["kiln.unsqueeze_by"] = with_i64_operand("Unsqueeze");
  t["kiln.split_by"] = &split_by;
  t["kiln.sum_by"] = &sum_by;
  t["kiln.tile"] = with_i64_operand("Tile");
  t["kiln.full_by"] = &full_by;
  t["kiln.range"] = &range;
}

}  // namespace kiln::onnx::detail
