// ONNX Resize (opsets 10 to 17) and Upsample (7 to 9), composed of kiln ops
// axis by axis, the way ONNX's reference resizes (separably, the last axis
// first): every output position along an axis reads n input positions
// (nearest 1, linear 2, cubic 4) with weights that depend only on the
// position (kiln/dialect/resize_sampling.h, kiln.resize's own table), so
// both are computed here, at import, and the axis becomes n
// gathers of constant indices, each scaled by a constant weight vector, and
// their sum, when the input's dims, the scales or sizes and the roi are
// known at import; otherwise the node is kiln.resize, which reads them at
// run time.
#include <algorithm>
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
  const ResizeAxisTable t = resize_axis_table(ResizeSampling{m.mode, m.coordinates, m.nearest, m.cubic_a, m.exclude_outside},
                                              in, out, scale, roi_start, roi_end);
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
  if (dt == DataType::Int64) return constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{0}, {}));
  return constant_value(c.b, Tensor::from_vector<float>(Dims{0}, {}));
}

// kiln.resize: roi, scales and sizes (inputs #roi, #scales, #sizes; an
// index past the node's inputs = omitted) read at run time.
std::vector<Value> resize_at_run_time(NodeContext& c, const ResizeMode& m, std::size_t roi,
                                      std::size_t scales, std::size_t sizes) {
  if (m.mode != "nearest" && m.mode != "linear" && m.mode != "cubic") c.unsupported("mode '" + m.mode + "'");
  const ResizeOp::Attributes a{m.mode, m.coordinates, m.nearest, m.cubic_a, m.exclude_outside, m.extrapolation};
  return {c.b.create<ResizeOp>(c.input(0), given_or_empty(c, roi, DataType::Float32),
                               given_or_empty(c, scales, DataType::Float32),
                               given_or_empty(c, sizes, DataType::Int64), a)
              .result()};
}

constexpr std::size_t kOmitted = 99;

// Opset 11 on: X, roi, scales, sizes (roi optional from 13); opset 10: X,
// scales, asymmetric coordinates, nearest rounding down.
std::vector<Value> resize(NodeContext& c) {
  ResizeMode m;
  m.mode = string_attr(c, "mode", "nearest");
  if (c.opset < 11) {
    m.coordinates = "asymmetric";
    m.nearest = "floor";
    if (!known_at_import(c, 1) || !dims_known(c.input(0))) return resize_at_run_time(c, m, kOmitted, 1, kOmitted);
    return resize_with(c, m, doubles_of(c, 1, "Resize's scales"), {}, {});
  }
  m.coordinates = string_attr(c, "coordinate_transformation_mode", "half_pixel");
  m.nearest = string_attr(c, "nearest_mode", "round_prefer_floor");
  m.cubic_a = c.float_attr("cubic_coeff_a", -0.75f);
  m.exclude_outside = c.int_attr("exclude_outside", 0) != 0;
  m.extrapolation = c.float_attr("extrapolation_value", 0.0f);
  if (c.has_attr("axes")) c.unsupported("Resize's axes attribute");
  const bool crop = m.coordinates == "tf_crop_and_resize";
  if ((crop && !known_at_import(c, 1)) || !known_at_import(c, 2) || !known_at_import(c, 3) ||
      !dims_known(c.input(0)))
    return resize_at_run_time(c, m, crop ? 1 : kOmitted, 2, 3);
  std::vector<double> roi, scales;
  std::vector<std::int64_t> sizes;
  if (crop && c.inputs.size() > 1 && c.inputs[1])
    roi = doubles_of(c, 1, "Resize's roi");
  if (c.inputs.size() > 2 && c.inputs[2] && (!c.constants[2] || c.constants[2]->numel() > 0))
    scales = doubles_of(c, 2, "Resize's scales");
  if (c.inputs.size() > 3 && c.inputs[3]) sizes = c.constant_ints(3, "Resize's sizes");
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
    if (!known_at_import(c, 1) || !dims_known(c.input(0))) return resize_at_run_time(c, m, kOmitted, 1, kOmitted);
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
