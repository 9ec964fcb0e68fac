// CPU kernels of kiln.roi_align and its gradient. The samples of a bin
// form a grid whose rows and columns are read separably: each sample row
// has one pair of pixel rows and weights (an RoiAxisTap), each sample column
// one pair of pixel columns, computed once per region and shared by every
// channel. The forward runs regions in parallel; the gradient, which adds
// into x's planes that regions share, runs channels in parallel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernel_util.h"
#include "intra_op.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/pool_ops.h"

namespace kiln::cpu {
namespace {

// Where one sample coordinate reads along an axis of `size` pixels: pixels
// lo and hi with weights wlo and whi. Not `inside` (the sample reads 0): a
// coordinate more than one pixel outside the axis, or NaN. In T, as ONNX
// Runtime and torchvision compute it (an f32 model's positions in f32).
struct RoiAxisTap {
  std::int64_t lo = 0, hi = 0;
  double wlo = 0, whi = 0;
  bool inside = false;
};

template <typename T>
RoiAxisTap roi_axis_tap(T v, std::int64_t size) {
  RoiAxisTap t;
  if (size < 1 || !(v >= T(-1) && v <= static_cast<T>(size))) return t;
  v = std::max(v, T(0));
  t.lo = static_cast<std::int64_t>(v);
  if (t.lo >= size - 1) {
    t.lo = t.hi = size - 1;
    v = static_cast<T>(t.lo);
  } else {
    t.hi = t.lo + 1;
  }
  const T whi = v - static_cast<T>(t.lo);
  t.whi = static_cast<double>(whi), t.wlo = static_cast<double>(T(1) - whi);
  t.inside = true;
  return t;
}

// A bin may take at most 2^12 samples along an axis and 2^20 in all (a
// region's adaptive grid is ceil(bin size) per axis).
constexpr double kMaxRoiSamplesPerAxis = 1 << 12, kMaxRoiSamplesPerBin = 1 << 20;

// One region's geometry in x's pixels: its start, extent and samples per
// bin along each axis (0 and 0 when either axis has none: the region
// reads nothing, its bins are 0).
template <typename T>
struct RoiGeometry {
  T y0, x0, height, width;
  std::int64_t grid_h, grid_w;
};

// Region r's geometry; kiln::Error naming the op and the region for
// corners that are not finite or bins of too many samples.
template <typename T>
RoiGeometry<T> roi_geometry(const KernelContext& ctx, const RoiAlignOp::Attributes& a, const T* roi, std::int64_t r) {
  if (!std::isfinite(roi[0]) || !std::isfinite(roi[1]) || !std::isfinite(roi[2]) || !std::isfinite(roi[3]))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' region ", r,
                " has a corner that is not finite: (", roi[0], ", ", roi[1], ", ", roi[2], ", ", roi[3], ")");
  const T scale = static_cast<T>(a.spatial_scale), shift = a.aligned ? T(0.5) : T(0);
  RoiGeometry<T> g{roi[1] * scale - shift, roi[0] * scale - shift, 0, 0, 0, 0};
  g.height = roi[3] * scale - shift - g.y0, g.width = roi[2] * scale - shift - g.x0;
  if (!a.aligned) g.width = std::max(g.width, T(1)), g.height = std::max(g.height, T(1));
  auto grid = [&](T extent, std::int64_t bins) {
    if (a.sampling_ratio > 0) return static_cast<double>(a.sampling_ratio);
    return std::max(0.0, static_cast<double>(std::ceil(extent / static_cast<T>(bins))));
  };
  const double gh = grid(g.height, a.output_size[0]), gw = grid(g.width, a.output_size[1]);
  if (gh == 0 || gw == 0) return g;
  if (gh > kMaxRoiSamplesPerAxis || gw > kMaxRoiSamplesPerAxis || gh * gw > kMaxRoiSamplesPerBin)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' region ", r, " (", roi[0], ", ", roi[1],
                ", ", roi[2], ", ", roi[3], ") would sample ", gh, " x ", gw,
                " points per bin; at most 2^12 per axis and 2^20 in all are taken (set sampling_ratio)");
  g.grid_h = static_cast<std::int64_t>(gh), g.grid_w = static_cast<std::int64_t>(gw);
  return g;
}

// One region's sampling: grid_h sample rows per output row (rows[ph ·
// grid_h + iy]), grid_w sample columns per output column; a bin's average
// divides by `count`.
struct RoiRegionTaps {
  std::int64_t grid_h = 0, grid_w = 0;
  std::vector<RoiAxisTap> rows, cols;
  double count = 1;
};

// The sample coordinates along one axis: `bins` bins of `extent` / bins
// from `start`, `grid` samples each at the centres of its cells.
template <typename T>
std::vector<RoiAxisTap> roi_axis_taps(T start, T extent, std::int64_t bins, std::int64_t grid, std::int64_t size) {
  std::vector<RoiAxisTap> taps(static_cast<std::size_t>(bins * grid));
  const T bin = extent / static_cast<T>(bins);
  for (std::int64_t p = 0; p < bins; ++p)
    for (std::int64_t i = 0; i < grid; ++i)
      taps[static_cast<std::size_t>(p * grid + i)] = roi_axis_tap<T>(
          start + static_cast<T>(p) * bin + (static_cast<T>(i) + T(0.5)) * bin / static_cast<T>(grid), size);
  return taps;
}

// A region's taps over an [h, w] plane, from its checked geometry.
template <typename T>
RoiRegionTaps roi_region_taps(const RoiAlignOp::Attributes& a, const RoiGeometry<T>& g, std::int64_t h,
                              std::int64_t w) {
  RoiRegionTaps t;
  t.grid_h = g.grid_h, t.grid_w = g.grid_w;
  t.count = std::max(static_cast<double>(g.grid_h * g.grid_w), 1.0);
  t.rows = roi_axis_taps(g.y0, g.height, a.output_size[0], t.grid_h, h);
  t.cols = roi_axis_taps(g.x0, g.width, a.output_size[1], t.grid_w, w);
  return t;
}

// x, rois and batch_indices checked against each other at run time: the
// geometry, and each region's image as an index into x's batch.
struct RoiAlignInputs {
  std::int64_t n, c, h, w, regions, oh, ow;
  std::vector<std::int64_t> image;  // per region
};

RoiAlignInputs roi_align_inputs(const KernelContext& ctx, const RoiAlignOp::Attributes& a) {
  const std::string_view op = ctx.op()->name();
  pool::check_roi_align(op, a);
  const Dims& xd = ctx.input(0).dims();
  const Dims& rd = ctx.input(1).dims();
  const Tensor& bi = ctx.input(2);
  if (xd.rank() != 4 || rd.rank() != 2 || rd[1] != 4 || bi.dims().rank() != 1 || bi.dims()[0] != rd[0])
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x [", xd.to_string(), "], rois [", rd.to_string(),
                "] and batch_indices [", bi.dims().to_string(), "] must be [N, C, H, W], [R, 4] and [R]");
  if (bi.dtype() != DataType::Int32 && bi.dtype() != DataType::Int64)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' batch_indices must be i32 or i64, got ",
                to_string(bi.dtype()));
  RoiAlignInputs s{xd[0], xd[1], xd[2], xd[3], rd[0], a.output_size[0], a.output_size[1], {}};
  s.image.resize(static_cast<std::size_t>(s.regions));
  for (std::int64_t r = 0; r < s.regions; ++r) {
    const std::int64_t b = bi.dtype() == DataType::Int32 ? bi.data<std::int32_t>()[r] : bi.data<std::int64_t>()[r];
    if (b < 0 || b >= s.n)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' region ", r, " names image ", b, " of x's ", s.n);
    s.image[static_cast<std::size_t>(r)] = b;
  }
  return s;
}

// Calls f(inside, at, wt) for every sample of bin (ph, pw): its four
// pixels' offsets in the plane and their weights (unset when not inside).
template <typename F>
void for_each_roi_sample(const RoiRegionTaps& t, std::int64_t ph, std::int64_t pw, std::int64_t w, F&& f) {
  for (std::int64_t iy = 0; iy < t.grid_h; ++iy) {
    const RoiAxisTap& y = t.rows[static_cast<std::size_t>(ph * t.grid_h + iy)];
    for (std::int64_t ix = 0; ix < t.grid_w; ++ix) {
      const RoiAxisTap& x = t.cols[static_cast<std::size_t>(pw * t.grid_w + ix)];
      std::int64_t at[4] = {};
      double wt[4] = {};
      if (y.inside && x.inside) {
        at[0] = y.lo * w + x.lo, at[1] = y.lo * w + x.hi, at[2] = y.hi * w + x.lo, at[3] = y.hi * w + x.hi;
        wt[0] = y.wlo * x.wlo, wt[1] = y.wlo * x.whi, wt[2] = y.whi * x.wlo, wt[3] = y.whi * x.whi;
      }
      f(y.inside && x.inside, at, wt);
    }
  }
}

// Calls f(offset, weight) for the four pixels of every sample of bin (ph,
// pw) inside the plane.
template <typename F>
void for_each_roi_tap(const RoiRegionTaps& t, std::int64_t ph, std::int64_t pw, std::int64_t w, F&& f) {
  for_each_roi_sample(t, ph, pw, w, [&](bool inside, const std::int64_t(&at)[4], const double(&wt)[4]) {
    if (inside)
      for (int k = 0; k < 4; ++k) f(at[k], wt[k]);
  });
}

// ONNX's max mode: the largest weighted corner term w · x of any sample (a
// sample outside the plane counts as 0), and, for the gradient, the pixel
// and weight of that term (first sample, then first corner, on ties; at -1
// for an outside sample's 0).
struct RoiBinMax {
  double value = 0;
  std::int64_t at = -1;
  double weight = 0;
};

template <typename T>
RoiBinMax roi_bin_max(const T* plane, const RoiRegionTaps& t, std::int64_t ph, std::int64_t pw, std::int64_t w) {
  RoiBinMax best;
  bool first = true;
  for_each_roi_sample(t, ph, pw, w, [&](bool inside, const std::int64_t(&at)[4], const double(&wt)[4]) {
    RoiBinMax s;
    for (int k = 0; inside && k < 4; ++k)
      if (const double q = wt[k] * static_cast<double>(plane[at[k]]); k == 0 || q > s.value) s = {q, at[k], wt[k]};
    if (first || s.value > best.value) best = s;
    first = false;
  });
  return best;
}

// Every region's geometry, checked before any is sampled (the first bad
// region is the one an error names, whatever the threads).
template <typename T>
std::vector<RoiGeometry<T>> roi_geometries(const KernelContext& ctx, const RoiAlignOp::Attributes& a,
                                           const Tensor& rois, std::int64_t regions) {
  std::vector<RoiGeometry<T>> g;
  g.reserve(static_cast<std::size_t>(regions));
  for (std::int64_t r = 0; r < regions; ++r) g.push_back(roi_geometry(ctx, a, rois.data<T>() + r * 4, r));
  return g;
}

// Region r's bins of one channel plane xp into out (oh · ow values).
template <typename T>
void roi_align_plane(const T* xp, const RoiRegionTaps& t, bool max, std::int64_t oh, std::int64_t ow,
                     std::int64_t w, T* out) {
  for (std::int64_t ph = 0; ph < oh; ++ph)
    for (std::int64_t pw = 0; pw < ow; ++pw) {
      double v = 0;
      if (max) {
        v = roi_bin_max(xp, t, ph, pw, w).value;
      } else {
        for_each_roi_tap(t, ph, pw, w, [&](std::int64_t o, double wt) { v += wt * static_cast<double>(xp[o]); });
        v /= t.count;
      }
      out[ph * ow + pw] = static_cast<T>(v);
    }
}

template <typename T>
struct RoiAlignK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), rois = typed_input<T>(ctx, 1);
    const auto& a = ctx.attrs<RoiAlignOp>();
    const RoiAlignInputs s = roi_align_inputs(ctx, a);
    const std::vector<RoiGeometry<T>> geometry = roi_geometries<T>(ctx, a, rois, s.regions);
    Tensor& y = ctx.alloc_output(0, Dims{s.regions, s.c, s.oh, s.ow}, x.dtype());
    if (y.numel() == 0) return;
    const bool max = a.mode == "max";
    const std::int64_t plane = s.h * s.w, bins = s.oh * s.ow;
    parallel_for(s.regions, items_per_range(s.c * bins * 16 * std::int64_t(sizeof(T))),
                 [&](std::int64_t r0, std::int64_t r1) {
                   for (std::int64_t r = r0; r < r1; ++r) {
                     const RoiRegionTaps t = roi_region_taps(a, geometry[static_cast<std::size_t>(r)], s.h, s.w);
                     const T* xb = x.data<T>() + s.image[static_cast<std::size_t>(r)] * s.c * plane;
                     for (std::int64_t ch = 0; ch < s.c; ++ch)
                       roi_align_plane(xb + ch * plane, t, max, s.oh, s.ow, s.w, y.data<T>() + (r * s.c + ch) * bins);
                   }
                 });
  }
};

// dout's share of region r's bins added into one channel plane dp of dx
// (xp: that plane of x, for the max's winners).
template <typename T>
void roi_align_plane_grad(const T* xp, const T* d, const RoiRegionTaps& t, bool max, std::int64_t oh, std::int64_t ow,
                          std::int64_t w, T* dp) {
  for (std::int64_t ph = 0; ph < oh; ++ph)
    for (std::int64_t pw = 0; pw < ow; ++pw) {
      const double g = static_cast<double>(d[ph * ow + pw]);
      if (max) {
        const RoiBinMax m = roi_bin_max(xp, t, ph, pw, w);
        if (m.at >= 0) dp[m.at] += static_cast<T>(g * m.weight);
      } else {
        for_each_roi_tap(t, ph, pw, w, [&](std::int64_t o, double wt) { dp[o] += static_cast<T>(g * wt / t.count); });
      }
    }
}

template <typename T>
struct RoiAlignGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), rois = typed_input<T>(ctx, 1), dout = typed_input<T>(ctx, 3);
    const auto& a = ctx.attrs<GradOf<RoiAlignOp>>();
    const RoiAlignInputs s = roi_align_inputs(ctx, a);
    const Dims want{s.regions, s.c, s.oh, s.ow};
    if (dout.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' dout [", dout.dims().to_string(),
                  "] must be the forward result's [", want.to_string(), "]");
    const std::vector<RoiGeometry<T>> geometry = roi_geometries<T>(ctx, a, rois, s.regions);
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    if (dx.numel() == 0) return;
    std::memset(dx.data<T>(), 0, dx.bytes());
    const bool max = a.mode == "max";
    const std::int64_t plane = s.h * s.w, bins = s.oh * s.ow;
    // Channels in parallel: regions share x's planes, a channel's are one range's own.
    parallel_for(s.c, items_per_range(s.regions * bins * 16 * std::int64_t(sizeof(T))),
                 [&](std::int64_t c0, std::int64_t c1) {
                   for (std::int64_t r = 0; r < s.regions; ++r) {
                     const RoiRegionTaps t = roi_region_taps(a, geometry[static_cast<std::size_t>(r)], s.h, s.w);
                     const std::int64_t img = s.image[static_cast<std::size_t>(r)];
                     for (std::int64_t ch = c0; ch < c1; ++ch) {
                       const std::int64_t at = (img * s.c + ch) * plane;
                       roi_align_plane_grad(x.data<T>() + at, dout.data<T>() + (r * s.c + ch) * bins, t, max, s.oh,
                                            s.ow, s.w, dx.data<T>() + at);
                     }
                   }
                 });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(RoiAlignOp, Cpu, RoiAlignK, float, double);
KILN_REGISTER_KERNELS(GradOf<RoiAlignOp>, Cpu, RoiAlignGradK, float, double);

}  // namespace kiln::cpu
