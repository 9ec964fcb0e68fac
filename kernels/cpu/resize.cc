// CPU kernel of kiln.resize (kiln/dialect/resize_ops.h). The roi, scales and
// sizes operands are read on the host; then every axis, the last first, is
// resized on its own: output position j sums the input points its sampling
// table names (kiln/dialect/resize_sampling.h) by their weights.
// Intermediate axes are kept in double.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_kernel_util.h"
#include "kiln/dialect/resize_ops.h"
#include "kiln/dialect/resize_sampling.h"

namespace kiln::cpu {
namespace {

// Input i (a 1-D f32/f64 or i32/i64 tensor, read on the host) as doubles.
std::vector<double> read_doubles(const KernelContext& ctx, std::uint32_t i) {
  const Tensor& t = ctx.input(i);
  if (t.place().kind != PlaceKind::Cpu && t.place().kind != PlaceKind::HostStream)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' reads input #", i,
                " on the host, got a tensor on ", t.place().to_string());
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t k = 0; k < v.size(); ++k) {
    const auto j = static_cast<std::int64_t>(k);
    switch (t.dtype()) {
      case DataType::Float32:
        v[k] = t.data<float>()[j];
        break;
      case DataType::Float64:
        v[k] = t.data<double>()[j];
        break;
      case DataType::Int32:
        v[k] = t.data<std::int32_t>()[j];
        break;
      case DataType::Int64:
        v[k] = static_cast<double>(t.data<std::int64_t>()[j]);
        break;
      default:
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' input #", i,
                    " has dtype ", to_string(t.dtype()));
    }
  }
  return v;
}

// src [outer, in, inner] resized along its middle axis into dst [outer, out, inner].
void resize_axis(const ResizeSampling& m, double extrapolation, const double* src, double* dst,
                 std::int64_t outer, std::int64_t in, std::int64_t out, std::int64_t inner,
                 double scale, double roi_start, double roi_end) {
  const ResizeAxisTable t = resize_axis_table(m, in, out, scale, roi_start, roi_end);
  const int n = t.points;
  for (std::int64_t o = 0; o < outer; ++o) {
    const double* s = src + o * in * inner;
    double* d = dst + o * out * inner;
    for (std::int64_t j = 0; j < out; ++j) {
      double* dj = d + j * inner;
      if (t.outside[static_cast<std::size_t>(j)]) {
        std::fill(dj, dj + inner, extrapolation);
        continue;
      }
      std::fill(dj, dj + inner, 0.0);
      for (int k = 0; k < n; ++k) {
        const double wk = t.weight[static_cast<std::size_t>(j * n + k)];
        if (wk == 0) continue;
        const double* sk = s + t.index[static_cast<std::size_t>(j * n + k)] * inner;
        for (std::int64_t i = 0; i < inner; ++i) dj[i] += wk * sk[i];
      }
    }
  }
}

template <typename T>
struct ResizeK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<ResizeOp>();
    const std::string_view op = ctx.op()->name();
    const Tensor x = typed_input<T>(ctx, 0);
    const Dims& xd = x.dims();
    const int rank = xd.rank();
    const std::vector<double> roi = read_doubles(ctx, 1), scales = read_doubles(ctx, 2),
                              sizes = read_doubles(ctx, 3);
    if (scales.empty() == sizes.empty())
      throw_error(ErrorKind::InvalidArgument, "op '", op,
                  "' needs exactly one of scales (input #2) and sizes (input #3) non-empty, got ",
                  scales.size(), " and ", sizes.size(), " entries");
    const std::vector<double>& given = scales.empty() ? sizes : scales;
    if (static_cast<int>(given.size()) != rank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", scales.empty() ? "sizes" : "scales",
                  " has ", given.size(), " entries for an input of rank ", rank);
    const ResizeSampling m{a.mode, a.coordinate_transformation_mode, a.nearest_mode,
                           a.cubic_coeff_a, a.exclude_outside};
    const bool crop = m.coordinates == "tf_crop_and_resize";
    if (crop && static_cast<int>(roi.size()) != 2 * rank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' roi (input #1) has ", roi.size(),
                  " entries, tf_crop_and_resize needs ", 2 * rank);
    std::vector<std::int64_t> od(static_cast<std::size_t>(rank));
    std::vector<double> scale(static_cast<std::size_t>(rank));
    for (int i = 0; i < rank; ++i) {
      const auto u = static_cast<std::size_t>(i);
      const double in = static_cast<double>(xd[i]);
      if (!scales.empty()) {
        if (!(scales[u] > 0))
          throw_error(ErrorKind::InvalidArgument, "op '", op, "' scale ", scales[u], " (axis ", i,
                      ") must be > 0");
        scale[u] = scales[u];
        od[u] = static_cast<std::int64_t>(std::floor(scales[u] * in));
      } else {
        if (sizes[u] < 0)
          throw_error(ErrorKind::InvalidArgument, "op '", op, "' size ", sizes[u], " (axis ", i,
                      ") must be >= 0");
        od[u] = static_cast<std::int64_t>(sizes[u]);
        scale[u] = xd[i] ? sizes[u] / in : 1.0;
      }
      if (xd[i] == 0 && od[u] > 0)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot resize axis ", i,
                    " of extent 0 to ", od[u]);
    }
    const Dims out_dims(std::span<const std::int64_t>(od.data(), od.size()));
    std::vector<double> cur(x.data<T>(), x.data<T>() + x.numel()), next;
    std::vector<std::int64_t> cd(xd.begin(), xd.end());
    if (out_dims.numel() > 0) {
      for (int ax = rank - 1; ax >= 0; --ax) {
        const auto u = static_cast<std::size_t>(ax);
        std::int64_t outer = 1, inner = 1;
        for (int i = 0; i < ax; ++i) outer *= cd[static_cast<std::size_t>(i)];
        for (int i = ax + 1; i < rank; ++i) inner *= cd[static_cast<std::size_t>(i)];
        next.assign(static_cast<std::size_t>(outer * od[u] * inner), 0.0);
        resize_axis(m, a.extrapolation_value, cur.data(), next.data(), outer, cd[u], od[u], inner,
                    scale[u], crop ? roi[u] : 0.0,
                    crop ? roi[u + static_cast<std::size_t>(rank)] : 1.0);
        cur.swap(next);
        cd[u] = od[u];
      }
    }
    Tensor& y = ctx.alloc_output(0, out_dims, x.dtype());
    T* py = y.data<T>();
    for (std::int64_t i = 0; i < out_dims.numel(); ++i)
      py[i] = static_cast<T>(cur[static_cast<std::size_t>(i)]);
  }
};

}  // namespace

KILN_REGISTER_KERNELS(ResizeOp, Cpu, ResizeK, float, double);

}  // namespace kiln::cpu
