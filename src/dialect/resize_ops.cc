// kiln.resize (kiln/dialect/resize_ops.h): its InferMeta and registration,
// and the per-axis sampling table (kiln/dialect/resize_sampling.h).
#include "kiln/dialect/resize_ops.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "kiln/dialect/resize_sampling.h"

namespace kiln {

KILN_REGISTER_OP(ResizeOp);

namespace {

template <std::size_t N>
void require_one_of(std::string_view attr, const std::string& value,
                    const std::array<std::string_view, N>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  throw_error(ErrorKind::InvalidArgument, "op '", ResizeOp::name, "' ", attr, " '", value,
              "' is not one of ", list);
}

// Operand i: a 1-D tensor whose dtype passes `ok`.
void require_vector(const std::vector<Type>& in, std::size_t i, const char* what,
                    bool (*ok)(DataType), const char* dtypes) {
  Type t = meta::tensor_operand(ResizeOp::name, in, i);
  if (shaped_dims(t).size() != 1 || !ok(shaped_data_type(t)))
    throw_error(ErrorKind::InvalidArgument, "op '", ResizeOp::name, "' ", what, " (operand #", i,
                ") must be a 1-D ", dtypes, " tensor, got ", meta::dims_string(shaped_dims(t)), " ",
                to_string(shaped_data_type(t)));
}

bool is_float(DataType t) { return t == DataType::Float32 || t == DataType::Float64; }

}  // namespace

void ResizeOp::build(Builder&, OperationArgument& arg, Value x, Value roi, Value scales,
                     Value sizes, const Attributes& attrs) {
  arg.add_operand(x);
  arg.add_operand(roi);
  arg.add_operand(scales);
  arg.add_operand(sizes);
  arg.attributes = to_named_attributes(attrs);
}

std::vector<Type> ResizeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 4);
  Type x = meta::tensor_operand(name, in, 0);
  const DataType dt = shaped_data_type(x);
  if (!is_float(dt))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' resizes f32 or f64 tensors, got ",
                to_string(dt));
  require_vector(in, 1, "roi", &is_float, "f32 or f64");
  require_vector(in, 2, "scales", &is_float, "f32 or f64");
  require_vector(in, 3, "sizes", &meta::is_index_dtype, "i32 or i64");
  require_one_of("mode", a.mode, std::array<std::string_view, 3>{"nearest", "linear", "cubic"});
  require_one_of(
      "coordinate_transformation_mode", a.coordinate_transformation_mode,
      std::array<std::string_view, 7>{"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                      "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"});
  require_one_of(
      "nearest_mode", a.nearest_mode,
      std::array<std::string_view, 4>{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"});
  const auto rank = static_cast<std::int64_t>(shaped_dims(x).size());
  for (std::size_t i = 2; i <= 3; ++i) {
    const std::int64_t n = shaped_dims(in[i])[0];
    if (n > 0 && n != rank)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ", i == 2 ? "scales" : "sizes",
                  " has ", n, " entries for an input of rank ", rank);
  }
  return {meta::result_like(in, dt, std::vector<std::int64_t>(static_cast<std::size_t>(rank), -1))};
}

// ---- sampling ----

namespace {

// The source position of output position x; `length` = scale · in, `out`
// the output size.
double source_position(const ResizeSampling& m, double x, double scale, double in, double length, double out,
                       double roi_start, double roi_end) {
  const std::string& t = m.coordinates;
  if (t == "half_pixel_symmetric") return in / 2 * (1 - out / length) + (x + 0.5) / scale - 0.5;
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

// The weights of the points floor(s) + first … at fraction r = s - floor(s)
// (`integral`: s is a whole number).
void coefficients(const ResizeSampling& m, double r, bool integral, double* w) {
  if (m.mode == "linear") {
    w[0] = 1 - r;
    w[1] = r;
    return;
  }
  if (m.mode == "cubic") {
    const double a = m.cubic_a, p = r + 1, q = 1 - r, u = 2 - r;
    w[0] = ((a * p - 5 * a) * p + 8 * a) * p - 4 * a;
    w[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
    w[2] = ((a + 2) * q - (a + 3)) * q * q + 1;
    w[3] = ((a * u - 5 * a) * u + 8 * a) * u - 4 * a;
    return;
  }
  bool up = false;  // nearest: floor(s) or floor(s) + 1
  if (!integral) {
    if (m.nearest == "round_prefer_ceil")
      up = r >= 0.5;
    else if (m.nearest == "floor")
      up = false;
    else if (m.nearest == "ceil")
      up = true;
    else
      up = r > 0.5;  // round_prefer_floor
  }
  w[0] = up ? 0.0 : 1.0;
  w[1] = up ? 1.0 : 0.0;
}

}  // namespace

ResizeAxisTable resize_axis_table(const ResizeSampling& m, std::int64_t in, std::int64_t out,
                                  double scale, double roi_start, double roi_end) {
  ResizeAxisTable t;
  t.points = m.mode == "cubic" ? 4 : 2;
  const int n = t.points;
  const std::int64_t first = m.mode == "cubic" ? -1 : 0;  // point 0's offset from floor(s)
  t.index.resize(static_cast<std::size_t>(out * n));
  t.weight.resize(static_cast<std::size_t>(out * n));
  t.outside.assign(static_cast<std::size_t>(out), 0);
  const double length = scale * static_cast<double>(in);
  for (std::int64_t j = 0; j < out; ++j) {
    const double s = source_position(m, static_cast<double>(j), scale, static_cast<double>(in), length,
                                     static_cast<double>(out), roi_start, roi_end);
    if (m.coordinates == "tf_crop_and_resize" && (s < 0 || s > static_cast<double>(in - 1)))
      t.outside[static_cast<std::size_t>(j)] = 1;
    const double fl = std::floor(s);
    double* w = &t.weight[static_cast<std::size_t>(j * n)];
    coefficients(m, s - fl, s == fl, w);
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const std::int64_t p = static_cast<std::int64_t>(fl) + first + k;
      if (m.exclude_outside && (p < 0 || p >= in)) w[k] = 0;
      total += w[k];
      t.index[static_cast<std::size_t>(j * n + k)] = std::clamp<std::int64_t>(p, 0, in - 1);
    }
    if (m.exclude_outside && total != 0)
      for (int k = 0; k < n; ++k) w[k] /= total;
  }
  return t;
}

}  // namespace kiln
