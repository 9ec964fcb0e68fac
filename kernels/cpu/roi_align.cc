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
// coordinate more than one pixel outside the axis, or NaN.
struct RoiAxisTap {
  std::int64_t lo = 0, hi = 0;
  double wlo = 0, whi = 0;
  bool inside = false;
};

RoiAxisTap roi_axis_tap(double v, std::int64_t size) {
  RoiAxisTap t;
  if (size < 1 || !(v >= -1.0 && v <= static_cast<double>(size))) return t;
  v = std::max(v, 0.0);
  t.lo = static_cast<std::int64_t>(v);
  if (t.lo >= size - 1) {
    t.lo = t.hi = size - 1;
    v = static_cast<double>(t.lo);
  } else {
    t.hi = t.lo + 1;
  }
  t.whi = v - static_cast<double>(t.lo);
  t.wlo = 1.0 - t.whi;
  t.inside = true;
  return t;
}

// A bin may take at most this many samples (a region's adaptive grid is
// ceil(bin size) per axis): 1024 x 1024.
constexpr double kMaxRoiSamplesPerBin = 1 << 20;

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
std::vector<RoiAxisTap> roi_axis_taps(double start, double extent, std::int64_t bins, std::int64_t grid,
                               std::int64_t size) {
  std::vector<RoiAxisTap> taps(static_cast<std::size_t>(bins * grid));
  const double bin = extent / static_cast<double>(bins);
  for (std::int64_t p = 0; p < bins; ++p)
    for (std::int64_t i = 0; i < grid; ++i)
      taps[static_cast<std::size_t>(p * grid + i)] =
          roi_axis_tap(start + static_cast<double>(p) * bin +
                       (static_cast<double>(i) + 0.5) * bin / static_cast<double>(grid),
                   size);
  return taps;
}

// Region r's taps over an [h, w] plane; kiln::Error naming the op and the
// region for corners that are not finite or bins of too many samples.
RoiRegionTaps roi_region_taps(const KernelContext& ctx, const RoiAlignOp::Attributes& a, const double (&roi)[4],
                       std::int64_t r, std::int64_t h, std::int64_t w) {
  if (!std::isfinite(roi[0]) || !std::isfinite(roi[1]) || !std::isfinite(roi[2]) || !std::isfinite(roi[3]))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' region ", r,
                " has a corner that is not finite: (", roi[0], ", ", roi[1], ", ", roi[2], ", ", roi[3], ")");
  const double shift = a.aligned ? 0.5 : 0.0;
  const double x0 = roi[0] * a.spatial_scale - shift, y0 = roi[1] * a.spatial_scale - shift;
  double width = roi[2] * a.spatial_scale - shift - x0, height = roi[3] * a.spatial_scale - shift - y0;
  if (!a.aligned) width = std::max(width, 1.0), height = std::max(height, 1.0);
  const std::int64_t oh = a.output_size[0], ow = a.output_size[1];
  auto grid = [&](double extent, std::int64_t bins) {
    if (a.sampling_ratio > 0) return static_cast<double>(a.sampling_ratio);
    return std::max(0.0, std::ceil(extent / static_cast<double>(bins)));
  };
  const double gh = grid(height, oh), gw = grid(width, ow);
  if (gh * gw > kMaxRoiSamplesPerBin)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' region ", r, " (", roi[0], ", ",
                roi[1], ", ", roi[2], ", ", roi[3], ") would sample ", gh, " x ", gw,
                " points per bin; at most 2^20 are taken (set sampling_ratio)");
  RoiRegionTaps t;
  t.grid_h = static_cast<std::int64_t>(gh), t.grid_w = static_cast<std::int64_t>(gw);
  t.count = std::max(gh * gw, 1.0);
  t.rows = roi_axis_taps(y0, height, oh, t.grid_h, h);
  t.cols = roi_axis_taps(x0, width, ow, t.grid_w, w);
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

template <typename T>
void roi_corners(const T* rois, std::int64_t r, double (&roi)[4]) {
  for (int k = 0; k < 4; ++k) roi[k] = static_cast<double>(rois[r * 4 + k]);
}

// Calls f(offset, weight) for the four pixels of every sample of bin (ph,
// pw) inside the plane.
template <typename F>
void for_each_roi_tap(const RoiRegionTaps& t, std::int64_t ph, std::int64_t pw, std::int64_t w, F&& f) {
  for (std::int64_t iy = 0; iy < t.grid_h; ++iy) {
    const RoiAxisTap& y = t.rows[static_cast<std::size_t>(ph * t.grid_h + iy)];
    for (std::int64_t ix = 0; ix < t.grid_w; ++ix) {
      const RoiAxisTap& x = t.cols[static_cast<std::size_t>(pw * t.grid_w + ix)];
      if (!y.inside || !x.inside) continue;
      f(y.lo * w + x.lo, y.wlo * x.wlo);
      f(y.lo * w + x.hi, y.wlo * x.whi);
      f(y.hi * w + x.lo, y.whi * x.wlo);
      f(y.hi * w + x.hi, y.whi * x.whi);
    }
  }
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
  for (std::int64_t iy = 0; iy < t.grid_h; ++iy) {
    const RoiAxisTap& y = t.rows[static_cast<std::size_t>(ph * t.grid_h + iy)];
    for (std::int64_t ix = 0; ix < t.grid_w; ++ix) {
      const RoiAxisTap& x = t.cols[static_cast<std::size_t>(pw * t.grid_w + ix)];
      RoiBinMax s;
      if (y.inside && x.inside) {
        const std::int64_t at[4] = {y.lo * w + x.lo, y.lo * w + x.hi, y.hi * w + x.lo, y.hi * w + x.hi};
        const double wt[4] = {y.wlo * x.wlo, y.wlo * x.whi, y.whi * x.wlo, y.whi * x.whi};
        for (int k = 0; k < 4; ++k)
          if (const double q = wt[k] * static_cast<double>(plane[at[k]]); k == 0 || q > s.value)
            s = {q, at[k], wt[k]};
      }
      if (first || s.value > best.value) best = s;
      first = false;
    }
  }
  return best;
}

template <typename T>
struct RoiAlignK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), rois = typed_input<T>(ctx, 1);
    const auto& a = ctx.attrs<RoiAlignOp>();
    const RoiAlignInputs s = roi_align_inputs(ctx, a);
    Tensor& y = ctx.alloc_output(0, Dims{s.regions, s.c, s.oh, s.ow}, x.dtype());
    if (y.numel() == 0) return;
    const bool max = a.mode == "max";
    const T* px = x.data<T>();
    const T* pr = rois.data<T>();
    T* py = y.data<T>();
    const std::int64_t plane = s.h * s.w, bins = s.oh * s.ow;
    parallel_for(s.regions, items_per_range(s.c * bins * 16 * std::int64_t(sizeof(T))),
                 [&](std::int64_t r0, std::int64_t r1) {
                   for (std::int64_t r = r0; r < r1; ++r) {
                     double roi[4];
                     roi_corners(pr, r, roi);
                     const RoiRegionTaps t = roi_region_taps(ctx, a, roi, r, s.h, s.w);
                     const T* xb = px + s.image[static_cast<std::size_t>(r)] * s.c * plane;
                     for (std::int64_t ch = 0; ch < s.c; ++ch) {
                       const T* xp = xb + ch * plane;
                       T* out = py + (r * s.c + ch) * bins;
                       for (std::int64_t ph = 0; ph < s.oh; ++ph)
                         for (std::int64_t pw = 0; pw < s.ow; ++pw) {
                           double v = 0;
                           if (max) {
                             v = roi_bin_max(xp, t, ph, pw, s.w).value;
                           } else {
                             for_each_roi_tap(t, ph, pw, s.w, [&](std::int64_t o, double wt) {
                               v += wt * static_cast<double>(xp[o]);
                             });
                             v /= t.count;
                           }
                           out[ph * s.ow + pw] = static_cast<T>(v);
                         }
                     }
                   }
                 });
  }
};

template <typename T>
struct RoiAlignGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), rois = typed_input<T>(ctx, 1), dout = typed_input<T>(ctx, 3);
    const auto& a = ctx.attrs<GradOf<RoiAlignOp>>();
    const RoiAlignInputs s = roi_align_inputs(ctx, a);
    if (dout.dims() != Dims{s.regions, s.c, s.oh, s.ow})
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' dout [", dout.dims().to_string(),
                  "] must be the forward result's [", Dims{s.regions, s.c, s.oh, s.ow}.to_string(), "]");
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    if (dx.numel() == 0) return;
    std::memset(dx.data<T>(), 0, dx.bytes());
    const T* pr = rois.data<T>();
    std::vector<RoiRegionTaps> taps;
    taps.reserve(static_cast<std::size_t>(s.regions));
    for (std::int64_t r = 0; r < s.regions; ++r) {
      double roi[4];
      roi_corners(pr, r, roi);
      taps.push_back(roi_region_taps(ctx, a, roi, r, s.h, s.w));
    }
    const bool max = a.mode == "max";
    const T* px = x.data<T>();
    const T* pd = dout.data<T>();
    T* pdx = dx.data<T>();
    const std::int64_t plane = s.h * s.w, bins = s.oh * s.ow;
    parallel_for(s.c, items_per_range(s.regions * bins * 16 * std::int64_t(sizeof(T))),
                 [&](std::int64_t c0, std::int64_t c1) {
                   for (std::int64_t r = 0; r < s.regions; ++r) {
                     const RoiRegionTaps& t = taps[static_cast<std::size_t>(r)];
                     const std::int64_t img = s.image[static_cast<std::size_t>(r)];
                     for (std::int64_t ch = c0; ch < c1; ++ch) {
                       const std::int64_t at = (img * s.c + ch) * plane;
                       const T* d = pd + (r * s.c + ch) * bins;
                       for (std::int64_t ph = 0; ph < s.oh; ++ph)
                         for (std::int64_t pw = 0; pw < s.ow; ++pw) {
                           const double g = static_cast<double>(d[ph * s.ow + pw]);
                           if (max) {
                             const RoiBinMax m = roi_bin_max(px + at, t, ph, pw, s.w);
                             if (m.at >= 0) pdx[at + m.at] += static_cast<T>(g * m.weight);
                           } else {
                             for_each_roi_tap(t, ph, pw, s.w, [&](std::int64_t o, double wt) {
                               pdx[at + o] += static_cast<T>(g * wt / t.count);
                             });
                           }
                         }
                     }
                   }
                 });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(RoiAlignOp, Cpu, RoiAlignK, float, double);
KILN_REGISTER_KERNELS(GradOf<RoiAlignOp>, Cpu, RoiAlignGradK, float, double);

}  // namespace kiln::cpu
