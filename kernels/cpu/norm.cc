// CPU kernels of the ops of kiln/dialect/norm_ops.h (f32, f64): layer_norm
// and rms_norm see x as [M, N] contiguous rows and make two passes over each
// row (statistics, then the output) while it is in cache; batch_norm sees x
// as [N, C, S] and makes its per-channel sums over contiguous runs of S. The
// gradient ops compute every gradient in one kernel. Row reductions keep 8
// partial sums so they vectorize without -ffast-math.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/norm_ops.h"

namespace kiln::cpu {
namespace {

constexpr int kLanes = 16;  // one AVX-512 register of f32 (two AVX2 ones)

template <typename T>
KILN_SIMD_INLINE T lanes_total(const T* a) {
  T s = 0;
  for (int l = 0; l < kLanes; ++l) s += a[l];
  return s;
}

// Σ x
template <typename T>
KILN_SIMD_INLINE T row_sum(const T* __restrict x, std::int64_t n) {
  T a[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) a[l] += x[i + l];
  T s = lanes_total(a);
  for (; i < n; ++i) s += x[i];
  return s;
}

// Σ (x - c)²
template <typename T>
KILN_SIMD_INLINE T row_sum_sq(const T* __restrict x, std::int64_t n, T c) {
  T a[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T d = x[i + l] - c;
      a[l] += d * d;
    }
  T s = lanes_total(a);
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

// (Σ g, Σ g·(x - c)) with g = dy·w (w null: g = dy).
template <typename T>
KILN_SIMD_INLINE void row_grad_sums(const T* __restrict x, const T* __restrict dy, const T* __restrict w,
                   std::int64_t n, T c, T& sg, T& sgx) {
  T a[kLanes] = {}, b[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T g = w ? dy[i + l] * w[i + l] : dy[i + l];
      a[l] += g;
      b[l] += g * (x[i + l] - c);
    }
  sg = lanes_total(a);
  sgx = lanes_total(b);
  for (; i < n; ++i) {
    const T g = w ? dy[i] * w[i] : dy[i];
    sg += g;
    sgx += g * (x[i] - c);
  }
}

// The [M, N] split of x at begin_norm_axis; kiln::Error naming the op when
// the axis does not fit x.
struct Rows {
  std::int64_t m = 1, n = 1;
};
Rows rows_of(std::string_view op, const Dims& d, std::int64_t begin_norm_axis) {
  const std::int64_t rank = d.rank();
  const std::int64_t a = begin_norm_axis < 0 ? begin_norm_axis + rank : begin_norm_axis;
  if (rank < 1 || a < 0 || a >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' begin_norm_axis ", begin_norm_axis,
                " is invalid for x [", d.to_string(), "]");
  Rows r;
  for (std::int64_t i = 0; i < rank; ++i) (i < a ? r.m : r.n) *= d[static_cast<int>(i)];
  return r;
}

// Input i of T with `numel` elements; kiln::Error naming the op otherwise.
template <typename T>
const Tensor& sized_input(const KernelContext& ctx, std::uint32_t i, std::string_view what,
                          std::int64_t numel) {
  const Tensor& t = typed_input<T>(ctx, i);
  if (t.numel() != numel)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " (input #", i,
                ") [", t.dims().to_string(), "] has ", t.numel(), " elements, expected ", numel);
  return t;
}

// ---- layer_norm / rms_norm ----

// The row loops of layer_norm / rms_norm, compiled for the CPU's widest SIMD
// level (vector_math.h).
template <typename T, bool Rms>
struct NormForwardRows {
  KILN_SIMD_INLINE static void run(const T* px, const T* __restrict pw, const T* __restrict pb,
                                   T* py, T* mean, T* rstd, std::int64_t m, std::int64_t n, T eps,
                                   T inv_n) {
    for (std::int64_t i = 0; i < m; ++i) {
      const T* __restrict xr = px + i * n;
      T* __restrict yr = py + i * n;
      if constexpr (Rms) {
        const T rs = T(1) / std::sqrt(row_sum_sq(xr, n, T(0)) * inv_n + eps);
        rstd[i] = rs;
        for (std::int64_t j = 0; j < n; ++j) yr[j] = xr[j] * rs * pw[j];
      } else {
        const T mu = row_sum(xr, n) * inv_n;
        const T rs = T(1) / std::sqrt(row_sum_sq(xr, n, mu) * inv_n + eps);
        mean[i] = mu;
        rstd[i] = rs;
        for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rs * pw[j] + pb[j];
      }
    }
  }
};
template <typename T, bool Rms>
struct NormBackwardRows {
  KILN_SIMD_INLINE static void run(const T* px, const T* pdy, const T* __restrict pw,
                                   const T* pm, const T* prs, T* dx, T* __restrict dw,
                                   T* __restrict db, std::int64_t m, std::int64_t n, T inv_n) {
    for (std::int64_t i = 0; i < m; ++i) {
      const T* __restrict xr = px + i * n;
      const T* __restrict dyr = pdy + i * n;
      T* __restrict dxr = dx + i * n;
      const T mu = Rms ? T(0) : pm[i], rs = prs[i];
      T sg, sgx;
      row_grad_sums(xr, dyr, pw, n, mu, sg, sgx);
      const T a = Rms ? T(0) : sg * inv_n;  // mean(g)
      const T c = sgx * rs * inv_n;          // mean(g · x̂)
      for (std::int64_t j = 0; j < n; ++j) {
        const T xh = (xr[j] - mu) * rs;
        dxr[j] = rs * (dyr[j] * pw[j] - a - xh * c);
        dw[j] += dyr[j] * xh;
        if constexpr (!Rms) db[j] += dyr[j];
      }
    }
  }
};

template <typename T, bool Rms>
void norm_forward(KernelContext& ctx, std::int64_t begin_norm_axis, double epsilon) {
  const std::string_view op = ctx.op()->name();
  const Tensor x = typed_input<T>(ctx, 0);
  const Rows r = rows_of(op, x.dims(), begin_norm_axis);
  const Tensor w = sized_input<T>(ctx, 1, "weight", r.n);
  Tensor bias;
  if constexpr (!Rms) bias = sized_input<T>(ctx, 2, "bias", r.n);
  Tensor& y = ctx.alloc_output(0, x.dims(), x.dtype());
  const Dims sd({r.m});
  T* mean = nullptr;
  if constexpr (!Rms) mean = ctx.alloc_output(1, sd, x.dtype()).template data<T>();
  T* rstd = ctx.alloc_output(Rms ? 1 : 2, sd, x.dtype()).template data<T>();
  if (r.m == 0) return;
  const T eps = static_cast<T>(epsilon);
  const T inv_n = r.n ? T(1) / static_cast<T>(r.n) : T(0);
  const T* px = x.data<T>();
  const T* __restrict pw = w.data<T>();
  const T* __restrict pb = Rms ? nullptr : bias.data<T>();
  T* py = y.data<T>();
  simd_dispatch<NormForwardRows<T, Rms>>(px, pw, pb, py, mean, rstd, r.m, r.n, eps, inv_n);
}

// dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)), g = dy · w, x̂ = (x - mean) ·
// rstd (rms_norm: mean = 0 and no mean(g) term); dw += dy · x̂, db += dy.
template <typename T, bool Rms>
void norm_backward(KernelContext& ctx, std::int64_t begin_norm_axis) {
  const std::string_view op = ctx.op()->name();
  const Tensor x = typed_input<T>(ctx, 0);
  const Rows r = rows_of(op, x.dims(), begin_norm_axis);
  const Tensor w = sized_input<T>(ctx, 1, "weight", r.n);
  Tensor mean;
  if constexpr (!Rms) mean = sized_input<T>(ctx, 2, "mean", r.m);
  const std::uint32_t irstd = Rms ? 2 : 3, idy = Rms ? 3 : 4;
  const Tensor rstd = sized_input<T>(ctx, irstd, "rstd", r.m);
  const Tensor dy = typed_input<T>(ctx, idy);
  require_same_dims(ctx, x, dy, 0, static_cast<int>(idy));
  T* dx = ctx.alloc_output(0, x.dims(), x.dtype()).template data<T>();
  T* __restrict dw = ctx.alloc_output(1, w.dims(), w.dtype()).template data<T>();
  T* __restrict db = nullptr;
  if constexpr (!Rms) db = ctx.alloc_output(2, w.dims(), w.dtype()).template data<T>();
  std::fill(dw, dw + r.n, T(0));
  if constexpr (!Rms) std::fill(db, db + r.n, T(0));
  if (r.m == 0 || r.n == 0) return;
  const T inv_n = T(1) / static_cast<T>(r.n);
  const T* __restrict pw = w.data<T>();
  const T* pm = Rms ? nullptr : mean.data<T>();
  const T* prs = rstd.data<T>();
  simd_dispatch<NormBackwardRows<T, Rms>>(x.data<T>(), dy.data<T>(), pw, pm, prs, dx, dw, db, r.m,
                                          r.n, inv_n);
}

template <typename T>
struct LayerNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<LayerNormOp>();
    norm_forward<T, false>(ctx, a.begin_norm_axis, a.epsilon);
  }
};
template <typename T>
struct LayerNormGradK {
  static void run(KernelContext& ctx) {
    norm_backward<T, false>(ctx, ctx.attrs<GradOf<LayerNormOp>>().begin_norm_axis);
  }
};
template <typename T>
struct RmsNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<RmsNormOp>();
    norm_forward<T, true>(ctx, a.begin_norm_axis, a.epsilon);
  }
};
template <typename T>
struct RmsNormGradK {
  static void run(KernelContext& ctx) {
    norm_backward<T, true>(ctx, ctx.attrs<GradOf<RmsNormOp>>().begin_norm_axis);
  }
};

// ---- batch_norm ----

// x as [N, C, S]; kiln::Error naming the op unless rank >= 2.
struct Nchw {
  std::int64_t n = 1, c = 1, s = 1;
};
Nchw nchw_of(std::string_view op, const Dims& d) {
  if (d.rank() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must have rank >= 2 ([N, C, ...]), got [",
                d.to_string(), "]");
  Nchw r;
  r.n = d[0];
  r.c = d[1];
  for (int i = 2; i < d.rank(); ++i) r.s *= d[i];
  return r;
}

// One channel of a training batch norm, every pass while the channel's rows
// are in cache: its mean and variance (sums in batch order), the running
// statistics, then y. Returns nothing; writes smean[c], sinv[c].
template <typename T>
void batch_norm_channel(const T* px, T* py, const T* ps, const T* pb, T* smean, T* sinv, T* run_mean,
                        T* run_var, const Nchw& g, std::int64_t c, T eps, T mom) {
  const std::int64_t count = g.n * g.s;
  const T inv_count = T(1) / static_cast<T>(count);
  T m = T(0), v = T(0);
  for (std::int64_t n = 0; n < g.n; ++n) m += row_sum(px + (n * g.c + c) * g.s, g.s);
  smean[c] = m * inv_count;
  for (std::int64_t n = 0; n < g.n; ++n) v += row_sum_sq(px + (n * g.c + c) * g.s, g.s, smean[c]);
  v *= inv_count;
  sinv[c] = T(1) / std::sqrt(v + eps);
  const T unbias = count > 1 ? static_cast<T>(count) / static_cast<T>(count - 1) : T(1);
  run_mean[c] = mom * run_mean[c] + (T(1) - mom) * smean[c];
  run_var[c] = mom * run_var[c] + (T(1) - mom) * v * unbias;
  const T k = sinv[c] * ps[c], off = pb[c] - smean[c] * k;
  for (std::int64_t n = 0; n < g.n; ++n) {
    const T* __restrict xr = px + (n * g.c + c) * g.s;
    T* __restrict yr = py + (n * g.c + c) * g.s;
    for (std::int64_t j = 0; j < g.s; ++j) yr[j] = xr[j] * k + off;
  }
}

template <typename T>
struct BatchNormK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const auto& a = ctx.attrs<BatchNormOp>();
    const Tensor x = typed_input<T>(ctx, 0);
    const Nchw g = nchw_of(op, x.dims());
    const Tensor scale = sized_input<T>(ctx, 1, "scale", g.c);
    const Tensor bias = sized_input<T>(ctx, 2, "bias", g.c);
    const Tensor rm = sized_input<T>(ctx, 3, "running_mean", g.c);
    const Tensor rv = sized_input<T>(ctx, 4, "running_var", g.c);
    T* run_mean = updated<T>(ctx, 1, 3, rm);
    T* run_var = updated<T>(ctx, 2, 4, rv);
    const Dims cd({g.c});
    T* smean = ctx.alloc_output(3, cd, x.dtype()).template data<T>();
    T* sinv = ctx.alloc_output(4, cd, x.dtype()).template data<T>();
    Tensor& y = ctx.alloc_output(0, x.dims(), x.dtype());
    const T eps = static_cast<T>(a.epsilon), mom = static_cast<T>(a.momentum);
    const T* px = x.data<T>();
    const T* ps = scale.data<T>();
    const T* pb = bias.data<T>();
    T* py = y.data<T>();
    if (!a.is_test) {
      if (g.n * g.s == 0)
        throw_error(ErrorKind::InvalidArgument, "op '", op,
                    "' cannot compute batch statistics of an empty batch (x [",
                    x.dims().to_string(), "])");
      // Channels split across the threads, each channel whole on one.
      parallel_for(g.c, items_per_range(3 * g.n * g.s * std::int64_t(sizeof(T))),
                   [&](std::int64_t c0, std::int64_t c1) {
                     for (std::int64_t c = c0; c < c1; ++c)
                       batch_norm_channel(px, py, ps, pb, smean, sinv, run_mean, run_var, g, c, eps, mom);
                   });
      return;
    }
    for (std::int64_t c = 0; c < g.c; ++c) {
      smean[c] = run_mean[c];
      sinv[c] = T(1) / std::sqrt(run_var[c] + eps);
    }
    parallel_for(g.n * g.c, items_per_range(2 * g.s * std::int64_t(sizeof(T))),
                 [&](std::int64_t r0, std::int64_t r1) {
                   for (std::int64_t r = r0; r < r1; ++r) {
                     const std::int64_t c = r % g.c;
                     const T k = sinv[c] * ps[c], off = pb[c] - smean[c] * k;
                     const T* __restrict xr = px + r * g.s;
                     T* __restrict yr = py + r * g.s;
                     for (std::int64_t j = 0; j < g.s; ++j) yr[j] = xr[j] * k + off;
                   }
                 });
  }
};

template <typename T>
struct BatchNormGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const bool is_test = ctx.attrs<GradOf<BatchNormOp>>().is_test;
    const Tensor x = typed_input<T>(ctx, 0);
    const Nchw g = nchw_of(op, x.dims());
    const Tensor scale = sized_input<T>(ctx, 1, "scale", g.c);
    const Tensor mean = sized_input<T>(ctx, 2, "saved_mean", g.c);
    const Tensor invstd = sized_input<T>(ctx, 3, "saved_invstd", g.c);
    const Tensor dy = typed_input<T>(ctx, 4);
    require_same_dims(ctx, x, dy, 0, 4);
    T* dx = ctx.alloc_output(0, x.dims(), x.dtype()).template data<T>();
    T* __restrict dscale = ctx.alloc_output(1, scale.dims(), x.dtype()).template data<T>();
    T* __restrict dbias = ctx.alloc_output(2, scale.dims(), x.dtype()).template data<T>();
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    const T* pm = mean.data<T>();
    const T* pi = invstd.data<T>();
    const T* ps = scale.data<T>();
    const std::int64_t count = g.n * g.s;
    const T inv_count = count ? T(1) / static_cast<T>(count) : T(0);
    // Channels split across the threads; each channel's sums (dbias = Σ dy,
    // dscale = Σ dy · x̂, in batch order) and then its dx while its rows are
    // still in cache.
    parallel_for(g.c, items_per_range(3 * count * std::int64_t(sizeof(T))),
                 [&](std::int64_t c0, std::int64_t c1) {
                   for (std::int64_t c = c0; c < c1; ++c) {
                     T b = T(0), s = T(0);
                     for (std::int64_t n = 0; n < g.n; ++n) {
                       const std::int64_t off = (n * g.c + c) * g.s;
                       T sg, sgx;
                       row_grad_sums<T>(px + off, pdy + off, nullptr, g.s, pm[c], sg, sgx);
                       b += sg;
                       s += sgx;
                     }
                     dbias[c] = b;
                     dscale[c] = s * pi[c];
                     for (std::int64_t n = 0; n < g.n; ++n)
                       batch_norm_dx_row(px, pdy, dx, ps, pm, pi, dbias, dscale, g, n * g.c + c, inv_count,
                                         is_test);
                   }
                 });
  }

  // dx of row r (image r / c, channel r % c).
  static void batch_norm_dx_row(const T* px, const T* pdy, T* dx, const T* ps, const T* pm,
                                const T* pi, const T* dbias, const T* dscale, const Nchw& g,
                                std::int64_t r, T inv_count, bool is_test) {
    const std::int64_t c = r % g.c, off = r * g.s;
    const T* __restrict xr = px + off;
    const T* __restrict dyr = pdy + off;
    T* __restrict dxr = dx + off;
    const T k = ps[c] * pi[c];
    if (is_test) {
      for (std::int64_t j = 0; j < g.s; ++j) dxr[j] = k * dyr[j];
      return;
    }
    // dx = k · (dy - mean(dy) - x̂ · mean(dy · x̂)), x̂ = (x - mean) · invstd
    const T mdy = dbias[c] * inv_count;
    const T q = dscale[c] * inv_count * pi[c];  // mean(dy · x̂) · invstd
    const T mu = pm[c];
    for (std::int64_t j = 0; j < g.s; ++j) dxr[j] = k * (dyr[j] - mdy - (xr[j] - mu) * q);
  }
};

}  // namespace

KILN_REGISTER_KERNELS(LayerNormOp, Cpu, LayerNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<LayerNormOp>, Cpu, LayerNormGradK, float, double);
KILN_REGISTER_KERNELS(RmsNormOp, Cpu, RmsNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<RmsNormOp>, Cpu, RmsNormGradK, float, double);
KILN_REGISTER_KERNELS(BatchNormOp, Cpu, BatchNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<BatchNormOp>, Cpu, BatchNormGradK, float, double);

}  // namespace kiln::cpu
