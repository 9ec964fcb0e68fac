// ONNX ops that move or pick elements, composed of kiln ops: Pad (constant
// mode → kiln.pad; edge and reflect → one gather per padded axis, from
// indices computed at import, or at run time for pads computed then), DepthToSpace / SpaceToDepth
// (reshape, transpose, reshape), TopK (kiln.topk; a k computed at run time slices a full sort),
// OneHot (a comparison with the positions 0 … depth-1, so out-of-range indices give all off-values
// as ONNX says), and the normalizations InstanceNormalization, MeanVarianceNormalization and LRN.
#include <algorithm>
#include <cmath>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "node_helpers.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

Value i64_constant(NodeContext& c, const std::vector<std::int64_t>& dims,
                   const std::vector<std::int64_t>& v) {
  return constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims(dims), v));
}

// The scalar a constant input holds, as a double.
double scalar_value(NodeContext& c, std::size_t i, const std::string& what) {
  if (!c.constants[i]) c.unsupported(what + " (input #" + std::to_string(i) + ") computed at run time");
  const Tensor& t = *c.constants[i];
  if (t.numel() != 1) c.unsupported(what + " must hold one value");
  switch (t.dtype()) {
    case DataType::Float32: return t.to_vector<float>()[0];
    case DataType::Float64: return t.to_vector<double>()[0];
    case DataType::Int32: return t.to_vector<std::int32_t>()[0];
    case DataType::Int64: return static_cast<double>(t.to_vector<std::int64_t>()[0]);
    case DataType::Bool: return t.to_vector<bool>()[0] ? 1.0 : 0.0;
    default: c.unsupported(what + " of dtype " + std::string(to_string(t.dtype())));
  }
}

}  // namespace

// Pad with its pads (or constant_value) computed at run time: along each
// axis a gather of the source positions range(n + before + after) - before,
// clamped to the axis (edge), reflected at its ends (reflect), or clamped
// and then replaced by the value where they fall outside (constant).
Value pad_at_run_time(NodeContext& c, Value x, Value pads, Value fill, const std::string& mode) {
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    c.unsupported("Pad mode '" + mode + "'");
  const std::vector<std::int64_t> d = known_dims(c, x, "Pad with pads computed at run time");
  const auto rank = static_cast<std::int64_t>(d.size());
  const auto pad_len = shaped_dims(pads.type());
  if (pad_len.size() != 1 || (pad_len[0] >= 0 && pad_len[0] != 2 * rank))
    c.unsupported("pads of shape " + meta::dims_string(pad_len) + " for an input of rank " +
                  std::to_string(rank));
  if (dtype_of(pads) != DataType::Int64) pads = c.b.create<CastOp>(pads, DataType::Int64).result();
  auto i64 = [&](std::int64_t v) { return scalar(c, DataType::Int64, static_cast<double>(v)); };
  auto pad_at = [&](std::int64_t k) {
    return c.b.create<GatherOp>(pads, i64_constant(c, {}, {k}), 0).result();
  };
  for (std::int64_t a = 0; a < rank; ++a) {
    const std::int64_t n = d[static_cast<std::size_t>(a)];
    if (n == 0) c.unsupported("Pad of an empty axis with pads computed at run time");
    Value before = pad_at(a), after = pad_at(a + rank);
    Value length = c.b.create<AddOp>(c.b.create<AddOp>(before, after).result(), i64(n)).result();
    Value src =
        c.b.create<SubOp>(c.b.create<RangeOp>(i64(0), length, i64(1)).result(), before).result();
    Value inside;
    if (mode == "constant")
      inside = c.b.create<LogicalAndOp>(c.b.create<GreaterEqualOp>(src, i64(0)).result(),
                                        c.b.create<LessThanOp>(src, i64(n)).result())
                   .result();
    if (mode == "reflect" && n > 1) {  // without repeating the border
      const std::int64_t period = 2 * (n - 1);
      src = c.b.create<ModOp>(src, i64(period)).result();
      src = c.b.create<WhereOp>(c.b.create<GreaterEqualOp>(src, i64(n)).result(),
                                c.b.create<SubOp>(i64(period), src).result(), src)
                .result();
    }
    src = c.b.create<MinimumOp>(c.b.create<MaximumOp>(src, i64(0)).result(), i64(n - 1)).result();
    x = c.b.create<GatherOp>(x, src, a).result();
    if (mode == "constant") {  // the mask along the axis: [length, 1, …]
      std::vector<std::int64_t> along(static_cast<std::size_t>(rank - a), 1);
      along[0] = -1;
      x = c.b.create<WhereOp>(c.b.create<ReshapeOp>(inside, along).result(), x, fill).result();
    }
  }
  return x;
}

namespace {

// Pad's pads for every axis of a rank-`rank` input from pads for `axes`
// (opset 18: begins then ends, one per axis named; the others get 0).
std::vector<std::int64_t> pads_of_axes(NodeContext& c, const std::vector<std::int64_t>& pads,
                                       const std::vector<std::int64_t>& axes, std::int64_t rank) {
  const std::size_t n = axes.size();
  if (pads.size() != 2 * n)
    c.unsupported("pads of length " + std::to_string(pads.size()) + " for " + std::to_string(n) + " axes");
  std::vector<std::int64_t> all(static_cast<std::size_t>(2 * rank), 0);
  const std::vector<std::int64_t> at = c.distinct_axes(axes, rank);
  for (std::size_t k = 0; k < n; ++k) {
    all[static_cast<std::size_t>(at[k])] = pads[k];
    all[static_cast<std::size_t>(at[k] + rank)] = pads[k + n];
  }
  return all;
}

// Pads: [x1_begin, x2_begin, …, x1_end, x2_end, …] (an attribute before
// opset 11, a constant input since, or computed at run time); negative
// pads crop; since opset 18 an axes input names the axes the pads are for.
std::vector<Value> pad(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  std::vector<std::int64_t> pads;
  double value = 0.0;
  std::string mode = "constant";
  if (const auto* m = c.attribute("mode")) mode = m->s();
  if (c.opset < 11) {
    pads = c.ints_attr(c.opset < 2 ? "paddings" : "pads");
    value = c.float_attr("value", 0.0f);
  } else {
    Value pads_value = c.input(1);
    if (c.inputs.size() > 3 && c.inputs[3]) {  // opset 18: pads for these axes only
      pads = pads_of_axes(c, c.constant_ints(1, "Pad's pads (with axes)"), c.constant_ints(3, "Pad's axes"), rank);
      pads_value = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{2 * rank}, pads));
    }
    if (!c.constants[1] || (c.inputs.size() > 2 && c.inputs[2] && !c.constants[2]))
      return {pad_at_run_time(
          c, c.input(0), pads_value,
          c.inputs.size() > 2 && c.inputs[2]
              ? c.b.create<ReshapeOp>(c.inputs[2], std::vector<std::int64_t>{}).result()
              : scalar(c, dtype_of(c.input(0)), 0.0),
          mode)};
    if (pads.empty()) pads = c.constant_ints(1, "Pad's pads");
    if (c.inputs.size() > 2 && c.inputs[2]) value = scalar_value(c, 2, "Pad's constant_value");
  }
  if (static_cast<std::int64_t>(pads.size()) != 2 * rank)
    c.unsupported("pads of length " + std::to_string(pads.size()) + " for an input of rank " +
                  std::to_string(rank));
  if (mode == "constant") {
    std::vector<std::int64_t> torch_order;  // last dim first: (before, after) pairs
    for (std::int64_t a = rank - 1; a >= 0; --a) {
      torch_order.push_back(pads[static_cast<std::size_t>(a)]);
      torch_order.push_back(pads[static_cast<std::size_t>(a + rank)]);
    }
    return {c.b.create<PadOp>(x, torch_order, value).result()};
  }
  if (mode != "edge" && mode != "reflect") c.unsupported("Pad mode '" + mode + "'");
  const std::vector<std::int64_t> d = known_dims(c, x, "Pad in " + mode + " mode");
  for (std::int64_t a = 0; a < rank; ++a) {
    const std::int64_t before = pads[static_cast<std::size_t>(a)],
                       after = pads[static_cast<std::size_t>(a + rank)],
                       n = d[static_cast<std::size_t>(a)];
    if (before == 0 && after == 0) continue;
    const std::int64_t out = n + before + after;
    if (out < 0) c.unsupported("pads that crop axis " + std::to_string(a) + " below zero");
    if (n == 0) c.unsupported("Pad in " + mode + " mode of an empty axis");
    if (mode == "reflect" && (before >= n || after >= n))
      c.unsupported("reflect pads as large as the axis (" + std::to_string(n) + ")");
    std::vector<std::int64_t> idx(static_cast<std::size_t>(out));
    for (std::int64_t i = 0; i < out; ++i) {
      std::int64_t s = i - before;
      if (mode == "edge") {
        s = std::clamp<std::int64_t>(s, 0, n - 1);
      } else if (n > 1) {  // reflect without repeating the border
        const std::int64_t period = 2 * (n - 1);
        s = ((s % period) + period) % period;
        if (s >= n) s = period - s;
      } else {
        s = 0;
      }
      idx[static_cast<std::size_t>(i)] = s;
    }
    x = c.b.create<GatherOp>(x, i64_constant(c, {out}, idx), a).result();
  }
  return {x};
}

// [N, C, H, W] ↔ [N, C/b², H·b, W·b]: DCR (depth, column, row; the default)
// or CRD order of the channels.
std::vector<Value> depth_to_space(NodeContext& c) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = known_dims(c, x, "DepthToSpace");
  if (d.size() != 4) c.unsupported("DepthToSpace of an input of rank " + std::to_string(d.size()));
  const std::int64_t b = c.int_attr("blocksize", 0), n = d[0], ch = d[1], h = d[2], w = d[3];
  if (b <= 0 || ch % (b * b) != 0) c.unsupported("blocksize " + std::to_string(b) + " for " + std::to_string(ch) + " channels");
  std::string mode = "DCR";
  if (const auto* m = c.attribute("mode")) mode = m->s();
  Value r;
  if (mode == "DCR") {
    r = c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{n, b, b, ch / (b * b), h, w}).result();
    r = c.b.create<TransposeOp>(r, std::vector<std::int64_t>{0, 3, 4, 1, 5, 2}).result();
  } else if (mode == "CRD") {
    r = c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{n, ch / (b * b), b, b, h, w}).result();
    r = c.b.create<TransposeOp>(r, std::vector<std::int64_t>{0, 1, 4, 2, 5, 3}).result();
  } else {
    c.unsupported("mode '" + mode + "'");
  }
  return {c.b.create<ReshapeOp>(r, std::vector<std::int64_t>{n, ch / (b * b), h * b, w * b}).result()};
}

std::vector<Value> space_to_depth(NodeContext& c) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = known_dims(c, x, "SpaceToDepth");
  if (d.size() != 4) c.unsupported("SpaceToDepth of an input of rank " + std::to_string(d.size()));
  const std::int64_t b = c.int_attr("blocksize", 0), n = d[0], ch = d[1], h = d[2], w = d[3];
  if (b <= 0 || h % b != 0 || w % b != 0) c.unsupported("blocksize " + std::to_string(b) + " for " + std::to_string(h) + "×" + std::to_string(w));
  Value r = c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{n, ch, h / b, b, w / b, b}).result();
  r = c.b.create<TransposeOp>(r, std::vector<std::int64_t>{0, 3, 5, 1, 2, 4}).result();
  return {c.b.create<ReshapeOp>(r, std::vector<std::int64_t>{n, ch * b * b, h / b, w / b}).result()};
}

// (values, indices): k from the attribute before opset 10, a constant
// input since.
std::vector<Value> top_k(NodeContext& c) {
  const std::int64_t axis = c.int_attr("axis", -1);
  const bool largest = c.int_attr("largest", 1) != 0, sorted = c.int_attr("sorted", 1) != 0;
  if (c.opset >= 10 && !c.constants[1]) {
    // k computed at run time: the whole axis sorted, then its first k kept
    const std::vector<std::int64_t> d = shaped_dims(c.input(0).type());
    const auto rank = static_cast<std::int64_t>(d.size());
    const std::int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) c.unsupported("axis " + std::to_string(axis) + " out of range");
    if (d[static_cast<std::size_t>(a)] < 0)
      c.unsupported("k computed at run time along an axis whose extent is known only at run time");
    Operation* all =
        c.b.create<TopKOp>(c.input(0), d[static_cast<std::size_t>(a)], a, largest, true);
    Value k = c.b.create<ReshapeOp>(c.input(1), std::vector<std::int64_t>{1}).result();
    Value zero = i64_constant(c, {1}, {0}), axes = i64_constant(c, {1}, {a}),
          one = i64_constant(c, {1}, {1});
    auto first_k = [&](Value v) { return c.b.create<SliceByOp>(v, zero, k, axes, one).result(); };
    return {first_k(all->result(0)), first_k(all->result(1))};
  }
  const std::int64_t k = c.opset < 10 ? c.int_attr("k", -1) : c.constant_int(1, "TopK's k");
  Operation* op = c.b.create<TopKOp>(c.input(0), k, axis, largest, sorted);
  return op->results();
}

// values[1] where the index (negative: counting from depth) equals the
// position along `axis`, values[0] elsewhere.
std::vector<Value> one_hot(NodeContext& c) {
  Value ids = c.input(0), values = c.input(2);
  const auto in_rank = static_cast<std::int64_t>(shaped_dims(ids.type()).size());
  std::int64_t axis = c.int_attr("axis", -1);
  if (axis < 0) axis += in_rank + 1;
  if (axis < 0 || axis > in_rank) c.unsupported("axis out of range");
  // depth (an i64 scalar) and the positions 0 … depth-1 along `axis`: known
  // at import, or computed at run time (kiln.range).
  Value depth, positions;
  std::vector<std::int64_t> pos_dims(static_cast<std::size_t>(in_rank + 1), 1);
  if (c.constants[1]) {
    const auto n = static_cast<std::int64_t>(scalar_value(c, 1, "OneHot's depth"));
    if (n < 1) c.unsupported("depth " + std::to_string(n));
    std::vector<std::int64_t> pos;
    for (std::int64_t i = 0; i < n; ++i) pos.push_back(i);
    pos_dims[static_cast<std::size_t>(axis)] = n;
    depth = scalar(c, DataType::Int64, static_cast<double>(n));
    positions = i64_constant(c, pos_dims, pos);
  } else {
    depth = c.b.create<ReshapeOp>(c.input(1), std::vector<std::int64_t>{}).result();
    if (dtype_of(depth) != DataType::Int64)
      depth = c.b.create<CastOp>(depth, DataType::Int64).result();
    pos_dims[static_cast<std::size_t>(axis)] = -1;
    Value range =
        c.b.create<RangeOp>(scalar(c, DataType::Int64, 0.0), depth, scalar(c, DataType::Int64, 1.0))
            .result();
    positions = c.b.create<ReshapeOp>(range, pos_dims).result();
  }
  if (dtype_of(ids) != DataType::Int64) ids = c.b.create<CastOp>(ids, DataType::Int64).result();
  Value wrapped = c.b.create<AddOp>(ids, depth).result();
  ids = c.b.create<WhereOp>(c.b.create<LessThanOp>(ids, scalar(c, DataType::Int64, 0.0)).result(),
                            wrapped, ids)
            .result();
  ids = c.b.create<UnsqueezeOp>(ids, std::vector<std::int64_t>{axis}).result();
  Value hit = c.b.create<EqualOp>(ids, positions).result();
  Value off = c.b.create<GatherOp>(values, i64_constant(c, {1}, {0}), 0).result();
  Value on = c.b.create<GatherOp>(values, i64_constant(c, {1}, {1}), 0).result();
  return {c.b.create<WhereOp>(hit, on, off).result()};
}

// (x - mean) / sqrt(var + epsilon) over `axes` (kept as extent 1).
Value normalize(NodeContext& c, Value x, const std::vector<std::int64_t>& axes, double epsilon) {
  Value mean = c.b.create<MeanOp>(x, axes, true).result();
  Value centered = c.b.create<SubOp>(x, mean).result();
  Value var = c.b.create<MeanOp>(c.b.create<SquareOp>(centered).result(), axes, true).result();
  Value std = c.b.create<SqrtOp>(c.b.create<AddOp>(var, scalar(c, dtype_of(x), epsilon)).result()).result();
  return c.b.create<DivOp>(centered, std).result();
}

// Per image and channel over the spatial dims, then scale and B per channel.
std::vector<Value> instance_norm(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  if (rank < 3) c.unsupported("an input of rank below 3");
  std::vector<std::int64_t> axes, per_channel(static_cast<std::size_t>(rank), 1);
  for (std::int64_t a = 2; a < rank; ++a) axes.push_back(a);
  per_channel[1] = -1;
  Value y = normalize(c, x, axes, c.float_attr("epsilon", 1e-5f));
  y = c.b.create<MulOp>(y, c.b.create<ReshapeOp>(c.input(1), per_channel).result()).result();
  return {c.b.create<AddOp>(y, c.b.create<ReshapeOp>(c.input(2), per_channel).result()).result()};
}

// GroupNormalization (opset 18): per image and group of num_groups
// channel groups, over the group's channels and the spatial dims; then
// scale and B, one per group in opset 18 (each group's for its channels)
// and one per channel since 21. The channel count must be known at import.
// Differentiable (the reshape back is kiln.reshape_by).
std::vector<Value> group_norm(NodeContext& c) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  if (rank < 3) c.unsupported("an input of rank below 3");
  const std::int64_t groups = c.int_attr("num_groups", 0), ch = d[1];
  if (groups < 1 || ch < 0 || ch % groups != 0)
    c.unsupported("num_groups " + std::to_string(groups) + " for " + std::to_string(ch) +
                  " channels (known at import, a multiple of the groups)");
  // stash_type 1 (the default): 16-bit inputs normalized in f32
  const DataType dt = dtype_of(x);
  const bool widen = (dt == DataType::Float16 || dt == DataType::BFloat16) && c.int_attr("stash_type", 1) == 1;
  Value grouped = c.b.create<ReshapeOp>(widen ? c.b.create<CastOp>(x, DataType::Float32).result() : x,
                                        std::vector<std::int64_t>{0, groups, -1})
                      .result();
  Value y = normalize(c, grouped, {2}, c.float_attr("epsilon", 1e-5f));
  if (widen) y = c.b.create<CastOp>(y, dt).result();
  y = c.b.create<ReshapeByOp>(y, c.b.create<ShapeOp>(x).result(), false, d).result();  // x's known dims kept
  std::vector<std::int64_t> per_channel(static_cast<std::size_t>(rank), 1);
  per_channel[1] = ch;
  auto channel = [&](std::size_t i) {
    Value p = c.input(i);
    if (c.opset < 21)
      p = c.b.create<ExpandOp>(c.b.create<ReshapeOp>(p, std::vector<std::int64_t>{groups, 1}).result(),
                               std::vector<std::int64_t>{groups, ch / groups})
              .result();
    return c.b.create<ReshapeOp>(p, per_channel).result();
  };
  y = c.b.create<MulOp>(y, channel(1)).result();
  return {c.b.create<AddOp>(y, channel(2)).result()};
}

// (x - E[x]) / (sqrt(E[(x - E[x])²]) + 1e-9) over `axes` (default 0, 2, 3),
// as ONNX's function body.
std::vector<Value> mean_variance_norm(NodeContext& c) {
  Value x = c.input(0);
  std::vector<std::int64_t> axes = c.ints_attr("axes");
  if (!c.has_attr("axes")) axes = {0, 2, 3};
  Value mean = c.b.create<MeanOp>(x, axes, true).result();
  Value centered = c.b.create<SubOp>(x, mean).result();
  Value var = c.b.create<MeanOp>(c.b.create<SquareOp>(centered).result(), axes, true).result();
  Value std = c.b.create<AddOp>(c.b.create<SqrtOp>(var).result(), scalar(c, dtype_of(x), 1e-9)).result();
  return {c.b.create<DivOp>(centered, std).result()};
}

// x / (bias + alpha / size · Σ x² over a window of `size` channels)^beta;
// the window [c - ⌊(size-1)/2⌋, c + ⌈(size-1)/2⌉] clipped to the channels.
std::vector<Value> lrn(NodeContext& c) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = known_dims(c, x, "LRN");
  if (d.size() < 3) c.unsupported("an input of rank below 3");
  const std::int64_t size = c.int_attr("size", 0);
  if (size < 1) c.unsupported("size " + std::to_string(size));
  const double alpha = c.float_attr("alpha", 1e-4f), beta = c.float_attr("beta", 0.75f),
               bias = c.float_attr("bias", 1.0f);
  const std::int64_t lo = (size - 1) / 2, hi = size - 1 - lo, ch = d[1];
  const auto rank = static_cast<std::int64_t>(d.size());
  std::vector<std::int64_t> torch_pads(static_cast<std::size_t>(2 * rank), 0);
  // kiln.pad's order: last dim first; the channel dim (1) is pair rank - 2.
  torch_pads[static_cast<std::size_t>(2 * (rank - 2))] = lo;
  torch_pads[static_cast<std::size_t>(2 * (rank - 2) + 1)] = hi;
  Value sq = c.b.create<PadOp>(c.b.create<SquareOp>(x).result(), torch_pads, 0.0).result();
  Value sum;
  for (std::int64_t j = 0; j < size; ++j) {
    Value part = c.b.create<SliceOp>(sq, std::vector<std::int64_t>{1}, std::vector<std::int64_t>{j},
                                     std::vector<std::int64_t>{j + ch})
                     .result();
    sum = sum ? c.b.create<AddOp>(sum, part).result() : part;
  }
  const DataType dt = dtype_of(x);
  Value base = c.b.create<ScaleOp>(sum, alpha / static_cast<double>(size), bias).result();
  return {c.b.create<DivOp>(x, c.b.create<PowOp>(base, scalar(c, dt, beta)).result()).result()};
}

}  // namespace

void add_layout_ops(OpTable& t) {
  t["Pad"] = {&pad, 1};
  t["DepthToSpace"] = {&depth_to_space, 1};
  t["SpaceToDepth"] = {&space_to_depth, 1};
  t["TopK"] = {&top_k, 1};
  t["OneHot"] = {&one_hot, 9};
  t["InstanceNormalization"] = {&instance_norm, 1};
  t["GroupNormalization"] = {&group_norm, 18};
  t["MeanVarianceNormalization"] = {&mean_variance_norm, 9};
  t["LRN"] = {&lrn, 1};
}

}  // namespace kiln::onnx::detail
