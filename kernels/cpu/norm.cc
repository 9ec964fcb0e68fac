// CPU kernels of the ops of kiln/dialect/norm_ops.h (f32, f64; batch_norm
// and fused_batch_norm also take bf16 / f16 x with f32 parameters: each
// channel widened into f32 scratch, the f32 arithmetic, y / dx rounded
// once): layer_norm and rms_norm see x as [M, N] contiguous rows and make
// two passes over each row (statistics, then the output) while it is in
// cache; batch_norm sees x as [N, C, S] and makes its per-channel sums over
// contiguous runs of S, or (NHWC) as rows of C channels and makes them
// across the channels, in the same order. The gradient ops compute every
// gradient in one kernel. Row reductions keep 8 partial sums so they
// vectorize without -ffast-math.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/norm_ops.h"
#include "kiln/dialect/unary_math.h"

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
// dx for rows [0, m) (the pointers at the first row), and each row's dy · x̂
// and dy added into dw and db in row order.
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

// Rows per block of the gradient's parameter sums: each block's dw and db
// are summed apart (a block to one thread), then the blocks in order.
constexpr std::int64_t kGradRowBlock = 64;

// out[j] = Σ over `blocks` of part[b · stride + j], in block order, for
// columns [j0, j1).
template <typename T>
struct BlockSums {
  KILN_SIMD_INLINE static void run(const T* part, T* __restrict out, std::int64_t blocks, std::int64_t stride,
                                   std::int64_t j0, std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; ++j) out[j] = part[j];
    for (std::int64_t b = 1; b < blocks; ++b) {
      const T* __restrict row = part + b * stride;
      for (std::int64_t j = j0; j < j1; ++j) out[j] += row[j];
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
  // Rows split across the kernel's threads (each row computed alone).
  parallel_for(r.m, items_per_range(2 * r.n * std::int64_t(sizeof(T))), [&](std::int64_t i0, std::int64_t i1) {
    simd_dispatch<NormForwardRows<T, Rms>>(px + i0 * r.n, pw, pb, py + i0 * r.n, Rms ? nullptr : mean + i0,
                                           rstd + i0, i1 - i0, r.n, eps, inv_n);
  });
}

// dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)), g = dy · w, x̂ = (x - mean) ·
// rstd (rms_norm: mean = 0 and no mean(g) term); dw = Σ dy · x̂, db = Σ dy
// over the rows. The rows go in blocks of kGradRowBlock, split across the
// kernel's threads; each block sums its rows' dw and db apart, and the
// blocks' sums are added in order: the same bits at any thread count, with
// one pass over x and dy.
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
  T* dw = ctx.alloc_output(1, w.dims(), w.dtype()).template data<T>();
  T* db = nullptr;
  if constexpr (!Rms) db = ctx.alloc_output(2, w.dims(), w.dtype()).template data<T>();
  if (r.m == 0 || r.n == 0) {
    std::fill(dw, dw + r.n, T(0));
    if constexpr (!Rms) std::fill(db, db + r.n, T(0));
    return;
  }
  const T inv_n = T(1) / static_cast<T>(r.n);
  const T* pw = w.data<T>();
  const T* pm = Rms ? nullptr : mean.data<T>();
  const T* prs = rstd.data<T>();
  const T* px = x.data<T>();
  const T* pdy = dy.data<T>();
  // Block b's sums: dw at part + b · stride, db (layer_norm) after it.
  const std::int64_t blocks = (r.m + kGradRowBlock - 1) / kGradRowBlock, stride = Rms ? r.n : 2 * r.n;
  T* part = scratch<T, 2>(blocks * stride);
  const std::int64_t per_range = items_per_range(3 * kGradRowBlock * r.n * std::int64_t(sizeof(T)));
  parallel_for(blocks, per_range, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t i0 = b * kGradRowBlock, rows = std::min(kGradRowBlock, r.m - i0);
      T* pdw = part + b * stride;
      std::fill(pdw, pdw + stride, T(0));
      simd_dispatch<NormBackwardRows<T, Rms>>(px + i0 * r.n, pdy + i0 * r.n, pw, Rms ? nullptr : pm + i0,
                                              prs + i0, dx + i0 * r.n, pdw, Rms ? nullptr : pdw + r.n, rows, r.n,
                                              inv_n);
    }
  });
  // The blocks' sums by column: part's columns [0, n) are dw's, [n, 2n) db's.
  parallel_for(stride, items_per_range(blocks * std::int64_t(sizeof(T))),
               [&](std::int64_t j0, std::int64_t j1) {
                 if (j0 < r.n) simd_dispatch<BlockSums<T>>(part, dw, blocks, stride, j0, std::min(j1, r.n));
                 if (j1 > r.n)
                   simd_dispatch<BlockSums<T>>(part + r.n, db, blocks, stride, std::max(j0, r.n) - r.n, j1 - r.n);
               });
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

// What a batch norm applies to its y (fused_batch_norm's activation, as
// kiln.relu and kiln.clip to [0, 6] compute it) and what of dy its
// gradient lets through, given the pre-activation z: relu's gradient reads
// y > 0, which is z > 0; clip's reads 0 <= z <= 6. NaN: relu 0, clip NaN;
// both gradients 0.
struct NoAct {
  static constexpr bool identity = true;
  template <typename T>
  KILN_SIMD_INLINE static T apply(T z) { return z; }
  template <typename T>
  KILN_SIMD_INLINE static T grad(T, T d) { return d; }
};
struct ReluAct {
  static constexpr bool identity = false;
  template <typename T>
  KILN_SIMD_INLINE static T apply(T z) { return ReluMath::forward(z); }
  template <typename T>
  KILN_SIMD_INLINE static T grad(T z, T d) { return ReluMath::backward(ReluMath::forward(z), d); }
};
struct Relu6Act {
  static constexpr bool identity = false;
  template <typename T>
  KILN_SIMD_INLINE static T apply(T z) {
    const T v = z < T(0) ? T(0) : z;
    return v > T(6) ? T(6) : v;
  }
  template <typename T>
  KILN_SIMD_INLINE static T grad(T z, T d) {
    const T below = z >= T(0) ? d : T(0);
    return z <= T(6) ? below : T(0);
  }
};

// y's per-channel factor and offset (y = x · k + off), from the statistics
// that normalize x: what the forward kernels write y with and what the
// fused gradients recompute the pre-activation with, the same bits.
template <typename T>
void affine_of(T scale, T bias, T mean, T invstd, T& k, T& off) {
  k = invstd * scale;
  off = bias - mean * k;
}

// The attributes the kernels read.
struct BatchNormAttrs {
  double momentum = 0.9, epsilon = 1e-5;
  bool is_test = false;
};

// The pointers the kernels compute with: x and y, the per-channel operands
// and statistics (indexed by channel), epsilon and momentum.
template <typename T>
struct BatchNormPtrs {
  const T *px = nullptr, *ps = nullptr, *pb = nullptr;
  T *run_mean = nullptr, *run_var = nullptr, *smean = nullptr, *sinv = nullptr, *py = nullptr;
  T eps = T(0), mom = T(0);
};

// What a batch_norm kernel reads and writes: x, its per-channel operands
// (checked to hold c values), its running statistics (updated in place),
// its outputs (the saved statistics, y like x), epsilon and momentum. The
// Tensors keep the inputs alive while the outputs are allocated. S: x's and
// y's storage type, T the parameters' and statistics' (S = T, or S 16-bit
// and T float: then px and py stay null).
template <typename T, typename S = T>
struct BatchNormIo : BatchNormPtrs<T> {
  Tensor x, scale, bias, rm, rv;
  S* y = nullptr;
  BatchNormIo(KernelContext& ctx, const Tensor& xt, std::int64_t c, const BatchNormAttrs& a)
      : x(xt),
        scale(sized_input<T>(ctx, 1, "scale", c)),
        bias(sized_input<T>(ctx, 2, "bias", c)),
        rm(sized_input<T>(ctx, 3, "running_mean", c)),
        rv(sized_input<T>(ctx, 4, "running_var", c)) {
    this->ps = scale.data<T>();
    this->pb = bias.data<T>();
    this->eps = static_cast<T>(a.epsilon);
    this->mom = static_cast<T>(a.momentum);
    this->run_mean = updated<T>(ctx, 1, 3, rm);
    this->run_var = updated<T>(ctx, 2, 4, rv);
    this->smean = ctx.alloc_output(3, Dims({c}), scale.dtype()).template data<T>();
    this->sinv = ctx.alloc_output(4, Dims({c}), scale.dtype()).template data<T>();
    y = static_cast<S*>(ctx.alloc_output(0, x.dims(), x.dtype()).raw_data());
    if constexpr (std::is_same_v<S, T>) {
      this->px = x.data<T>();
      this->py = y;
    }
  }
};

// One channel of a training batch norm, every pass while the channel's rows
// are in cache: its mean and variance (sums in batch order), the running
// statistics, then y. Writes io.smean[c], io.sinv[c].
template <typename T, typename Act>
void batch_norm_channel(const BatchNormPtrs<T>& io, const Nchw& g, std::int64_t c) {
  const std::int64_t count = g.n * g.s;
  const T inv_count = T(1) / static_cast<T>(count);
  const T mom = io.mom;
  T m = T(0), v = T(0);
  for (std::int64_t n = 0; n < g.n; ++n) m += row_sum(io.px + (n * g.c + c) * g.s, g.s);
  const T mean = io.smean[c] = m * inv_count;
  for (std::int64_t n = 0; n < g.n; ++n) v += row_sum_sq(io.px + (n * g.c + c) * g.s, g.s, mean);
  v *= inv_count;
  io.sinv[c] = T(1) / std::sqrt(v + io.eps);
  const T unbias = count > 1 ? static_cast<T>(count) / static_cast<T>(count - 1) : T(1);
  io.run_mean[c] = mom * io.run_mean[c] + (T(1) - mom) * mean;
  io.run_var[c] = mom * io.run_var[c] + (T(1) - mom) * v * unbias;
  T k, off;
  affine_of(io.ps[c], io.pb[c], mean, io.sinv[c], k, off);
  for (std::int64_t n = 0; n < g.n; ++n) {
    const T* __restrict xr = io.px + (n * g.c + c) * g.s;
    T* __restrict yr = io.py + (n * g.c + c) * g.s;
    for (std::int64_t j = 0; j < g.s; ++j) yr[j] = Act::apply(xr[j] * k + off);
  }
}

void require_batch(std::string_view op, std::int64_t rows, const Dims& xd) {
  if (rows == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot compute batch statistics of an empty batch (x [",
                xd.to_string(), "])");
}

// ---- batch_norm, NHWC ----

// The NHWC kernels' storage S of x, y, dy and dx: T itself, or a bf16 /
// f16 (Bf16Bits, F16Bits) widened to f32 as the SIMD loops load it and
// rounded once to nearest even (kiln/support/half.h's bits) as they store
// it: the f32 arithmetic on the widened values, the same bits as the f32
// kernel on a widened x.
struct Bf16Bits {
  std::uint16_t bits;
};
struct F16Bits {
  std::uint16_t bits;
};
template <DataType D>
using HalfBits = std::conditional_t<D == DataType::BFloat16, Bf16Bits, F16Bits>;

template <typename T>
KILN_SIMD_INLINE T widened(T v) { return v; }
KILN_SIMD_INLINE float widened(Bf16Bits v) { return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16); }
KILN_SIMD_INLINE float widened(F16Bits v) { return half_to_float(v.bits); }

template <typename S, typename T>
KILN_SIMD_INLINE S stored(T v) {
  if constexpr (std::is_same_v<S, Bf16Bits>) {  // float_to_bfloat16 as a select, so it vectorizes
    const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
    return Bf16Bits{static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
  } else if constexpr (std::is_same_v<S, F16Bits>) {
    return F16Bits{float_to_half(v)};
  } else {
    return v;
  }
}

// NHWC x [N, H, W, C] as N images of s = H·W rows of c channels; kiln::Error
// naming the op unless x has rank 4.
struct Nhwc {
  std::int64_t n = 1, s = 1, c = 1;
};
Nhwc nhwc_of(std::string_view op, const Dims& d) {
  if (d.rank() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' x must be [N, H, W, C] (rank 4, data_format NHWC), got [", d.to_string(), "]");
  return Nhwc{d[0], d[1] * d[2], d[3]};
}

// The per-channel sums of the NHWC kernels follow the NCHW kernel's order:
// each image's sum is row_sum's (16 lanes, row j into lane j mod 16, the
// lanes totalled in order, then the tail rows), one image per call on one
// thread; the images' sums are then added in batch order. The loops run
// across the channels.

// a += one row of c channels: x (Sq: (x - ce)²).
template <typename T, bool Sq, typename S>
KILN_SIMD_INLINE void add_row(T* __restrict a, const S* __restrict xr, const T* __restrict ce, std::int64_t c) {
  for (std::int64_t k = 0; k < c; ++k) {
    if constexpr (Sq) {
      const T d = widened(xr[k]) - ce[k];
      a[k] += d * d;
    } else {
      a[k] += widened(xr[k]);
    }
  }
}

// tot += the lanes' partial sums, lane by lane (lanes_total's order); acc
// holds kLanes rows of c.
template <typename T>
KILN_SIMD_INLINE void add_lanes(T* __restrict tot, const T* __restrict acc, std::int64_t c) {
  for (int l = 0; l < kLanes; ++l)
    for (std::int64_t k = 0; k < c; ++k) tot[k] += acc[l * c + k];
}

// out = one image's Σ x (Sq: Σ (x - center)²) per channel over its s rows;
// acc holds kLanes·c.
template <typename T, bool Sq, typename S = T>
struct NhwcImageSums {
  KILN_SIMD_INLINE static void run(const S* xi, const T* center, T* out, T* acc, std::int64_t s, std::int64_t c) {
    const std::int64_t full = s - s % kLanes;
    std::fill(acc, acc + kLanes * c, T(0));
    std::fill(out, out + c, T(0));
    for (std::int64_t j = 0; j < full; ++j) add_row<T, Sq, S>(acc + (j % kLanes) * c, xi + j * c, center, c);
    add_lanes(out, acc, c);
    for (std::int64_t j = full; j < s; ++j) add_row<T, Sq, S>(out, xi + j * c, center, c);
  }
};

// sum[k] = Σ over the n images of part[image][k], in batch order.
template <typename T>
void add_images(const std::vector<T>& part, T* sum, std::int64_t n, std::int64_t c) {
  std::fill(sum, sum + c, T(0));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < c; ++k) sum[k] += part[static_cast<std::size_t>(i * c + k)];
}

// Per image, its sums (NhwcImageSums) into part [n, c], the images split
// across the threads.
template <typename T, bool Sq, typename S>
void nhwc_image_sums(const S* px, const T* center, std::vector<T>& part, const Nhwc& g) {
  parallel_for(g.n, items_per_range(g.s * g.c * std::int64_t(sizeof(S))), [&](std::int64_t n0, std::int64_t n1) {
    T* acc = scratch<T>(kLanes * g.c);
    for (std::int64_t i = n0; i < n1; ++i)
      simd_dispatch<NhwcImageSums<T, Sq, S>>(px + i * g.s * g.c, center, part.data() + i * g.c, acc, g.s, g.c);
  });
}

// y = act(x · k + off) per channel over rows [r0, r1) of c channels.
template <typename T, typename Act, typename S = T>
struct NhwcScaleShift {
  KILN_SIMD_INLINE static void run(const S* px, S* py, const T* pk, const T* poff, std::int64_t r0,
                                   std::int64_t r1, std::int64_t c) {
    const T* __restrict k = pk;
    const T* __restrict off = poff;
    for (std::int64_t r = r0; r < r1; ++r) {
      const S* __restrict xr = px + r * c;
      S* __restrict yr = py + r * c;
      for (std::int64_t j = 0; j < c; ++j) yr[j] = stored<S>(Act::apply(widened(xr[j]) * k[j] + off[j]));
    }
  }
};

// A training NHWC batch norm's statistics: the NCHW kernel's mean and
// variance (two passes), running statistics, and y's k / off per channel.
template <typename T, typename S>
void batch_norm_nhwc_stats(const BatchNormIo<T, S>& io, T* k, T* off, const Nhwc& g) {
  const S* px = static_cast<const S*>(io.x.raw_data());
  const std::int64_t count = g.n * g.s;
  const T inv_count = T(1) / static_cast<T>(count);
  const T unbias = count > 1 ? static_cast<T>(count) / static_cast<T>(count - 1) : T(1);
  const T mom = io.mom;
  T* smean = io.smean;
  std::vector<T> part(static_cast<std::size_t>(g.n * g.c)), v(static_cast<std::size_t>(g.c));
  nhwc_image_sums<T, false>(px, static_cast<const T*>(nullptr), part, g);
  add_images(part, smean, g.n, g.c);
  for (std::int64_t c = 0; c < g.c; ++c) smean[c] *= inv_count;
  nhwc_image_sums<T, true>(px, static_cast<const T*>(smean), part, g);
  add_images(part, v.data(), g.n, g.c);
  for (std::int64_t c = 0; c < g.c; ++c) {
    const T var = v[static_cast<std::size_t>(c)] * inv_count;
    io.sinv[c] = T(1) / std::sqrt(var + io.eps);
    io.run_mean[c] = mom * io.run_mean[c] + (T(1) - mom) * smean[c];
    io.run_var[c] = mom * io.run_var[c] + (T(1) - mom) * var * unbias;
    affine_of(io.ps[c], io.pb[c], smean[c], io.sinv[c], k[c], off[c]);
  }
}

// is_test: the saved statistics are the running ones; y's k / off per
// channel (either may be null).
template <typename T>
void batch_norm_test_stats(const BatchNormPtrs<T>& io, std::int64_t channels, T* k, T* off) {
  for (std::int64_t c = 0; c < channels; ++c) {
    io.smean[c] = io.run_mean[c];
    io.sinv[c] = T(1) / std::sqrt(io.run_var[c] + io.eps);
    if (k != nullptr) affine_of(io.ps[c], io.pb[c], io.smean[c], io.sinv[c], k[c], off[c]);
  }
}

// batch_norm over NHWC x (stored as S, of dtype xd): the statistics
// (training: each image's sums on one thread, the images split), then y
// with the rows split.
template <typename T, typename Act, typename S = T>
void batch_norm_nhwc(KernelContext& ctx, const BatchNormAttrs& a, DataType xd = data_type_of<T>) {
  const std::string_view op = ctx.op()->name();
  const Tensor x = input_of(ctx, 0, xd);
  const Nhwc g = nhwc_of(op, x.dims());
  const BatchNormIo<T, S> io(ctx, x, g.c, a);
  const std::int64_t rows = g.n * g.s;
  // Not the thread's scratch: the statistics' sums use it on this thread.
  std::vector<T> k(static_cast<std::size_t>(g.c)), off(k.size());
  if (!a.is_test) {
    require_batch(op, rows, x.dims());
    batch_norm_nhwc_stats(io, k.data(), off.data(), g);
  } else {
    batch_norm_test_stats(io, g.c, k.data(), off.data());
  }
  parallel_for(rows, items_per_range(2 * g.c * std::int64_t(sizeof(S))), [&](std::int64_t r0, std::int64_t r1) {
    simd_dispatch<NhwcScaleShift<T, Act, S>>(static_cast<const S*>(io.x.raw_data()), io.y, static_cast<const T*>(k.data()),
                                          static_cast<const T*>(off.data()), r0, r1, g.c);
  });
}

// The NCHW gradient's pointers: x, dy, dx, and the per-channel scale,
// saved statistics, fused k / off, dscale and dbias (indexed by channel).
template <typename T>
struct BatchNormGradPtrs {
  const T *x, *dy, *scale, *mean, *invstd, *k, *off;
  T *dx, *dscale, *dbias;
};

// The gradient kernels' view of their operands: x, scale, (fused: bias,)
// saved_mean, saved_invstd, dy; the outputs dx, dscale, dbias; and, fused,
// the per-channel k / off that recompute the pre-activation (vectors of
// their own: the threads' scratch holds their passed dy). x, dy and dx in
// `xd` (T's dtype, or bf16 / f16 with T float: then dx stays null).
template <typename T, typename Act>
struct BatchNormGradIo {
  static constexpr std::uint32_t kStats = Act::identity ? 2 : 3;
  Tensor x, scale, mean, invstd, dy;
  T *dx = nullptr, *dscale, *dbias;
  void* dx_raw;
  std::vector<T> k, off;
  BatchNormGradIo(KernelContext& ctx, std::int64_t c, DataType xd = data_type_of<T>)
      : x(input_of(ctx, 0, xd)),
        scale(sized_input<T>(ctx, 1, "scale", c)),
        mean(sized_input<T>(ctx, kStats, "saved_mean", c)),
        invstd(sized_input<T>(ctx, kStats + 1, "saved_invstd", c)),
        dy(input_of(ctx, kStats + 2, xd)) {
    require_same_dims(ctx, x, dy, 0, kStats + 2);
    if constexpr (!Act::identity) {
      const T* pb = sized_input<T>(ctx, 2, "bias", c).template data<T>();
      k.resize(static_cast<std::size_t>(c));
      off.resize(k.size());
      for (std::int64_t i = 0; i < c; ++i)
        affine_of(scale.data<T>()[i], pb[i], mean.data<T>()[i], invstd.data<T>()[i], k[i], off[i]);
    }
    dx_raw = ctx.alloc_output(0, x.dims(), x.dtype()).raw_data();
    if (xd == data_type_of<T>) dx = static_cast<T*>(dx_raw);
    dscale = ctx.alloc_output(1, scale.dims(), scale.dtype()).template data<T>();
    dbias = ctx.alloc_output(2, scale.dims(), scale.dtype()).template data<T>();
  }
  // The pointers, x and dy read as T (xd T's dtype).
  BatchNormGradPtrs<T> ptrs() const {
    const T* px = dx ? x.template data<T>() : nullptr;
    const T* pdy = dx ? dy.template data<T>() : nullptr;
    return {px, pdy, scale.template data<T>(), mean.template data<T>(), invstd.template data<T>(),
            k.data(), off.data(), dx, dscale, dbias};
  }
};

// What of dy row dyr the activation lets through at channel j of a row of
// x (NoAct: dy itself, k / off unread).
template <typename T, typename Act, typename S>
KILN_SIMD_INLINE T passed(const S* __restrict xr, const S* __restrict dyr, const T* __restrict k,
                          const T* __restrict off, std::int64_t j) {
  if constexpr (Act::identity) return widened(dyr[j]);
  else return Act::grad(widened(xr[j]) * k[j] + off[j], widened(dyr[j]));
}

// a += g, b += g · (x - mu) over one row of c channels, g what the
// activation passes of dy.
template <typename T, typename Act, typename S>
KILN_SIMD_INLINE void add_grad_row(T* __restrict a, T* __restrict b, const S* __restrict xr,
                                   const S* __restrict dyr, const T* __restrict mu, const T* __restrict k,
                                   const T* __restrict off, std::int64_t c) {
  for (std::int64_t j = 0; j < c; ++j) {
    const T g = passed<T, Act, S>(xr, dyr, k, off, j);
    a[j] += g;
    b[j] += g * (widened(xr[j]) - mu[j]);
  }
}

// One image's sg = Σ g and sgx = Σ g · (x - mean) per channel, in
// row_grad_sums' order; acc holds 2·kLanes·c; k / off: the fused
// activation's pre-activation.
template <typename T, typename Act, typename S = T>
struct NhwcImageGradSums {
  KILN_SIMD_INLINE static void run(const S* xi, const S* dyi, const T* mean, const T* k, const T* off, T* sg,
                                   T* sgx, T* acc, std::int64_t s, std::int64_t c) {
    const std::int64_t full = s - s % kLanes, half = kLanes * c;
    std::fill(acc, acc + 2 * half, T(0));
    std::fill(sg, sg + c, T(0));
    std::fill(sgx, sgx + c, T(0));
    for (std::int64_t j = 0; j < full; ++j) {
      T* a = acc + (j % kLanes) * c;
      add_grad_row<T, Act, S>(a, a + half, xi + j * c, dyi + j * c, mean, k, off, c);
    }
    add_lanes(sg, acc, c);
    add_lanes(sgx, acc + half, c);
    for (std::int64_t j = full; j < s; ++j) add_grad_row<T, Act, S>(sg, sgx, xi + j * c, dyi + j * c, mean, k, off, c);
  }
};

// The per-channel constants of dx: k · g (is_test), else
// k · (g - mdy - (x - mu) · q), g what the activation passes of dy.
template <typename T>
struct DxConstants {
  const T *k, *mdy, *mu, *q, *act_k, *act_off;
};

// dx over rows [r0, r1) of c channels.
template <typename T, typename Act, typename S = T>
struct NhwcBatchNormDx {
  KILN_SIMD_INLINE static void run(const S* px, const S* pdy, S* pdx, DxConstants<T> d, std::int64_t r0,
                                   std::int64_t r1, std::int64_t c, bool is_test) {
    const T* __restrict k = d.k;
    const T* __restrict mdy = d.mdy;
    const T* __restrict mu = d.mu;
    const T* __restrict q = d.q;
    for (std::int64_t r = r0; r < r1; ++r) {
      const S* __restrict xr = px + r * c;
      const S* __restrict dyr = pdy + r * c;
      S* __restrict dxr = pdx + r * c;
      if (is_test)
        for (std::int64_t j = 0; j < c; ++j)
          dxr[j] = stored<S>(k[j] * passed<T, Act, S>(xr, dyr, d.act_k, d.act_off, j));
      else
        for (std::int64_t j = 0; j < c; ++j)
          dxr[j] = stored<S>(k[j] * (passed<T, Act, S>(xr, dyr, d.act_k, d.act_off, j) - mdy[j] -
                                     (widened(xr[j]) - mu[j]) * q[j]));
    }
  }
};

// dbias = Σ g and dscale = Σ g · (x - mean) · invstd per channel: each
// image's sums on one thread (the images split), added in batch order.
template <typename T, typename Act, typename S>
void batch_norm_grad_nhwc_sums(const BatchNormGradIo<T, Act>& io, const Nhwc& g) {
  const S *px = static_cast<const S*>(io.x.raw_data()), *pdy = static_cast<const S*>(io.dy.raw_data());
  const T* pm = io.mean.template data<T>();
  std::vector<T> sg(static_cast<std::size_t>(g.n * g.c)), sgx(sg.size());
  parallel_for(g.n, items_per_range(2 * g.s * g.c * std::int64_t(sizeof(S))), [&](std::int64_t n0, std::int64_t n1) {
    T* acc = scratch<T>(2 * kLanes * g.c);
    for (std::int64_t i = n0; i < n1; ++i)
      simd_dispatch<NhwcImageGradSums<T, Act, S>>(px + i * g.s * g.c, pdy + i * g.s * g.c, pm, io.k.data(),
                                               io.off.data(), sg.data() + i * g.c, sgx.data() + i * g.c, acc,
                                               g.s, g.c);
  });
  add_images(sg, io.dbias, g.n, g.c);
  add_images(sgx, io.dscale, g.n, g.c);
  const T* pi = io.invstd.template data<T>();
  for (std::int64_t c = 0; c < g.c; ++c) io.dscale[c] *= pi[c];
}

// batch_norm_grad over NHWC x and dy (stored as S, of dtype xd): dbias and
// dscale, then dx with the rows split; the NCHW kernel's formulas.
template <typename T, typename Act, typename S = T>
void batch_norm_grad_nhwc(KernelContext& ctx, bool is_test, DataType xd = data_type_of<T>) {
  const Nhwc g = nhwc_of(ctx.op()->name(), input_of(ctx, 0, xd).dims());
  const BatchNormGradIo<T, Act> io(ctx, g.c, xd);
  batch_norm_grad_nhwc_sums<T, Act, S>(io, g);
  const std::int64_t rows = g.n * g.s;
  const T inv_count = rows ? T(1) / static_cast<T>(rows) : T(0);
  const T *ps = io.scale.template data<T>(), *pi = io.invstd.template data<T>();
  std::vector<T> k(static_cast<std::size_t>(g.c)), mdy(k.size()), q(k.size());
  for (std::int64_t c = 0; c < g.c; ++c) {
    k[c] = ps[c] * pi[c];
    mdy[c] = io.dbias[c] * inv_count;
    q[c] = io.dscale[c] * inv_count * pi[c];
  }
  const DxConstants<T> d{k.data(), mdy.data(), io.mean.template data<T>(), q.data(), io.k.data(), io.off.data()};
  const S *px = static_cast<const S*>(io.x.raw_data()), *pdy = static_cast<const S*>(io.dy.raw_data());
  S* pdx = static_cast<S*>(io.dx_raw);
  parallel_for(rows, items_per_range(3 * g.c * std::int64_t(sizeof(S))), [&](std::int64_t r0, std::int64_t r1) {
    simd_dispatch<NhwcBatchNormDx<T, Act, S>>(px, pdy, pdx, d, r0, r1, g.c, is_test);
  });
}

// ---- the kernels ----

// batch_norm over NCHW x: training, the channels split across the threads,
// each channel whole on one; is_test, the rows split.
template <typename T, typename Act>
void batch_norm_nchw(KernelContext& ctx, const BatchNormAttrs& a) {
  const std::string_view op = ctx.op()->name();
  const Tensor x = typed_input<T>(ctx, 0);
  const Nchw g = nchw_of(op, x.dims());
  const BatchNormIo<T> io(ctx, x, g.c, a);
  if (!a.is_test) {
    require_batch(op, g.n * g.s, x.dims());
    parallel_for(g.c, items_per_range(3 * g.n * g.s * std::int64_t(sizeof(T))), [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) batch_norm_channel<T, Act>(io, g, c);
    });
    return;
  }
  batch_norm_test_stats<T>(io, g.c, nullptr, nullptr);
  parallel_for(g.n * g.c, items_per_range(2 * g.s * std::int64_t(sizeof(T))), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t c = r % g.c;
      T k, off;
      affine_of(io.ps[c], io.pb[c], io.smean[c], io.sinv[c], k, off);
      const T* __restrict xr = io.px + r * g.s;
      T* __restrict yr = io.py + r * g.s;
      for (std::int64_t j = 0; j < g.s; ++j) yr[j] = Act::apply(xr[j] * k + off);
    }
  });
}

// dx of one row: k · g (is_test), else k · (g - mdy - (x - mu) · q).
template <typename T>
void batch_norm_dx_row(const T* __restrict xr, const T* __restrict gr, T* __restrict dxr, std::int64_t s, T k,
                       T mdy, T mu, T q, bool is_test) {
  if (is_test) {
    for (std::int64_t j = 0; j < s; ++j) dxr[j] = k * gr[j];
    return;
  }
  for (std::int64_t j = 0; j < s; ++j) dxr[j] = k * (gr[j] - mdy - (xr[j] - mu) * q);
}

// One channel's gradients over NCHW x: dbias = Σ g, dscale = Σ g · x̂ (in
// batch order), then its dx rows while they are in cache; g what the
// activation passes of dy (fused: the channel's g first, into `passed`).
template <typename T, typename Act>
void batch_norm_grad_channel(const BatchNormGradPtrs<T>& io, const Nchw& g, std::int64_t c, T inv_count,
                             bool is_test, T* passed) {
  const T *px = io.x, *pdy = io.dy;
  const T mu = io.mean[c], pi = io.invstd[c];
  auto row = [&](std::int64_t n) { return (n * g.c + c) * g.s; };
  auto g_row = [&](std::int64_t n) { return Act::identity ? pdy + row(n) : passed + n * g.s; };
  if constexpr (!Act::identity)
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t j = 0; j < g.s; ++j)
        passed[n * g.s + j] = Act::grad(px[row(n) + j] * io.k[c] + io.off[c], pdy[row(n) + j]);
  T b = T(0), s = T(0);
  for (std::int64_t n = 0; n < g.n; ++n) {
    T sg, sgx;
    row_grad_sums<T>(px + row(n), g_row(n), nullptr, g.s, mu, sg, sgx);
    b += sg;
    s += sgx;
  }
  io.dbias[c] = b;
  io.dscale[c] = s * pi;
  // dx = k · (g - mean(g) - x̂ · mean(g · x̂)), x̂ = (x - mean) · invstd
  const T k = io.scale[c] * pi;
  const T mdy = io.dbias[c] * inv_count, q = io.dscale[c] * inv_count * pi;
  for (std::int64_t n = 0; n < g.n; ++n)
    batch_norm_dx_row(px + row(n), g_row(n), io.dx + row(n), g.s, k, mdy, mu, q, is_test);
}

// batch_norm_grad over NCHW x and dy: the channels split across the threads.
template <typename T, typename Act>
void batch_norm_grad_nchw(KernelContext& ctx, bool is_test) {
  const Nchw g = nchw_of(ctx.op()->name(), typed_input<T>(ctx, 0).dims());
  const BatchNormGradIo<T, Act> gio(ctx, g.c);
  const BatchNormGradPtrs<T> io = gio.ptrs();
  const std::int64_t count = g.n * g.s;
  const T inv_count = count ? T(1) / static_cast<T>(count) : T(0);
  parallel_for(g.c, items_per_range(3 * count * std::int64_t(sizeof(T))), [&](std::int64_t c0, std::int64_t c1) {
    T* passed = Act::identity ? nullptr : scratch<T>(count);
    for (std::int64_t c = c0; c < c1; ++c) batch_norm_grad_channel<T, Act>(io, g, c, inv_count, is_test, passed);
  });
}

template <typename T, typename Act>
void batch_norm_forward(KernelContext& ctx, const BatchNormAttrs& a, const std::string& format) {
  if (data_format::channels_last(ctx.op()->name(), format)) return batch_norm_nhwc<T, Act>(ctx, a);
  batch_norm_nchw<T, Act>(ctx, a);
}

template <typename T, typename Act>
void batch_norm_backward(KernelContext& ctx, bool is_test, const std::string& format) {
  if (data_format::channels_last(ctx.op()->name(), format)) return batch_norm_grad_nhwc<T, Act>(ctx, is_test);
  batch_norm_grad_nchw<T, Act>(ctx, is_test);
}

template <typename T>
struct BatchNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<BatchNormOp>();
    batch_norm_forward<T, NoAct>(ctx, {a.momentum, a.epsilon, a.is_test}, a.data_format);
  }
};

template <typename T>
struct BatchNormGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<BatchNormOp>>();
    batch_norm_backward<T, NoAct>(ctx, a.is_test, a.data_format);
  }
};

// fused_batch_norm's activation, as the attribute names it.
template <typename Body>
void with_activation(std::string_view op, const std::string& activation, Body&& body) {
  if (activation == "relu") return body(ReluAct{});
  if (activation == "relu6") return body(Relu6Act{});
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' activation '", activation,
              "' has no CPU kernel (expected \"relu\" or \"relu6\")");
}

template <typename T>
struct FusedBatchNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<FusedBatchNormOp>();
    with_activation(ctx.op()->name(), a.activation, [&](auto act) {
      batch_norm_forward<T, decltype(act)>(ctx, {a.momentum, a.epsilon, a.is_test}, a.data_format);
    });
  }
};

template <typename T>
struct FusedBatchNormGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<FusedBatchNormOp>>();
    with_activation(ctx.op()->name(), a.activation,
                    [&](auto act) { batch_norm_backward<T, decltype(act)>(ctx, a.is_test, a.data_format); });
  }
};

// ---- batch_norm in mixed precision: bf16 / f16 x, y, dy, dx ----
// NCHW: each channel's rows are widened into the thread's f32 scratch, the
// f32 kernels' channel passes run over them (the same sums in the same
// order, so the f32 kernels' bits on the widened x), and y / dx are
// rounded once on the way out. NHWC: the NHWC kernels with x, y, dy and dx
// stored 16-bit (HalfBits). No f32 copy of a whole tensor either way.

using HalfBatchNormIo = BatchNormIo<float, std::uint16_t>;

const std::uint16_t* half_data(const Tensor& t) { return static_cast<const std::uint16_t*>(t.raw_data()); }

// Channel c's n rows of s values at `from` ([N, C, S]) into `to`
// ([N, S]) as f32, or back rounded to D.
template <DataType D>
void widen_channel(const std::uint16_t* from, float* to, const Nchw& g, std::int64_t c) {
  for (std::int64_t n = 0; n < g.n; ++n) widen_half_row<D>(from + (n * g.c + c) * g.s, to + n * g.s, g.s);
}
template <DataType D>
void round_channel(const float* from, std::uint16_t* to, const Nchw& g, std::int64_t c) {
  for (std::int64_t n = 0; n < g.n; ++n) round_half_row<D>(from + n * g.s, to + (n * g.c + c) * g.s, g.s);
}

// One channel of a training batch norm; buf holds 2·n·s floats.
template <DataType D, typename Act>
void batch_norm_half_channel(const HalfBatchNormIo& io, const Nchw& g, std::int64_t c, float* buf) {
  const std::int64_t count = g.n * g.s;
  widen_channel<D>(half_data(io.x), buf, g, c);
  BatchNormPtrs<float> one = io;
  one.px = buf;
  one.py = buf + count;
  for (float** p : {&one.run_mean, &one.run_var, &one.smean, &one.sinv}) *p += c;
  one.ps += c;
  one.pb += c;
  batch_norm_channel<float, Act>(one, Nchw{g.n, 1, g.s}, 0);
  round_channel<D>(buf + count, io.y, g, c);
}

// is_test: y row by row with the running statistics.
template <DataType D, typename Act>
void batch_norm_half_test(const HalfBatchNormIo& io, const Nchw& g) {
  batch_norm_test_stats<float>(io, g.c, nullptr, nullptr);
  parallel_for(g.n * g.c, items_per_range(4 * g.s), [&](std::int64_t r0, std::int64_t r1) {
    float* row = scratch<float>(g.s);
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t c = r % g.c;
      float k, off;
      affine_of(io.ps[c], io.pb[c], io.smean[c], io.sinv[c], k, off);
      widen_half_row<D>(half_data(io.x) + r * g.s, row, g.s);
      for (std::int64_t j = 0; j < g.s; ++j) row[j] = Act::apply(row[j] * k + off);
      round_half_row<D>(row, io.y + r * g.s, g.s);
    }
  });
}

template <DataType D, typename Act>
void batch_norm_half_nchw(KernelContext& ctx, const BatchNormAttrs& a) {
  const std::string_view op = ctx.op()->name();
  const Tensor x = input_of(ctx, 0, D);
  const Nchw g = nchw_of(op, x.dims());
  const HalfBatchNormIo io(ctx, x, g.c, a);
  if (a.is_test) return batch_norm_half_test<D, Act>(io, g);
  const std::int64_t count = g.n * g.s;
  require_batch(op, count, x.dims());
  parallel_for(g.c, items_per_range(3 * count * 2), [&](std::int64_t c0, std::int64_t c1) {
    float* buf = scratch<float>(2 * count);
    for (std::int64_t c = c0; c < c1; ++c) batch_norm_half_channel<D, Act>(io, g, c, buf);
  });
}

// One channel's gradients; buf holds 3·n·s floats (4 with an activation).
template <DataType D, typename Act>
void batch_norm_grad_half_channel(const BatchNormGradIo<float, Act>& gio, const BatchNormGradPtrs<float>& io,
                                  const Nchw& g, std::int64_t c, float inv_count, bool is_test, float* buf) {
  const std::int64_t count = g.n * g.s;
  float *xs = buf, *dys = buf + count, *dxs = buf + 2 * count;
  widen_channel<D>(half_data(gio.x), xs, g, c);
  widen_channel<D>(half_data(gio.dy), dys, g, c);
  const BatchNormGradPtrs<float> one{xs,      dys,      io.scale + c, io.mean + c,   io.invstd + c,
                                     io.k ? io.k + c : nullptr,     io.off ? io.off + c : nullptr,
                                     dxs,     io.dscale + c,          io.dbias + c};
  batch_norm_grad_channel<float, Act>(one, Nchw{g.n, 1, g.s}, 0, inv_count, is_test, buf + 3 * count);
  round_channel<D>(dxs, static_cast<std::uint16_t*>(gio.dx_raw), g, c);
}

template <DataType D, typename Act>
void batch_norm_grad_half_nchw(KernelContext& ctx, bool is_test) {
  const Nchw g = nchw_of(ctx.op()->name(), input_of(ctx, 0, D).dims());
  const BatchNormGradIo<float, Act> gio(ctx, g.c, D);
  const BatchNormGradPtrs<float> io = gio.ptrs();
  const std::int64_t count = g.n * g.s;
  const float inv_count = count ? 1.0f / static_cast<float>(count) : 0.0f;
  parallel_for(g.c, items_per_range(3 * count * 2), [&](std::int64_t c0, std::int64_t c1) {
    float* buf = scratch<float>((Act::identity ? 3 : 4) * count);
    for (std::int64_t c = c0; c < c1; ++c) batch_norm_grad_half_channel<D, Act>(gio, io, g, c, inv_count, is_test, buf);
  });
}

template <DataType D, typename Act>
void batch_norm_half_forward(KernelContext& ctx, const BatchNormAttrs& a, const std::string& format) {
  if (data_format::channels_last(ctx.op()->name(), format)) return batch_norm_nhwc<float, Act, HalfBits<D>>(ctx, a, D);
  batch_norm_half_nchw<D, Act>(ctx, a);
}

template <DataType D, typename Act>
void batch_norm_half_backward(KernelContext& ctx, bool is_test, const std::string& format) {
  if (data_format::channels_last(ctx.op()->name(), format))
    return batch_norm_grad_nhwc<float, Act, HalfBits<D>>(ctx, is_test, D);
  batch_norm_grad_half_nchw<D, Act>(ctx, is_test);
}

// The bf16 / f16 kernels of the four batch norm ops.
template <DataType D>
struct BatchNormHalfK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<BatchNormOp>();
    batch_norm_half_forward<D, NoAct>(ctx, {a.momentum, a.epsilon, a.is_test}, a.data_format);
  }
};

template <DataType D>
struct BatchNormGradHalfK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<BatchNormOp>>();
    batch_norm_half_backward<D, NoAct>(ctx, a.is_test, a.data_format);
  }
};

template <DataType D>
struct FusedBatchNormHalfK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<FusedBatchNormOp>();
    with_activation(ctx.op()->name(), a.activation, [&](auto act) {
      batch_norm_half_forward<D, decltype(act)>(ctx, {a.momentum, a.epsilon, a.is_test}, a.data_format);
    });
  }
};

template <DataType D>
struct FusedBatchNormGradHalfK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<FusedBatchNormOp>>();
    with_activation(ctx.op()->name(), a.activation,
                    [&](auto act) { batch_norm_half_backward<D, decltype(act)>(ctx, a.is_test, a.data_format); });
  }
};

template <DataType D>
void register_batch_norm_halves() {
  KernelRegistrar<BatchNormOp>(PlaceKind::Cpu, D, &BatchNormHalfK<D>::run, BatchNormOp::name);
  KernelRegistrar<GradOf<BatchNormOp>>(PlaceKind::Cpu, D, &BatchNormGradHalfK<D>::run,
                                       GradOf<BatchNormOp>::name);
  KernelRegistrar<FusedBatchNormOp>(PlaceKind::Cpu, D, &FusedBatchNormHalfK<D>::run, FusedBatchNormOp::name);
  KernelRegistrar<GradOf<FusedBatchNormOp>>(PlaceKind::Cpu, D, &FusedBatchNormGradHalfK<D>::run,
                                            GradOf<FusedBatchNormOp>::name);
}

[[maybe_unused]] const bool halves_registered = [] {
  register_batch_norm_halves<DataType::BFloat16>();
  register_batch_norm_halves<DataType::Float16>();
  return true;
}();

}  // namespace

KILN_REGISTER_KERNELS(LayerNormOp, Cpu, LayerNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<LayerNormOp>, Cpu, LayerNormGradK, float, double);
KILN_REGISTER_KERNELS(RmsNormOp, Cpu, RmsNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<RmsNormOp>, Cpu, RmsNormGradK, float, double);
KILN_REGISTER_KERNELS(BatchNormOp, Cpu, BatchNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<BatchNormOp>, Cpu, BatchNormGradK, float, double);
KILN_REGISTER_KERNELS(FusedBatchNormOp, Cpu, FusedBatchNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<FusedBatchNormOp>, Cpu, FusedBatchNormGradK, float, double);

}  // namespace kiln::cpu
