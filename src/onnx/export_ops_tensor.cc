// Export of kiln's tensor and shape ops (reshape, flatten, squeeze,
// unsqueeze, transpose, concat, stack, split, slice, gather, expand, pad,
// cumsum), constants (full, builtin.constant), the reductions,
// argmax / argmin, shape and numel.
#include <algorithm>

#include "export_table.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/tensor_attribute.h"

namespace kiln::onnx::detail {

namespace {

void reshape(EmitContext& c) {
  // kiln's 0 (copy the input dim) and -1 (inferred) mean the same in ONNX.
  c.node("Reshape", {c.in(0), c.const_i64(ReshapeOp::dyn_cast(c.op()).attrs().shape)}, {c.out(0)});
}

// flatten: dims before start_axis copied (0), the merged ones -1 or their
// product, the ones after stop_axis as the result knows them.
void flatten(EmitContext& c) {
  const auto a = FlattenOp::dyn_cast(c.op()).attrs();
  const auto& in = c.in_dims(0);
  if (in.empty()) {
    c.node("Reshape", {c.in(0), c.const_i64({1})}, {c.out(0)});
    return;
  }
  const auto start = norm_axis(a.start_axis, in.size()), stop = norm_axis(a.stop_axis, in.size());
  std::vector<std::int64_t> shape(static_cast<std::size_t>(start), 0);
  std::int64_t merged = 1;
  for (auto i = start; i <= stop; ++i)
    merged = (merged < 0 || in[static_cast<std::size_t>(i)] < 0) ? -1 : merged * in[static_cast<std::size_t>(i)];
  shape.push_back(merged);
  bool inferred = merged < 0;
  for (auto i = stop + 1; i < static_cast<std::int64_t>(in.size()); ++i) {
    const auto d = in[static_cast<std::size_t>(i)];
    if (d >= 0) shape.push_back(d);
    else if (start == stop) shape.push_back(0);  // same position in the result
    else if (!inferred) {
      shape.push_back(-1);
      inferred = true;
    } else {
      c.unsupported("flattening with unknown dims both inside and after the merged range");
    }
  }
  c.node("Reshape", {c.in(0), c.const_i64(shape)}, {c.out(0)});
}

// Squeeze of the dims kiln drops (the named dims that are 1, or every dim
// that is 1 when none is named).
void squeeze(EmitContext& c) {
  const auto& in = c.in_dims(0);
  std::vector<std::int64_t> named;
  for (auto a : SqueezeOp::dyn_cast(c.op()).attrs().axes) named.push_back(norm_axis(a, in.size()));
  std::vector<std::int64_t> axes;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i] == 1 && (named.empty() || std::find(named.begin(), named.end(),
                                                  static_cast<std::int64_t>(i)) != named.end()))
      axes.push_back(static_cast<std::int64_t>(i));
  if (axes.empty()) c.node("Identity", {c.in(0)}, {c.out(0)});
  else c.node("Squeeze", {c.in(0), c.const_i64(axes)}, {c.out(0)});
}

void unsqueeze(EmitContext& c) {
  c.node("Unsqueeze", {c.in(0), c.const_i64(UnsqueezeOp::dyn_cast(c.op()).attrs().axes)}, {c.out(0)});
}

void transpose(EmitContext& c) {
  std::vector<std::int64_t> perm;
  for (auto p : TransposeOp::dyn_cast(c.op()).attrs().perm) perm.push_back(norm_axis(p, c.in_dims(0).size()));
  auto& n = c.node("Transpose", {c.in(0)}, {c.out(0)});
  set_attr(n, "perm", perm);
}

void concat(EmitContext& c) {
  std::vector<std::string> ins;
  for (std::size_t i = 0; i < c.num_operands(); ++i) ins.push_back(c.in(i));
  auto& n = c.node("Concat", ins, {c.out(0)});
  set_attr(n, "axis", ConcatOp::dyn_cast(c.op()).attrs().axis);
}

// stack = Unsqueeze each operand at the new axis, then Concat.
void stack(EmitContext& c) {
  const auto axis = norm_axis(StackOp::dyn_cast(c.op()).attrs().axis, c.in_dims(0).size() + 1);
  const std::string axes = c.const_i64({axis});
  std::vector<std::string> ins;
  for (std::size_t i = 0; i < c.num_operands(); ++i) ins.push_back(c.node1("Unsqueeze", {c.in(i), axes}));
  auto& n = c.node("Concat", ins, {c.out(0)});
  set_attr(n, "axis", axis);
}

void split(EmitContext& c) {
  const auto a = SplitOp::dyn_cast(c.op()).attrs();
  const auto axis = norm_axis(a.axis, c.in_dims(0).size());
  std::vector<std::int64_t> sizes;
  std::vector<std::string> outs;
  bool known = true;
  for (std::uint32_t i = 0; i < c.op()->num_results(); ++i) {
    const auto d = c.out_dims(i)[static_cast<std::size_t>(axis)];
    known = known && d >= 0;
    sizes.push_back(d);
    outs.push_back(c.out(i));
  }
  if (!known && a.num == 0) c.unsupported("split into sections along a dim not known at export");
  std::vector<std::string> ins{c.in(0)};
  if (known) ins.push_back(c.const_i64(sizes));  // else equal parts, one per output
  auto& n = c.node("Split", ins, outs);
  set_attr(n, "axis", axis);
}

void slice(EmitContext& c) {
  const auto a = SliceOp::dyn_cast(c.op()).attrs();
  c.node("Slice", {c.in(0), c.const_i64(a.starts), c.const_i64(a.ends), c.const_i64(a.axes)},
         {c.out(0)});
}

void gather(EmitContext& c) {
  auto& n = c.node("Gather", {c.in(0), c.in(1)}, {c.out(0)});
  set_attr(n, "axis", GatherOp::dyn_cast(c.op()).attrs().axis);
}

// expand: kiln's -1 (keep x's dim) is ONNX's 1 (broadcasting keeps it).
void expand(EmitContext& c) {
  auto shape = ExpandOp::dyn_cast(c.op()).attrs().shape;
  for (auto& d : shape)
    if (d == -1) d = 1;
  c.node("Expand", {c.in(0), c.const_i64(shape)}, {c.out(0)});
}

// pad: kiln's (last_before, last_after, prev_before, …) as ONNX's
// [begin of each dim…, end of each dim…].
void pad(EmitContext& c) {
  const auto a = PadOp::dyn_cast(c.op()).attrs();
  const std::size_t rank = c.in_dims(0).size();
  std::vector<std::int64_t> pads(2 * rank, 0);
  for (std::size_t k = 0; 2 * k < a.pads.size(); ++k) {
    const std::size_t dim = rank - 1 - k;
    pads[dim] = a.pads[2 * k];
    if (2 * k + 1 < a.pads.size()) pads[rank + dim] = a.pads[2 * k + 1];
  }
  c.node("Pad", {c.in(0), c.const_i64(pads), c.scalar(c.in_dtype(0), a.value)}, {c.out(0)});
}

void cumsum(EmitContext& c) {
  const auto a = CumsumOp::dyn_cast(c.op()).attrs();
  auto& n = c.node("CumSum", {c.in(0), c.scalar(DataType::Int64, static_cast<double>(a.axis))}, {c.out(0)});
  set_attr(n, "exclusive", static_cast<std::int64_t>(a.exclusive));
  set_attr(n, "reverse", static_cast<std::int64_t>(a.reverse));
}

void full(EmitContext& c) {
  const auto a = FullOp::dyn_cast(c.op()).attrs();
  if (a.shape.empty()) {
    c.node("Identity", {c.scalar(a.dtype, a.value)}, {c.out(0)});
    return;
  }
  for (auto d : a.shape)
    if (d < 0) c.unsupported("a shape with unknown dims");
  // ConstantOfShape's value attribute holds the fill value.
  const std::string bytes = c.value_bytes(a.dtype, a.value);
  const ::onnx::TensorProto one = tensor_proto(a.dtype, {1}, bytes, c.where());
  auto& n = c.node("ConstantOfShape", {c.const_i64(a.shape)}, {c.out(0)});
  set_attr(n, "value", one);
}

void constant(EmitContext& c) {
  const Attribute v = ConstantOp::dyn_cast(c.op()).value();
  if (auto t = v.dyn_cast<TensorAttribute>()) {
    ::onnx::NodeProto& n = c.node("Constant", {}, {c.out(0)});
    set_attr(n, "value", tensor_proto(t.dtype(), t.dims(), t.bytes(), c.where()));
    return;
  }
  const DataType dt = shaped_data_type(c.op()->result_type(0));
  if (!c.out_dims(0).empty()) c.unsupported("a scalar value with a result of rank > 0");
  double x = 0;
  if (auto f = v.dyn_cast<Float64Attribute>()) x = f.value();
  else if (auto f32 = v.dyn_cast<Float32Attribute>()) x = f32.value();
  else if (auto i = v.dyn_cast<Int64Attribute>()) x = static_cast<double>(i.value());
  else if (auto i32 = v.dyn_cast<Int32Attribute>()) x = i32.value();
  else if (auto b = v.dyn_cast<BoolAttribute>()) x = b.value();
  else c.unsupported("a value of attribute kind " + v.to_string());
  c.node("Identity", {c.scalar(dt, x)}, {c.out(0)});
}

// Reductions: ReduceSum takes its axes as an input since opset 13, the
// others as an attribute until opset 18. No axes: every axis.
template <typename ReduceT>
void reduce(EmitContext& c) {
  const auto a = ReduceT::dyn_cast(c.op()).attrs();
  std::string type = std::is_same_v<ReduceT, SumOp> ? "ReduceSum"
                     : std::is_same_v<ReduceT, MeanOp> ? "ReduceMean" : "ReduceMax";
  std::vector<std::string> ins{c.in(0)};
  if (std::is_same_v<ReduceT, SumOp> && !a.axis.empty()) ins.push_back(c.const_i64(a.axis));
  auto& n = c.node(type, ins, {c.out(0)});
  if (!std::is_same_v<ReduceT, SumOp> && !a.axis.empty()) set_attr(n, "axes", a.axis);
  set_attr(n, "keepdims", static_cast<std::int64_t>(a.keepdim));
}

template <typename ArgT>
void arg_reduce(EmitContext& c) {
  const auto a = ArgT::dyn_cast(c.op()).attrs();
  auto& n = c.node(std::is_same_v<ArgT, ArgMaxOp> ? "ArgMax" : "ArgMin", {c.in(0)}, {c.out(0)});
  set_attr(n, "axis", a.axis);
  set_attr(n, "keepdims", static_cast<std::int64_t>(a.keepdim));
}

}  // namespace

void add_export_tensor(ExportTable& t) {
  t["kiln.reshape"] = &reshape;
  t["kiln.flatten"] = &flatten;
  t["kiln.squeeze"] = &squeeze;
  t["kiln.unsqueeze"] = &unsqueeze;
  t["kiln.transpose"] = &transpose;
  t["kiln.concat"] = &concat;
  t["kiln.stack"] = &stack;
  t["kiln.split"] = &split;
  t["kiln.slice"] = &slice;
  t["kiln.gather"] = &gather;
  t["kiln.expand"] = &expand;
  t["kiln.pad"] = &pad;
  t["kiln.cumsum"] = &cumsum;
  t["kiln.full"] = &full;
  t["builtin.constant"] = &constant;
  t["kiln.sum"] = &reduce<SumOp>;
  t["kiln.mean"] = &reduce<MeanOp>;
  t["kiln.max"] = &reduce<MaxOp>;
  t["kiln.argmax"] = &arg_reduce<ArgMaxOp>;
  t["kiln.argmin"] = &arg_reduce<ArgMinOp>;
  t["kiln.shape"] = same_as("Shape");  // i64 [rank] in both
  t["kiln.numel"] = same_as("Size");   // i64 scalar in both
}

}  // namespace kiln::onnx::detail
