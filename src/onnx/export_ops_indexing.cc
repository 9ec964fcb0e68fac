// Export of kiln's indexing and search ops: take_along_axis / put_along_axis
// (GatherElements / ScatterElements), gather_nd / scatter_nd (GatherND /
// ScatterND), topk (TopK) and one_hot (OneHot, f32 values 0 and 1).
#include "export_table.h"
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::onnx::detail {

namespace {

// kiln's reduction names are ONNX's; "max" and "min" arrived in opset 18.
void set_reduction(EmitContext& c, ::onnx::NodeProto& n, const std::string& r) {
  if (r == "max" || r == "min")
    c.unsupported("reduction '" + r + "' (ONNX has it from opset 18; kiln exports opset 17)");
  if (r != "none") {
    auto* a = n.add_attribute();
    a->set_name("reduction");
    a->set_type(::onnx::AttributeProto_AttributeType_STRING);
    a->set_s(r);
  }
}

void take_along_axis(EmitContext& c) {
  auto& n = c.node("GatherElements", {c.in(0), c.in(1)}, {c.out(0)});
  set_attr(n, "axis", TakeAlongAxisOp::dyn_cast(c.op()).attrs().axis);
}

void put_along_axis(EmitContext& c) {
  const auto a = PutAlongAxisOp::dyn_cast(c.op()).attrs();
  auto& n = c.node("ScatterElements", {c.in(0), c.in(1), c.in(2)}, {c.out(0)});
  set_attr(n, "axis", a.axis);
  set_reduction(c, n, a.reduction);
}

// ONNX's GatherND / ScatterND indices are int64.
std::string index_i64(EmitContext& c, std::size_t i) {
  if (c.in_dtype(i) == DataType::Int64) return c.in(i);
  ::onnx::NodeProto* n = nullptr;
  std::string o = c.node1("Cast", {c.in(i)}, &n);
  set_attr(*n, "to", std::int64_t{::onnx::TensorProto_DataType_INT64});
  return o;
}

void gather_nd(EmitContext& c) {
  auto& n = c.node("GatherND", {c.in(0), index_i64(c, 1)}, {c.out(0)});
  set_attr(n, "batch_dims", GatherNdOp::dyn_cast(c.op()).attrs().batch_dims);
}

void scatter_nd(EmitContext& c) {
  auto& n = c.node("ScatterND", {c.in(0), index_i64(c, 1), c.in(2)}, {c.out(0)});
  set_reduction(c, n, ScatterNdOp::dyn_cast(c.op()).attrs().reduction);
}

void topk(EmitContext& c) {
  const auto a = TopKOp::dyn_cast(c.op()).attrs();
  auto& n = c.node("TopK", {c.in(0), c.const_i64({a.k})}, {c.out(0), c.out(1)});
  set_attr(n, "axis", a.axis);
  set_attr(n, "largest", static_cast<std::int64_t>(a.largest));
  set_attr(n, "sorted", static_cast<std::int64_t>(a.sorted));
}

void one_hot(EmitContext& c) {
  const std::int64_t classes = OneHotOp::dyn_cast(c.op()).attrs().num_classes;
  const float off_on[2] = {0.0f, 1.0f};
  const std::string values =
      c.constant(DataType::Float32, {2}, {reinterpret_cast<const char*>(off_on), sizeof(off_on)});
  auto& n = c.node("OneHot", {c.in(0), c.scalar(DataType::Int64, static_cast<double>(classes)), values},
                   {c.out(0)});
  set_attr(n, "axis", std::int64_t{-1});
}

}  // namespace

void add_export_indexing(ExportTable& t) {
  t["kiln.take_along_axis"] = &take_along_axis;
  t["kiln.put_along_axis"] = &put_along_axis;
  t["kiln.gather_nd"] = &gather_nd;
  t["kiln.scatter_nd"] = &scatter_nd;
  t["kiln.topk"] = &topk;
  t["kiln.one_hot"] = &one_hot;
}

}  // namespace kiln::onnx::detail
