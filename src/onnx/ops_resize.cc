// ONNX Resize (opsets 10 to 17) and Upsample (7 to 9), composed of kiln ops
// axis by axis, the way ONNX's reference resizes (separably, the last axis
// first): every output position along an axis reads n input positions
// (nearest 1, linear 2, cubic 4) with weights that depend only on the
// position, so both are computed here, at import, and the axis becomes n
// gathers of constant indices, each scaled by a constant weight vector, and
// their sum. The input's dims, the scales or sizes and the roi must be
// known at import.
#include <algorithm>
#include <cmath>

#include "kiln/dialect/kiln_dialect.h"
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

// The input position output position x maps to (ONNX's coordinate
// transformations); `scale` = out / in or the given scale, `length` the
// output length as the reference computes it (scale · in).
double source_position(const ResizeMode& m, double x, double scale, double in, double length,
                       double roi_start, double roi_end) {
  const std::string& t = m.coordinates;
  if (t == "align_corners") return length == 1 ? 0.0 : x * (in - 1) / (length - 1);
  if (t == "asymmetric") return x / scale;
  if (t == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (t == "pytorch_half_pixel") return length == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (t == "tf_crop_and_resize") {
    const double s = length == 1 ? (roi_end - roi_start) * (in - 1) / 2
                                 : x * (roi_end - roi_start) * (in - 1) / (length - 1);
    return s + roi_start * (in - 1);
  }
  return (x + 0.5) / scale - 0.5;  // half_pixel
}

// The weights of the n points floor(s) - n/2 + 1 … floor(s) + n/2 at
// fraction r = s - floor(s).
std::vector<double> coefficients(const ResizeMode& m, double r, bool integral) {
  if (m.mode == "linear") return {1 - r, r};
  if (m.mode == "cubic") {
    const double a = m.cubic_a, p = r + 1, q = 1 - r, u = 2 - r;
    return {((a * p - 5 * a) * p + 8 * a) * p - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * q - (a + 3)) * q * q + 1, ((a * u - 5 * a) * u + 8 * a) * u - 4 * a};
  }
  // nearest: of floor(s) and floor(s) + 1
  if (integral) return {1, 0};
  const std::string& n = m.nearest;
  bool up;
  if (n == "round_prefer_ceil") up = r >= 0.5;
  else if (n == "floor") up = false;
  else if (n == "ceil") up = true;
  else up = r > 0.5;  // round_prefer_floor
  return {up ? 0.0 : 1.0, up ? 1.0 : 0.0};
}

// x resized along `axis` from `in` to `out` positions.
Value resize_axis(NodeContext& c, const ResizeMode& m, Value x, std::int64_t axis, std::int64_t rank,
                  std::int64_t in, std::int64_t out, double scale, double roi_start, double roi_end) {
  const std::size_t n = m.mode == "cubic" ? 4 : 2;
  const std::int64_t first = m.mode == "cubic" ? -1 : 0;  // offset of point 0 from floor(s)
  std::vector<std::vector<std::int64_t>> idx(n, std::vector<std::int64_t>(static_cast<std::size_t>(out)));
  std::vector<std::vector<double>> w(n, std::vector<double>(static_cast<std::size_t>(out)));
  std::vector<std::int64_t> outside;  // tf_crop_and_resize: positions that take the extrapolation value
  const double length = scale * static_cast<double>(in);
  for (std::int64_t j = 0; j < out; ++j) {
    const double s = source_position(m, static_cast<double>(j), scale, static_cast<double>(in), length,
                                     roi_start, roi_end);
    if (m.coordinates == "tf_crop_and_resize" && (s < 0 || s > static_cast<double>(in - 1))) {
      outside.push_back(j);
    }
    const double fl = std::floor(s);
    std::vector<double> coef = coefficients(m, s - fl, s == fl);
    double total = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const auto p = static_cast<std::int64_t>(fl) + first + static_cast<std::int64_t>(k);
      if (m.exclude_outside && (p < 0 || p >= in)) coef[k] = 0;
      total += coef[k];
      idx[k][static_cast<std::size_t>(j)] = std::clamp<std::int64_t>(p, 0, in - 1);
    }
    for (std::size_t k = 0; k < n; ++k)
      w[k][static_cast<std::size_t>(j)] = m.exclude_outside && total != 0 ? coef[k] / total : coef[k];
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
    if (out == in && scale == 1.0 && m.coordinates != "tf_crop_and_resize") continue;
    if (in == 0) c.unsupported("Resize of an empty axis");
    x = resize_axis(c, m, x, a, rank, in, out, scale, roi_start, roi_end);
  }
  return {x};
}

// Opset 11 on: X, roi, scales, sizes (roi optional from 13); opset 10: X,
// scales, asymmetric coordinates, nearest rounding down.
std::vector<Value> resize(NodeContext& c) {
  ResizeMode m;
  m.mode = string_attr(c, "mode", "nearest");
  if (c.opset < 11) {
    m.coordinates = "asymmetric";
    m.nearest = "floor";
    return resize_with(c, m, doubles_of(c, 1, "Resize's scales"), {}, {});
  }
  m.coordinates = string_attr(c, "coordinate_transformation_mode", "half_pixel");
  m.nearest = string_attr(c, "nearest_mode", "round_prefer_floor");
  m.cubic_a = c.float_attr("cubic_coeff_a", -0.75f);
  m.exclude_outside = c.int_attr("exclude_outside", 0) != 0;
  m.extrapolation = c.float_attr("extrapolation_value", 0.0f);
  std::vector<double> roi, scales;
  std::vector<std::int64_t> sizes;
  if (m.coordinates == "tf_crop_and_resize" && c.inputs.size() > 1 && c.inputs[1])
    roi = doubles_of(c, 1, "Resize's roi");
  if (c.inputs.size() > 2 && c.inputs[2] && (!c.constants[2] || c.constants[2]->numel() > 0))
    scales = doubles_of(c, 2, "Resize's scales");
  if (c.inputs.size() > 3 && c.inputs[3]) sizes = c.constant_ints(3, "Resize's sizes");
  if (c.has_attr("axes")) c.unsupported("Resize's axes attribute");
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
    scales = doubles_of(c, 1, "Upsample's scales");
  }
  return resize_with(c, m, scales, {}, {});
}

}  // namespace

void add_resize_ops(OpTable& t) {
  t["Resize"] = {&resize, 10};
  t["Upsample"] = {&upsample, 7, 9};
}

}  // namespace kiln::onnx::detail
