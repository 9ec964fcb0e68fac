// ONNX Resize (opsets 10 to 17) and Upsample (7 to 9), composed of kiln ops
// axis by axis, the way ONNX's reference resizes (separably, the last axis
// first): every output position along an axis reads n input positions
// (nearest 1, linear 2, cubic 4) with weights that depend only on the
// position (kiln/dialect/resize_sampling.h, kiln.resize's own table), so
// both are computed here, at import, and the axis becomes n
// gathers of constant indices, each scaled by a constant weight vector, and
// their sum, when the input's dims, the scales or sizes and the roi are
// known at import; otherwise the node is kiln.resize, which reads them at
// run time. Also GridSample: sampling at positions a grid gives at run time
// (see grid_sample below), and RoiAlign (kiln.roi_align).
#include <algorithm>
#include <array>
#include <cmath>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/resize_sampling.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

struct ResizeMode {
  std::string mode = "nearest";          // nearest, linear, cubic
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};

std::string string_attr(const NodeContext& c, const std::string& name, const std::string& fallback) {
  const auto* a = c.attribute(name);
  return a ? a->s() : fallback;
}

std::vector<double> doubles_of(NodeContext& c, std::size_t i, const std::string& what) {
  if (!c.constants[i]) c.unsupported(what + " (input #" + std::to_string(i) + ") computed at run time");
  const Tensor& t = *c.constants[i];
  std::vector<double> v;
  if (t.dtype() == DataType::Float32)
    for (float x : t.to_vector<float>()) v.push_back(x);
  else if (t.dtype() == DataType::Float64)
    v = t.to_vector<double>();
  else
    c.unsupported(what + " of dtype " + std::string(to_string(t.dtype())));
  return v;
}

// x resized along `axis` from `in` to `out` positions.
Value resize_axis(NodeContext& c, const ResizeMode& m, Value x, std::int64_t axis, std::int64_t rank,
                  std::int64_t in, std::int64_t out, double scale, double roi_start, double roi_end) {
  const ResizeAxisTable t = resize_axis_table(
      ResizeSampling{m.mode, m.coordinates, m.nearest, m.cubic_a, m.exclude_outside}, in, out,
      scale, roi_start, roi_end);
  const auto n = static_cast<std::size_t>(t.points);
  // per point k: its index and weight at every output position
  std::vector<std::vector<std::int64_t>> idx(n, std::vector<std::int64_t>(static_cast<std::size_t>(out)));
  std::vector<std::vector<double>> w(n, std::vector<double>(static_cast<std::size_t>(out)));
  std::vector<std::int64_t> outside;  // tf_crop_and_resize: positions that take the extrapolation value
  for (std::size_t j = 0; j < static_cast<std::size_t>(out); ++j) {
    if (t.outside[j]) outside.push_back(static_cast<std::int64_t>(j));
    for (std::size_t k = 0; k < n; ++k) {
      idx[k][j] = t.index[j * n + k];
      w[k][j] = t.weight[j * n + k];
    }
  }
  const DataType dt = shaped_data_type(x.type());
  std::vector<std::int64_t> along(static_cast<std::size_t>(rank), 1);
  along[static_cast<std::size_t>(axis)] = out;
  auto weights = [&](const std::vector<double>& v) {
    Value c64 = constant_value(c.b, Tensor::from_vector<double>(Dims(along), v));
    return dt == DataType::Float64 ? c64 : c.b.create<CastOp>(c64, dt).result();
  };
  Value y;
  for (std::size_t k = 0; k < n; ++k) {
    if (std::all_of(w[k].begin(), w[k].end(), [](double v) { return v == 0; })) continue;
    Value picked = c.b.create<GatherOp>(
                          x, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{out}, idx[k])), axis)
                       .result();
    const bool ones = std::all_of(w[k].begin(), w[k].end(), [](double v) { return v == 1; });
    Value term = ones ? picked : c.b.create<MulOp>(picked, weights(w[k])).result();
    y = y ? c.b.create<AddOp>(y, term).result() : term;
  }
  if (!y) {  // every weight zero (exclude_outside with no point inside)
    Value picked = c.b.create<GatherOp>(
                          x, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{out}, idx[0])), axis)
                       .result();
    y = c.b.create<MulOp>(picked, weights(w[0])).result();
  }
  if (!outside.empty()) {
    std::vector<double> mask(static_cast<std::size_t>(out), 0.0);
    for (auto j : outside) mask[static_cast<std::size_t>(j)] = 1.0;
    Value zero = c.b.create<FullOp>(std::vector<std::int64_t>{}, 0.0, dt).result();
    Value is_out = c.b.create<NotEqualOp>(weights(mask), zero).result();
    Value fill = c.b.create<FullOp>(std::vector<std::int64_t>{}, m.extrapolation, dt).result();
    y = c.b.create<WhereOp>(is_out, fill, y).result();
  }
  return y;
}

// scales or sizes → per-axis (in, out, scale); then every axis that changes.
std::vector<Value> resize_with(NodeContext& c, const ResizeMode& m, const std::vector<double>& scales,
                               const std::vector<std::int64_t>& sizes, const std::vector<double>& roi) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  for (auto e : d)
    if (e < 0) c.unsupported("Resize of an input with a dim known only at run time");
  if (!scales.empty() && static_cast<std::int64_t>(scales.size()) != rank)
    c.unsupported("scales of length " + std::to_string(scales.size()) + " for rank " + std::to_string(rank));
  if (!sizes.empty() && static_cast<std::int64_t>(sizes.size()) != rank)
    c.unsupported("sizes of length " + std::to_string(sizes.size()) + " for rank " + std::to_string(rank));
  if (scales.empty() && sizes.empty()) c.unsupported("neither scales nor sizes");
  if (!roi.empty() && static_cast<std::int64_t>(roi.size()) != 2 * rank) c.unsupported("roi of the wrong length");
  if (m.mode != "nearest" && m.mode != "linear" && m.mode != "cubic") c.unsupported("mode '" + m.mode + "'");
  for (std::int64_t a = rank - 1; a >= 0; --a) {
    const auto i = static_cast<std::size_t>(a);
    const std::int64_t in = d[i];
    std::int64_t out;
    double scale;
    if (!sizes.empty()) {
      out = sizes[i];
      scale = in ? static_cast<double>(out) / static_cast<double>(in) : 1.0;
    } else {
      scale = scales[i];
      if (!(scale > 0)) c.unsupported("scale " + std::to_string(scale));
      out = static_cast<std::int64_t>(std::floor(scale * static_cast<double>(in)));
    }
    if (out < 0) c.unsupported("a negative output size");
    const double roi_start = roi.empty() ? 0.0 : roi[i], roi_end = roi.empty() ? 1.0 : roi[i + d.size()];
    // an identity axis, except where the coordinates shift even at scale 1
    if (out == in && scale == 1.0 && m.coordinates != "tf_crop_and_resize" &&
        m.coordinates != "tf_half_pixel_for_nn")
      continue;
    if (in == 0) c.unsupported("Resize of an empty axis");
    x = resize_axis(c, m, x, a, rank, in, out, scale, roi_start, roi_end);
  }
  return {x};
}

// Whether input i is omitted or known at import.
bool known_at_import(const NodeContext& c, std::size_t i) {
  return i >= c.inputs.size() || !c.inputs[i] || c.constants[i];
}

bool dims_known(Value x) {
  const auto d = shaped_dims(x.type());
  return std::all_of(d.begin(), d.end(), [](std::int64_t e) { return e >= 0; });
}

// Input i, or an empty 1-D tensor of `dt` where the node omits it.
Value given_or_empty(NodeContext& c, std::size_t i, DataType dt) {
  if (i < c.inputs.size() && c.inputs[i]) return c.inputs[i];
  if (dt == DataType::Int64)
    return constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{0}, {}));
  return constant_value(c.b, Tensor::from_vector<float>(Dims{0}, {}));
}

// kiln.resize: roi, scales and sizes (inputs #roi, #scales, #sizes; an
// index past the node's inputs = omitted) read at run time.
std::vector<Value> resize_at_run_time(NodeContext& c, const ResizeMode& m, std::size_t roi,
                                      std::size_t scales, std::size_t sizes) {
  if (m.mode != "nearest" && m.mode != "linear" && m.mode != "cubic")
    c.unsupported("mode '" + m.mode + "'");
  const ResizeOp::Attributes a{m.mode,    m.coordinates,     m.nearest,
                               m.cubic_a, m.exclude_outside, m.extrapolation};
  return {c.b.create<ResizeOp>(c.input(0), given_or_empty(c, roi, DataType::Float32),
                               given_or_empty(c, scales, DataType::Float32),
                               given_or_empty(c, sizes, DataType::Int64), a)
              .result()};
}

constexpr std::size_t kOmitted = 99;

// roi, scales and sizes given for `axes` (opset 18) made whole: the axes
// not named keep their size (scale 1, roi [0, 1]).
void over_every_axis(NodeContext& c, const std::vector<std::int64_t>& axes, std::vector<double>& roi,
                     std::vector<double>& scales, std::vector<std::int64_t>& sizes) {
  const std::vector<std::int64_t> d = shaped_dims(c.input(0).type());
  const auto rank = static_cast<std::int64_t>(d.size());
  const std::size_t n = axes.size();
  if ((!roi.empty() && roi.size() != 2 * n) || (!scales.empty() && scales.size() != n) ||
      (!sizes.empty() && sizes.size() != n))
    c.unsupported("roi, scales or sizes of another length than " + std::to_string(n) + " axes (2 each for roi)");
  std::vector<double> all_roi(static_cast<std::size_t>(2 * rank), 0.0), all_scales(static_cast<std::size_t>(rank), 1.0);
  std::vector<std::int64_t> all_sizes = d;
  for (std::int64_t a = 0; a < rank; ++a) all_roi[static_cast<std::size_t>(a + rank)] = 1.0;
  const std::vector<std::int64_t> at = c.distinct_axes(axes, rank);
  for (std::size_t k = 0; k < n; ++k) {
    const auto i = static_cast<std::size_t>(at[k]);
    if (!roi.empty()) all_roi[i] = roi[k], all_roi[i + static_cast<std::size_t>(rank)] = roi[k + n];
    if (!scales.empty()) all_scales[i] = scales[k];
    if (!sizes.empty()) all_sizes[i] = sizes[k];
  }
  if (!roi.empty()) roi = all_roi;
  if (!scales.empty()) scales = all_scales;
  if (!sizes.empty()) sizes = all_sizes;
}

// Opset 11 on: X, roi, scales, sizes (roi optional from 13; opset 18: axes
// naming the axes they are for, antialias 0 and keep_aspect_ratio_policy
// stretch only; 19: half_pixel_symmetric coordinates); opset 10: X,
// scales, asymmetric coordinates, nearest rounding down.
std::vector<Value> resize(NodeContext& c) {
  ResizeMode m;
  m.mode = string_attr(c, "mode", "nearest");
  if (c.opset < 11) {
    m.coordinates = "asymmetric";
    m.nearest = "floor";
    if (!known_at_import(c, 1) || !dims_known(c.input(0)))
      return resize_at_run_time(c, m, kOmitted, 1, kOmitted);
    return resize_with(c, m, doubles_of(c, 1, "Resize's scales"), {}, {});
  }
  m.coordinates = string_attr(c, "coordinate_transformation_mode", "half_pixel");
  const std::array<std::string_view, 7> known{"half_pixel",           "pytorch_half_pixel", "align_corners",
                                              "asymmetric",           "tf_half_pixel_for_nn",
                                              "tf_crop_and_resize",   "half_pixel_symmetric"};
  if (std::find(known.begin(), known.end(), m.coordinates) == known.end() ||
      (m.coordinates == "half_pixel_symmetric" && c.opset < 19))
    c.unsupported("coordinate_transformation_mode '" + m.coordinates + "'");
  m.nearest = string_attr(c, "nearest_mode", "round_prefer_floor");
  m.cubic_a = c.float_attr("cubic_coeff_a", -0.75f);
  m.exclude_outside = c.int_attr("exclude_outside", 0) != 0;
  m.extrapolation = c.float_attr("extrapolation_value", 0.0f);
  if (c.int_attr("antialias", 0) != 0 && m.mode != "nearest") c.unsupported("antialias");
  const bool sized = c.inputs.size() > 3 && c.inputs[3] && !(c.constants[3] && c.constants[3]->numel() == 0);
  if (sized && string_attr(c, "keep_aspect_ratio_policy", "stretch") != "stretch")
    c.unsupported("keep_aspect_ratio_policy '" + string_attr(c, "keep_aspect_ratio_policy", "") + "'");
  const std::vector<std::int64_t> axes = c.ints_attr("axes");  // opset 18
  const bool crop = m.coordinates == "tf_crop_and_resize";
  if ((crop && !known_at_import(c, 1)) || !known_at_import(c, 2) || !known_at_import(c, 3) ||
      !dims_known(c.input(0))) {
    if (!axes.empty()) c.unsupported("axes with scales, sizes, roi or dims known only at run time");
    return resize_at_run_time(c, m, crop ? 1 : kOmitted, 2, 3);
  }
  std::vector<double> roi, scales;
  std::vector<std::int64_t> sizes;
  if (crop && c.inputs.size() > 1 && c.inputs[1]) roi = doubles_of(c, 1, "Resize's roi");
  if (c.inputs.size() > 2 && c.inputs[2] && (!c.constants[2] || c.constants[2]->numel() > 0))
    scales = doubles_of(c, 2, "Resize's scales");
  if (sized) sizes = c.constant_ints(3, "Resize's sizes");
  if (!axes.empty()) over_every_axis(c, axes, roi, scales, sizes);
  return resize_with(c, m, scales, sizes, roi);
}

// Upsample: scales as an attribute (opset 7) or a constant input (9);
// asymmetric coordinates, nearest rounding down.
std::vector<Value> upsample(NodeContext& c) {
  ResizeMode m;
  m.mode = string_attr(c, "mode", "nearest");
  m.coordinates = "asymmetric";
  m.nearest = "floor";
  std::vector<double> scales;
  if (c.opset < 9) {
    const auto* a = c.attribute("scales");
    if (!a) c.unsupported("no scales");
    scales.assign(a->floats().begin(), a->floats().end());
  } else {
    if (!known_at_import(c, 1) || !dims_known(c.input(0)))
      return resize_at_run_time(c, m, kOmitted, 1, kOmitted);
    scales = doubles_of(c, 1, "Upsample's scales");
  }
  return resize_with(c, m, scales, {}, {});
}

// GridSample (opset 16, 20 in 2-D): output position (i, j) samples X at the grid's
// (x, y) there, mapped from [-1, 1] to pixel coordinates; border padding
// clamps them into the image, reflection folds them back into it. The
// samples read (nearest: 1, bilinear: 2 × 2, bicubic: 4 × 4 points with
// cubic_coeff -0.75 weights) are gathers of X flattened per channel at
// indices computed at run time; points outside X read 0 (zeros), the
// nearest edge (border) or their reflection (reflection). X's dims must be
// known at import.
struct GridSampler {
  NodeContext& c;
  DataType dt;
  std::int64_t n, ch, h, w, ho, wo;
  std::string padding;
  bool align;
  Value xr;  // X as [N, C, H·W]

  Value scalar(double v) const {
    return c.b.create<FullOp>(std::vector<std::int64_t>{}, v, dt).result();
  }
  Value add(Value a, Value b) const { return c.b.create<AddOp>(a, b).result(); }
  Value sub(Value a, Value b) const { return c.b.create<SubOp>(a, b).result(); }
  Value mul(Value a, Value b) const { return c.b.create<MulOp>(a, b).result(); }
  Value where(Value m, Value a, Value b) const { return c.b.create<WhereOp>(m, a, b).result(); }

  // x folded into [lo, hi] by reflecting at both ends (as ONNX's reference).
  Value reflect(Value x, double lo, double hi) const {
    const double range = hi - lo;
    if (range <= 0) return add(mul(x, scalar(0.0)), scalar(lo));
    Value below = c.b.create<LessThanOp>(x, scalar(lo)).result();
    Value above = c.b.create<GreaterThanOp>(x, scalar(hi)).result();
    Value dist = where(below, sub(scalar(lo), x), sub(x, scalar(hi)));
    Value flips =
        c.b.create<FloorOp>(c.b.create<ScaleOp>(dist, 1.0 / range, 0.0).result()).result();
    Value rest = sub(dist, c.b.create<ScaleOp>(flips, range, 0.0).result());
    Value even =
        c.b.create<EqualOp>(c.b.create<FmodOp>(flips, scalar(2.0)).result(), scalar(0.0)).result();
    Value up = add(scalar(lo), rest), down = sub(scalar(hi), rest);
    Value folded = where(below, where(even, up, down), where(even, down, up));
    return where(c.b.create<LogicalOrOp>(below, above).result(), folded, x);
  }

  // X at whole-number positions (iy, ix) ([N, Ho, Wo]) → [N, C, Ho, Wo].
  Value fetch(Value iy, Value ix) const {
    Value valid;
    if (padding == "zeros") {
      auto inside = [&](Value v, std::int64_t extent) {
        return c.b
            .create<LogicalAndOp>(
                c.b.create<GreaterEqualOp>(v, scalar(0.0)).result(),
                c.b.create<LessEqualOp>(v, scalar(static_cast<double>(extent - 1))).result())
            .result();
      };
      valid = c.b.create<LogicalAndOp>(inside(iy, h), inside(ix, w)).result();
    } else if (padding == "reflection") {
      ix = reflect(ix, align ? 0.0 : -0.5,
                   align ? static_cast<double>(w - 1) : static_cast<double>(w) - 0.5);
      iy = reflect(iy, align ? 0.0 : -0.5,
                   align ? static_cast<double>(h - 1) : static_cast<double>(h) - 0.5);
    }
    ix = c.b.create<ClipOp>(ix, 0.0, static_cast<double>(w - 1)).result();
    iy = c.b.create<ClipOp>(iy, 0.0, static_cast<double>(h - 1)).result();
    Value flat =
        c.b.create<CastOp>(add(c.b.create<ScaleOp>(iy, static_cast<double>(w), 0.0).result(), ix),
                           DataType::Int64)
            .result();
    flat = c.b.create<ReshapeOp>(flat, std::vector<std::int64_t>{n, 1, ho * wo}).result();
    flat = c.b.create<AddOp>(flat, c.b.create<FullOp>(std::vector<std::int64_t>{1, ch, 1}, 0.0,
                                                      DataType::Int64)
                                       .result())
               .result();
    Value v = c.b.create<TakeAlongAxisOp>(xr, flat, 2).result();
    v = c.b.create<ReshapeOp>(v, std::vector<std::int64_t>{n, ch, ho, wo}).result();
    if (valid)
      v = mul(v, c.b.create<UnsqueezeOp>(c.b.create<CastOp>(valid, dt).result(),
                                         std::vector<std::int64_t>{1})
                     .result());
    return v;
  }
  Value weighted(Value v, Value weight) const {  // weight [N, Ho, Wo] over the channels
    return mul(v, c.b.create<UnsqueezeOp>(weight, std::vector<std::int64_t>{1}).result());
  }
};

// The four cubic weights (a = -0.75) of points floor(t)-1 … floor(t)+2 at
// fraction t.
std::vector<Value> cubic_weights(const GridSampler& g, Value t) {
  const double a = -0.75;
  auto poly = [&](Value x, double c3, double c2, double c1,
                  double c0) {  // ((c3·x + c2)·x + c1)·x + c0
    Value r = g.c.b.create<ScaleOp>(x, c3, c2).result();
    r = g.c.b.create<ScaleOp>(g.mul(r, x), 1.0, c1).result();
    return g.c.b.create<ScaleOp>(g.mul(r, x), 1.0, c0).result();
  };
  Value one = g.scalar(1.0);
  Value p = g.add(t, one), q = g.sub(one, t), u = g.sub(g.scalar(2.0), t);
  // |x| in [1, 2): a·x³ - 5a·x² + 8a·x - 4a; |x| < 1: (a+2)·x³ - (a+3)·x² + 1
  return {poly(p, a, -5 * a, 8 * a, -4 * a), poly(t, a + 2, -(a + 3), 0.0, 1.0),
          poly(q, a + 2, -(a + 3), 0.0, 1.0), poly(u, a, -5 * a, 8 * a, -4 * a)};
}

std::vector<Value> grid_sample(NodeContext& c) {
  Value x = c.input(0), grid = c.input(1);
  const std::vector<std::int64_t> xd = shaped_dims(x.type()), gd = shaped_dims(grid.type());
  if (xd.size() != 4 || gd.size() != 4 || gd[3] != 2)
    c.unsupported("GridSample other than 2-D (X [N, C, H, W], grid [N, H, W, 2])");
  for (auto e : xd)
    if (e < 0) c.unsupported("GridSample of an input with a dim known only at run time");
  if (gd[1] < 0 || gd[2] < 0)
    c.unsupported("GridSample with a grid whose size is known only at run time");
  // Opset 20 names the modes linear and cubic (and takes N-D inputs).
  const std::string given = string_attr(c, "mode", c.opset >= 20 ? "linear" : "bilinear"),
                    padding = string_attr(c, "padding_mode", "zeros");
  const std::string mode = c.opset < 20 ? given : given == "linear" ? "bilinear" : given == "cubic" ? "bicubic"
                                                : given == "nearest" ? given : "";
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") c.unsupported("mode '" + given + "'");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    c.unsupported("padding_mode '" + padding + "'");
  GridSampler g{
      c,
      shaped_data_type(x.type()),
      xd[0],
      xd[1],
      xd[2],
      xd[3],
      gd[1],
      gd[2],
      padding,
      c.int_attr("align_corners", 0) != 0,
      c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{xd[0], xd[1], xd[2] * xd[3]}).result()};
  // pixel coordinates: align_corners maps ±1 to the corner pixels' centres, else to their outer
  // edges
  auto pixel = [&](std::int64_t k, std::int64_t extent) -> Value {
    Value v = c.b.create<GatherOp>(
                     grid, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {k})), 3)
                  .result();
    const double e = static_cast<double>(extent);
    v = g.align ? c.b.create<ScaleOp>(v, (e - 1) / 2, (e - 1) / 2).result()
                : c.b.create<ScaleOp>(v, e / 2, (e - 1) / 2).result();
    if (padding == "border") return c.b.create<ClipOp>(v, 0.0, e - 1).result();
    if (padding == "reflection")
      return g.reflect(v, g.align ? 0.0 : -0.5, g.align ? e - 1 : e - 0.5);
    return v;
  };
  Value px = pixel(0, g.w), py = pixel(1, g.h);
  if (mode == "nearest")
    return {g.fetch(c.b.create<RoundOp>(py).result(), c.b.create<RoundOp>(px).result())};
  Value fx = c.b.create<FloorOp>(px).result(), fy = c.b.create<FloorOp>(py).result();
  Value tx = g.sub(px, fx), ty = g.sub(py, fy);
  std::vector<Value> wx, wy;
  std::int64_t first = 0;
  if (mode == "bilinear") {
    wx = {g.sub(g.scalar(1.0), tx), tx};
    wy = {g.sub(g.scalar(1.0), ty), ty};
  } else {
    wx = cubic_weights(g, tx);
    wy = cubic_weights(g, ty);
    first = -1;
  }
  Value y;
  for (std::size_t i = 0; i < wy.size(); ++i)
    for (std::size_t j = 0; j < wx.size(); ++j) {
      Value iy = g.add(fy, g.scalar(static_cast<double>(first + static_cast<std::int64_t>(i))));
      Value ix = g.add(fx, g.scalar(static_cast<double>(first + static_cast<std::int64_t>(j))));
      Value term = g.weighted(g.fetch(iy, ix), g.mul(wy[i], wx[j]));
      y = y ? g.add(y, term) : term;
    }
  return {y};
}

// RoiAlign (opset 10; 16 adds coordinate_transformation_mode, half_pixel
// by default; before it, output_half_pixel): kiln.roi_align, aligned for
// half_pixel. batch_indices is int64 in ONNX.
std::vector<Value> roi_align(NodeContext& c) {
  const std::string coordinates =
      c.opset < 16 ? "output_half_pixel" : string_attr(c, "coordinate_transformation_mode", "half_pixel");
  if (coordinates != "half_pixel" && coordinates != "output_half_pixel")
    c.unsupported("coordinate_transformation_mode '" + coordinates + "'");
  const std::string mode = string_attr(c, "mode", "avg");
  if (mode != "avg" && mode != "max") c.unsupported("mode '" + mode + "'");
  const std::vector<std::int64_t> out{c.int_attr("output_height", 1), c.int_attr("output_width", 1)};
  return {c.b
              .create<RoiAlignOp>(c.input(0), c.input(1), c.input(2), out, c.float_attr("spatial_scale", 1.0f),
                                  c.int_attr("sampling_ratio", 0), coordinates == "half_pixel", mode)
              .result()};
}

}  // namespace

void add_resize_ops(OpTable& t) {
  t["GridSample"] = {&grid_sample, 16};
  t["RoiAlign"] = {&roi_align, 10};
  t["Resize"] = {&resize, 10};
  t["Upsample"] = {&upsample, 7, 9};
}

}  // namespace kiln::onnx::detail
