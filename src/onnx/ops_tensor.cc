// ONNX's layout ops: Transpose, Flatten, Concat, Gather, Shape, Size, and
// Reshape, Squeeze, Unsqueeze, Expand, Split and Slice. A shape, axes or
// bounds input known at import (initializers, Constant nodes, folded
// values) becomes an attribute of kiln's op, so result dims stay static;
// one computed at run time (a model exported with dynamic axes) is an
// operand of kiln's "_by" form (kiln/dialect/shape_ops.h), read per run.
// Shape and Size of dims known at import are constants, else kiln.shape /
// kiln.numel.
#include <algorithm>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "op_table.h"
#include "shape_values.h"

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

// [d0 … d(axis-1)] and [d(axis) …] each multiplied out; a side with a dim
// known only at run time is a -1 the reshape infers (both sides: merged at
// run time by kiln.flatten).
std::vector<Value> flatten(NodeContext& c) {
  Value x = c.input(0);
  const auto& d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  std::int64_t axis = c.int_attr("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) c.unsupported("Flatten axis out of range");
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < rank; ++i) {
    std::int64_t& side = i < axis ? outer : inner;
    const std::int64_t di = d[static_cast<std::size_t>(i)];
    side = side < 0 || di < 0 ? -1 : side * di;
  }
  if (outer < 0 && inner < 0) {  // [d0·…, d(axis)·…], both merged at run time
    Value y = c.b.create<FlattenOp>(x, axis, rank - 1).result();
    return {c.b.create<FlattenOp>(y, 0, axis - 1).result()};
  }
  return {c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{outer, inner}).result()};
}

// Dims known at import among `known` (-1 elsewhere); empty when none is.
std::vector<std::int64_t> some_known(std::vector<std::int64_t> known) {
  if (std::all_of(known.begin(), known.end(), [](std::int64_t d) { return d < 0; })) known.clear();
  return known;
}

// allowzero = 0 (the default): a 0 copies the input's dim and one -1 is
// inferred, as kiln.reshape does; allowzero = 1: a 0 is a 0 dim
// (kiln.reshape_by's allowzero). A shape computed at run time: kiln.reshape_by,
// the dims its entries known at import give (shape_values.h) kept static.
std::vector<Value> reshape(NodeContext& c) {
  const bool allowzero = c.int_attr("allowzero", 0) != 0;
  if (!c.constants[1]) {
    Value x = c.input(0);
    // Entries known at import, and run-time ones that are x's own dim at
    // their index (PyTorch's x.reshape(x.shape[0], g, -1, h, w)): a static
    // kiln.reshape whose 0 copies the dim.
    if (!allowzero)
      if (auto shape = reshape_copying_dims(x, c.input(1)))
        return {c.b.create<ReshapeOp>(x, *shape).result()};
    const auto known = reshape_known_dims(shaped_dims(x.type()), shape_values(c.input(1)), allowzero);
    return {c.b.create<ReshapeByOp>(x, c.input(1), allowzero, some_known(known)).result()};
  }
  const std::vector<std::int64_t> shape = c.constant_ints(1, "Reshape's shape");
  if (allowzero && std::find(shape.begin(), shape.end(), 0) != shape.end())
    return {c.b.create<ReshapeByOp>(c.input(0), c.input(1), true).result()};
  return {c.b.create<ReshapeOp>(c.input(0), shape).result()};
}

// Input i is given and computed at run time (an opset-13 axes input, …).
bool run_time_input(const NodeContext& c, std::size_t i) {
  return c.opset >= 13 && i < c.inputs.size() && c.inputs[i] && !c.constants[i];
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
  if (run_time_input(c, 1)) return {c.b.create<SqueezeByOp>(c.input(0), c.input(1)).result()};
  const std::vector<std::int64_t> axes = axes_of(c, false);
  if (axes.empty())  // every dim of extent 1: they must be known
    for (auto d : shaped_dims(c.input(0).type()))
      if (d < 0) c.unsupported("Squeeze without axes of an input with a dim known only at run time");
  return {c.b.create<SqueezeOp>(c.input(0), axes).result()};
}

std::vector<Value> unsqueeze(NodeContext& c) {
  if (run_time_input(c, 1)) return {c.b.create<UnsqueezeByOp>(c.input(0), c.input(1)).result()};
  return {c.b.create<UnsqueezeOp>(c.input(0), axes_of(c, true)).result()};
}

// Small integer inputs known at import (shape pieces, even initializers)
// join as constants, so the entries of a shape vector computed at run time
// that are known at import can be read back (shape_values.h).
std::vector<Value> concat(NodeContext& c) {
  if (!c.has_attr("axis")) c.unsupported("Concat without an axis");
  std::vector<Value> xs;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor* k = i < c.constants.size() ? c.constants[i] : nullptr;
    const bool small_ints = k && k->numel() <= 64 &&
                            (k->dtype() == DataType::Int64 || k->dtype() == DataType::Int32);
    xs.push_back(small_ints ? constant_value(c.b, *k) : c.input(i));
  }
  return {c.b.create<ConcatOp>(xs, c.int_attr("axis", 0)).result()};
}

// The input's dims [start:end) (opset 15's attributes): a constant when
// they are known at import (their values then fold onward), else
// kiln.shape (sliced), read per run.
std::vector<Value> shape(NodeContext& c) {
  const auto& d = shaped_dims(c.input(0).type());
  const auto rank = static_cast<std::int64_t>(d.size());
  auto clamp = [&](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + rank : i, 0, rank); };
  const std::int64_t start = clamp(c.int_attr("start", 0)), end = clamp(c.int_attr("end", rank));
  std::vector<std::int64_t> dims;
  for (std::int64_t i = start; i < end; ++i) {
    if (d[static_cast<std::size_t>(i)] < 0) {
      Value s = c.b.create<ShapeOp>(c.input(0)).result();
      if (start == 0 && end == rank) return {s};
      return {c.b.create<SliceOp>(s, std::vector<std::int64_t>{0}, std::vector<std::int64_t>{start},
                                  std::vector<std::int64_t>{std::max(start, end)})
                  .result()};
    }
    dims.push_back(d[static_cast<std::size_t>(i)]);
  }
  Tensor value = Tensor::from_vector<std::int64_t>(Dims{static_cast<std::int64_t>(dims.size())}, dims);
  c.known_outputs = {value};
  return {constant_value(c.b, value)};
}

// numpy take along `axis`; negative indices count from the end (of a dim
// read at run time when it is not known at import).
std::vector<Value> gather(NodeContext& c) {
  Value x = c.input(0), idx = c.input(1);
  const auto& d = shaped_dims(x.type());
  std::int64_t axis = c.int_attr("axis", 0);
  if (axis < 0) axis += static_cast<std::int64_t>(d.size());
  if (axis < 0 || axis >= static_cast<std::int64_t>(d.size())) c.unsupported("axis out of range");
  const std::int64_t dim = d[static_cast<std::size_t>(axis)];
  // Entries of a shape vector known at import (a static dim of Shape's
  // input) picked by constant indices: a constant, so the shape arithmetic
  // after it folds.
  if (c.constants[1] && !c.constants[0] && d.size() == 1) {
    const auto from = shape_values(x);
    std::vector<std::int64_t> picked;
    for (auto k : c.constant_ints(1, "the indices")) {
      if (k < 0) k += static_cast<std::int64_t>(from.size());
      if (k < 0 || k >= static_cast<std::int64_t>(from.size()) || !from[static_cast<std::size_t>(k)]) break;
      picked.push_back(*from[static_cast<std::size_t>(k)]);
    }
    if (!from.empty() && picked.size() == static_cast<std::size_t>(c.constants[1]->numel()) &&
        shaped_data_type(x.type()) == DataType::Int64) {
      Tensor value = Tensor::from_vector<std::int64_t>(c.constants[1]->dims(), picked);
      c.known_outputs = {value};
      return {constant_value(c.b, value)};
    }
  }
  if (c.constants[1]) {
    std::vector<std::int64_t> v = c.constant_ints(1, "the indices");
    const bool wrap_at_run_time =
        dim < 0 && std::any_of(v.begin(), v.end(), [](std::int64_t k) { return k < 0; });
    for (auto& k : v)
      if (k < 0 && dim >= 0) k += dim;
    idx = constant_value(c.b, Tensor::from_vector<std::int64_t>(c.constants[1]->dims(), v));
    if (!wrap_at_run_time) return {c.b.create<GatherOp>(x, idx, axis).result()};
  }
  // idx < 0 ? idx + dim : idx, the dim read at run time when not known.
  const DataType it = shaped_data_type(idx.type());
  Value zero = c.b.create<FullOp>(std::vector<std::int64_t>{}, 0.0, it).result();
  Value dim_value;
  if (dim >= 0) {
    dim_value = c.b.create<FullOp>(std::vector<std::int64_t>{}, static_cast<double>(dim), it).result();
  } else {
    Value at = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims(), {axis}));
    dim_value = c.b.create<GatherOp>(c.b.create<ShapeOp>(x).result(), at, 0).result();
    if (it != DataType::Int64) dim_value = c.b.create<CastOp>(dim_value, it).result();
  }
  Value wrapped = c.b.create<AddOp>(idx, dim_value).result();
  idx = c.b.create<WhereOp>(c.b.create<LessThanOp>(idx, zero).result(), wrapped, idx).result();
  return {c.b.create<GatherOp>(x, idx, axis).result()};
}

// Bidirectional broadcast of x and the shape: computed here when the shape
// is a constant and x's dims are known, else at run time (kiln.expand_by).
std::vector<Value> expand(NodeContext& c) {
  Value x = c.input(0);
  const auto& d = shaped_dims(x.type());
  if (!c.constants[1] || std::any_of(d.begin(), d.end(), [](std::int64_t v) { return v < 0; })) {
    // Dims known at import: x's other than 1, else the shape's known entry
    // unless it is 1 (then x's dim, which is not known).
    const auto s = shape_values(c.input(1));
    const std::size_t r = std::max(s.size(), d.size());
    std::vector<std::int64_t> known(r, -1);
    for (std::size_t i = 0; i < r && !s.empty(); ++i) {
      const std::int64_t a = i + d.size() >= r ? d[i + d.size() - r] : 1;
      const std::optional<std::int64_t> b =
          i + s.size() >= r ? s[i + s.size() - r] : std::optional<std::int64_t>(1);
      if (a >= 0 && a != 1) known[i] = a;
      else if (b && *b != 1 && *b >= 0) known[i] = *b;
      else if (a == 1 && b && *b >= 0) known[i] = *b;
    }
    return {c.b.create<ExpandByOp>(x, c.input(1), some_known(known)).result()};
  }
  const std::vector<std::int64_t> shape = c.constant_ints(1, "Expand's shape");
  const std::size_t rank = std::max(shape.size(), d.size());
  std::vector<std::int64_t> out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t a = i + d.size() >= rank ? d[i + d.size() - rank] : 1;
    const std::int64_t b = i + shape.size() >= rank ? shape[i + shape.size() - rank] : 1;
    if (a < 0) c.unsupported("Expand of an input with a dim known only at run time");
    if (a != b && a != 1 && b != 1) c.unsupported("shapes that do not broadcast");
    out[i] = a == 1 ? b : a;
  }
  return {c.b.create<ExpandOp>(x, out).result()};
}

// The sizes of Split's num_outputs parts (opset 18) along a dim of `dim`
// elements: ⌈dim / parts⌉ each, the last what is left; empty when the dim
// is known only at run time (split_parts_at_run_time then).
std::vector<std::int64_t> split_parts(NodeContext& c, std::int64_t dim, std::int64_t parts) {
  if (parts < 1 || parts != c.node.output_size())
    c.unsupported("num_outputs " + std::to_string(parts) + " for " + std::to_string(c.node.output_size()) +
                  " outputs");
  if (dim < 0) return {};
  const std::int64_t each = dim / parts + (dim % parts != 0), last = dim - each * (parts - 1);
  if (last < 0)
    c.unsupported("a dim of " + std::to_string(dim) + " in num_outputs " + std::to_string(parts) + " parts");
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), each);
  sizes.back() = last;
  return sizes;
}

// split_parts's sizes as an i64 [parts] computed at run time from x's dim `axis`.
Value split_parts_at_run_time(NodeContext& c, Value x, std::int64_t axis, std::int64_t parts) {
  Value at = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{1}, {axis}));
  Value dim = c.b.create<GatherOp>(c.b.create<ShapeOp>(x).result(), at, 0).result();  // [1]
  auto i64 = [&](std::int64_t v) { return constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{1}, {v})); };
  Value each = c.b.create<DivOp>(c.b.create<AddOp>(dim, i64(parts - 1)).result(), i64(parts)).result();  // ⌈dim / parts⌉
  Value last = c.b.create<SubOp>(dim, c.b.create<MulOp>(each, i64(parts - 1)).result()).result();
  std::vector<Value> sizes(static_cast<std::size_t>(parts - 1), each);
  sizes.push_back(last);
  return c.b.create<ConcatOp>(sizes, 0).result();
}

// Parts along `axis`: sizes from the attribute (before opset 13) or the
// constant input, else (opset 18) num_outputs parts, else equal parts, one
// per output; sizes computed at run time: kiln.split_by.
std::vector<Value> split(NodeContext& c) {
  const std::int64_t axis = c.int_attr("axis", 0);
  if (run_time_input(c, 1)) return c.b.create<SplitByOp>(c.input(0), c.input(1), axis)->results();
  std::vector<std::int64_t> sizes = c.ints_input_or_attr(1, "split", 13, "the split sizes");
  if (c.opset >= 18 && c.has_attr("num_outputs")) {
    if (!sizes.empty()) c.unsupported("both num_outputs and the split sizes");
    const auto& d = shaped_dims(c.input(0).type());
    const auto rank = static_cast<std::int64_t>(d.size());
    if (axis < -rank || axis >= rank) c.unsupported("axis out of range");
    const std::int64_t a = axis < 0 ? axis + rank : axis, parts = c.int_attr("num_outputs", 0);
    sizes = split_parts(c, d[static_cast<std::size_t>(a)], parts);
    if (sizes.empty())
      return c.b.create<SplitByOp>(c.input(0), split_parts_at_run_time(c, c.input(0), a, parts), axis)->results();
  }
  Operation* op = sizes.empty()
                      ? c.b.create<SplitOp>(c.input(0), std::int64_t{c.node.output_size()}, axis)
                      : c.b.create<SplitOp>(c.input(0), sizes, axis);
  return op->results();
}

// An i64 constant [v...] as a kiln value.
Value ints_value(Builder& b, const std::vector<std::int64_t>& v) {
  return constant_value(b, Tensor::from_vector<std::int64_t>(Dims{static_cast<std::int64_t>(v.size())}, v));
}

// x[starts:ends:steps] along axes (attributes before opset 10, inputs
// since): kiln.slice for constant bounds of step 1, kiln.strided_slice for
// other constant steps, kiln.slice_by when a bound is computed at run time
// (absent axes: 0, 1, …; absent steps: 1).
std::vector<Value> slice(NodeContext& c) {
  std::vector<std::int64_t> starts, ends, axes, steps;
  auto given = [&](std::size_t i) { return i < c.inputs.size() && c.inputs[i]; };
  if (c.opset < 10) {
    starts = c.ints_attr("starts");
    ends = c.ints_attr("ends");
    axes = c.ints_attr("axes");
  } else if ((given(1) && !c.constants[1]) || (given(2) && !c.constants[2]) ||
             (given(3) && !c.constants[3]) || (given(4) && !c.constants[4])) {
    Value s = c.input(1), e = c.input(2);
    const auto& sd = shaped_dims(s.type());
    if (sd.size() != 1 || sd[0] < 0)
      c.unsupported("Slice's starts of a length known only at run time");
    std::vector<std::int64_t> iota, ones(static_cast<std::size_t>(sd[0]), 1);
    for (std::int64_t i = 0; i < sd[0]; ++i) iota.push_back(i);
    Value a = given(3) ? c.input(3) : ints_value(c.b, iota);
    Value st = given(4) ? c.input(4) : ints_value(c.b, ones);
    return {c.b.create<SliceByOp>(c.input(0), s, e, a, st).result()};
  } else {
    starts = c.constant_ints(1, "Slice's starts");
    ends = c.constant_ints(2, "Slice's ends");
    if (given(3)) axes = c.constant_ints(3, "Slice's axes");
    if (given(4)) steps = c.constant_ints(4, "Slice's steps");
  }
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  if (axes.size() != starts.size() || ends.size() != starts.size() ||
      (!steps.empty() && steps.size() != starts.size()))
    c.unsupported("starts, ends, axes and steps of different lengths");
  if (std::any_of(steps.begin(), steps.end(), [](std::int64_t s) { return s != 1; }))
    return {c.b.create<StridedSliceOp>(c.input(0), axes, starts, ends, steps).result()};
  return {c.b.create<SliceOp>(c.input(0), axes, starts, ends).result()};
}

// The element count: an i64 scalar constant when the dims are known at
// import, else kiln.numel.
std::vector<Value> size(NodeContext& c) {
  std::int64_t n = 1;
  for (auto d : shaped_dims(c.input(0).type())) {
    if (d < 0) return {c.b.create<NumelOp>(c.input(0)).result()};
    n *= d;
  }
  Tensor value = Tensor::from_vector<std::int64_t>(Dims(), {n});
  c.known_outputs = {value};
  return {constant_value(c.b, value)};
}

}  // namespace

void add_tensor_ops(OpTable& t) {
  t["Size"] = {&size, 1};
  t["Gather"] = {&gather, 1};
  t["Expand"] = {&expand, 8};
  t["Split"] = {&split, 2};
  t["Slice"] = {&slice, 1};
  t["Shape"] = {&shape, 1};
  t["Transpose"] = {&transpose, 1};
  t["Flatten"] = {&flatten, 1};
  t["Reshape"] = {&reshape, 5};
  t["Squeeze"] = {&squeeze, 1};
  t["Unsqueeze"] = {&unsqueeze, 1};
  t["Concat"] = {&concat, 4};
}

}  // namespace kiln::onnx::detail
