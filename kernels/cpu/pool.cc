// CPU kernels of kiln.max_pool2d, kiln.avg_pool2d, kiln.adaptive_avg_pool2d
// and their gradients (NCHW), one [H, W] plane at a time; max_pool2d and its
// gradient also NHWC, across the channels of each pixel. Windows are
// clipped to the input; max_pool2d's grad recomputes each window's first
// maximum from x. A 2x2 max pool with stride 2 and no padding (LeNet's) has
// its own loops over pairs of input rows, forward and backward.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "sigmoid_avx512.h"
#include "vector_math.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/pool_ops.h"

namespace kiln::cpu {
namespace {

// 1 when q takes over the running maximum m in argmax's order (larger, or
// NaN while m is not), else 0.
template <typename T>
inline T replaces_max(T m, T q) {
  const T larger = q <= m ? T(0) : T(1);
  return m != m ? T(0) : larger;
}

// The larger of a and b, NaN if either is (argmax's order: NaN wins). Two
// one-level selects, so a loop over it vectorizes (GCC 12).
template <typename T>
inline T max_nan(T a, T b) {
  const T m = b > a ? b : a;  // a when a is NaN
  return b != b ? b : m;
}

inline bool is_2x2(const Pool2dGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.pt == 0 && g.pl == 0 &&
         2 * g.ho <= g.h && 2 * g.wo <= g.w;
}

// The outputs [lo, hi) of a row whose input column ow·s + off lies in [0, w).
inline void valid_columns(std::int64_t off, std::int64_t s, std::int64_t w, std::int64_t wo,
                          std::int64_t& lo, std::int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = w - off <= 0 ? 0 : (w - off + s - 1) / s;
  lo = std::min(lo, wo);
  hi = std::clamp(hi, lo, wo);
}

// Per window column j, the outputs [lo, hi) of a row that read inside the
// input (valid_columns of j − pl): the same for every row of every plane.
struct WindowColumns {
  std::vector<std::int64_t> lo, hi;
  explicit WindowColumns(const Pool2dGeometry& g)
      : lo(static_cast<std::size_t>(g.kw)), hi(static_cast<std::size_t>(g.kw)) {
    for (std::int64_t j = 0; j < g.kw; ++j) valid_columns(j - g.pl, g.sw, g.w, g.wo, lo[j], hi[j]);
  }
};

// A max pool's geometry over x (dims d) in NCHW or, with nhwc, NHWC;
// kiln::Error naming the op when NHWC x is not rank 4.
template <typename Attrs>
Pool2dGeometry max_pool_geometry(std::string_view op, const Dims& d, const Attrs& a, bool nhwc) {
  if (!nhwc) return pool::geometry(op, d, a);
  if (d.rank() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must be [N, H, W, C] (rank 4, data_format NHWC), got [",
                d.to_string(), "]");
  return pool::geometry(op, Dims{d[0], d[3], d[1], d[2]}, a);
}

// Output row oh of one plane folded over its windows, a window offset
// (i, j) at a time in the window's row-major order: row[ow] = fold(row[ow],
// v) for each input v the offset reads there (a shifted input row, unit
// stride or strided by sw), so each output folds its window in the order a
// loop over the window would, and the inner loop vectorizes.
template <typename T, typename Fold>
KILN_SIMD_INLINE void fold_pool_row(const T* __restrict xp, T* __restrict row, const Pool2dGeometry& g,
                                    const WindowColumns& wc, std::int64_t oh, Fold fold) {
  for (std::int64_t i = 0; i < g.kh; ++i) {
    const std::int64_t ih = oh * g.sh - g.pt + i;
    if (ih < 0 || ih >= g.h) continue;
    const T* __restrict xr = xp + ih * g.w;
    for (std::int64_t j = 0; j < g.kw; ++j) {
      const std::int64_t lo = wc.lo[j], hi = wc.hi[j];
      const T* __restrict xs = xr + (j - g.pl);
      if (g.sw == 1) {
        for (std::int64_t ow = lo; ow < hi; ++ow) row[ow] = fold(row[ow], xs[ow]);
      } else {
        for (std::int64_t ow = lo; ow < hi; ++ow) row[ow] = fold(row[ow], xs[ow * g.sw]);
      }
    }
  }
}

// One plane's max pool, a row at a time (fold_pool_row with max_nan): each
// output is pool_argmax's value (the first maximum; NaN wins). Floating
// point only (-inf starts every output).
template <typename T>
void max_pool_plane(const T* __restrict xp, T* __restrict o, const Pool2dGeometry& g, const WindowColumns& wc) {
  for (std::int64_t oh = 0; oh < g.ho; ++oh) {
    T* __restrict row = o + oh * g.wo;
    std::fill(row, row + g.wo, -std::numeric_limits<T>::infinity());
    fold_pool_row(xp, row, g, wc, oh, [](T m, T v) { return max_nan(m, v); });
  }
}

// The output pixels of a 2x2 stride-2 NHWC max pool row with C channels
// known at compile time (r0, r1: its two input rows; o: its output row).
template <std::int64_t C, typename T>
KILN_SIMD_INLINE void max_pool_nhwc_pixels_2x2(const T* __restrict r0, const T* __restrict r1, T* __restrict o,
                                               std::int64_t wo) {
  for (std::int64_t ow = 0; ow < wo; ++ow) {
    const T* __restrict a = r0 + 2 * ow * C;
    const T* __restrict b = r1 + 2 * ow * C;
    for (std::int64_t k = 0; k < C; ++k)
      o[ow * C + k] = max_nan(max_nan(a[k], a[C + k]), max_nan(b[k], b[C + k]));
  }
}

// max_pool_nhwc_pixels_2x2 for c channels, for f32 and the small counts
// (1..15) whose runtime-length channel loop does not vectorize (LeNet's 6
// channels: 6x faster); false for any other count or dtype.
template <typename T, std::int64_t... Cs>
KILN_SIMD_INLINE bool max_pool_nhwc_pixels_2x2_small(std::int64_t c, const T* r0, const T* r1, T* o,
                                                     std::int64_t wo, std::integer_sequence<std::int64_t, Cs...>) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    return ((c == Cs + 1 && (max_pool_nhwc_pixels_2x2<Cs + 1>(r0, r1, o, wo), true)) || ...);
  }
}

// One output row (n, oh) of a 2x2 stride-2 NHWC max pool (LeNet's): one
// pass per output pixel over its four inputs. max_nan(max_nan(a, b),
// max_nan(c, d)) keeps the row-major fold's bits: its last NaN, else its
// first maximum.
template <typename T>
KILN_SIMD_INLINE void max_pool_nhwc_row_2x2(const T* x, T* out, const Pool2dGeometry& g,
                                            std::int64_t n, std::int64_t oh) {
  const std::int64_t c = g.c;
  const T* __restrict r0 = x + (n * g.h + 2 * oh) * g.w * c;
  const T* __restrict r1 = r0 + g.w * c;
  T* __restrict o = out + (n * g.ho + oh) * g.wo * c;
  if (max_pool_nhwc_pixels_2x2_small(c, r0, r1, o, g.wo, std::make_integer_sequence<std::int64_t, 15>{})) return;
  for (std::int64_t ow = 0; ow < g.wo; ++ow) {
    const T* __restrict a = r0 + 2 * ow * c;
    const T* __restrict b = r1 + 2 * ow * c;
    for (std::int64_t k = 0; k < c; ++k)
      o[ow * c + k] = max_nan(max_nan(a[k], a[c + k]), max_nan(b[k], b[c + k]));
  }
}

// o[0, B) = the max_nan fold, in the window's row-major order, of channels
// [0, B) of the window's pixels (x: the image's channel c0; B known at
// compile time, so that the running maxima stay in registers). The window
// is not empty.
template <std::int64_t B, typename T>
KILN_SIMD_INLINE void fold_window(const T* __restrict x, T* __restrict o, const PoolWindow& r,
                                  std::int64_t w, std::int64_t c) {
  T acc[B];
  const T* __restrict first = x + (r.hs * w + r.ws) * c;
  for (std::int64_t k = 0; k < B; ++k) acc[k] = first[k];
  for (std::int64_t ih = r.hs; ih < r.he; ++ih)
    for (std::int64_t iw = ih == r.hs ? r.ws + 1 : r.ws; iw < r.we; ++iw) {
      const T* __restrict xs = x + (ih * w + iw) * c;
      for (std::int64_t k = 0; k < B; ++k) acc[k] = max_nan(acc[k], xs[k]);
    }
  for (std::int64_t k = 0; k < B; ++k) o[k] = acc[k];
}

// One output row (n, oh) of max_pool2d over NHWC x [n, h, w, c]: each
// output pixel's channels, in blocks of 32, 16, 8 and 1, folded over its
// window with max_nan in the window's row-major order (the NCHW kernel's
// values). One pass over the window per block, the maxima meant to stay in
// registers; GCC 12 keeps its selects scalar, though (ShuffleNet's 3x3
// stride-2 pool over 8x112x112x24: 5.3-6.4 ms at one thread on a Xeon, at
// the baseline and AVX2 levels), so f32 on AVX-512 CPUs takes
// max_pool_nhwc_row_avx512 below.
template <typename T>
KILN_SIMD_INLINE void max_pool_nhwc_row(const T* x, T* out, const Pool2dGeometry& g, std::int64_t n,
                                        std::int64_t oh) {
  if (is_2x2(g)) return max_pool_nhwc_row_2x2(x, out, g, n, oh);
  const T* image = x + n * g.h * g.w * g.c;
  for (std::int64_t ow = 0; ow < g.wo; ++ow) {
    T* __restrict o = out + ((n * g.ho + oh) * g.wo + ow) * g.c;
    const PoolWindow r = pool_window(g, oh, ow);
    if (r.hs >= r.he || r.ws >= r.we) {  // all padding: the fold's start
      std::fill(o, o + g.c, std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity()
                                                        : std::numeric_limits<T>::lowest());
      continue;
    }
    std::int64_t c0 = 0;
    for (; c0 + 32 <= g.c; c0 += 32) fold_window<32>(image + c0, o + c0, r, g.w, g.c);
    if (c0 + 16 <= g.c) fold_window<16>(image + c0, o + c0, r, g.w, g.c), c0 += 16;
    if (c0 + 8 <= g.c) fold_window<8>(image + c0, o + c0, r, g.w, g.c), c0 += 8;
    for (; c0 < g.c; ++c0) fold_window<1>(image + c0, o + c0, r, g.w, g.c);
  }
}

#ifdef KILN_HAS_SIMD_CLONES
// max_nan in 16 lanes: vmaxps(b, a) is b > a ? b : a, then a NaN b wins.
KILN_TARGET_AVX512 inline __m512 max_nan16(__m512 a, __m512 b) {
  const __m512 m = _mm512_mask_max_ps(a, avx512::kAll, b, a);
  return _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), b);
}

// fold_window for V vectors of channels (x: the image's first channel of
// them), the last one's lanes under `last`: the same folds in the same
// order, in intrinsics (ShuffleNet's pool above: 0.62 ms).
template <int V>
KILN_TARGET_AVX512 void fold_window_avx512(const float* x, float* o, const PoolWindow& r, std::int64_t w,
                                           std::int64_t c, __mmask16 last) {
  __m512 acc[V];
  const float* first = x + (r.hs * w + r.ws) * c;
  for (int v = 0; v < V; ++v) acc[v] = _mm512_maskz_loadu_ps(v + 1 < V ? avx512::kAll : last, first + 16 * v);
  for (std::int64_t ih = r.hs; ih < r.he; ++ih)
    for (std::int64_t iw = ih == r.hs ? r.ws + 1 : r.ws; iw < r.we; ++iw) {
      const float* xs = x + (ih * w + iw) * c;
      for (int v = 0; v + 1 < V; ++v) acc[v] = max_nan16(acc[v], _mm512_loadu_ps(xs + 16 * v));
      acc[V - 1] = max_nan16(acc[V - 1], last == avx512::kAll ? _mm512_loadu_ps(xs + 16 * (V - 1))
                                                         : _mm512_maskz_loadu_ps(last, xs + 16 * (V - 1)));
    }
  for (int v = 0; v + 1 < V; ++v) _mm512_storeu_ps(o + 16 * v, acc[v]);
  _mm512_mask_storeu_ps(o + 16 * (V - 1), last, acc[V - 1]);
}

// For each output pixel of the f32 NHWC row (n, oh): fold(image, o, r),
// where image is x's image n, o the pixel's output and r its window, which
// holds a pixel; all-padding windows get the fold's start, -inf. The rows
// of the hand-written folds below.
template <typename Fold>
KILN_SIMD_INLINE void for_each_window(const float* x, float* out, const Pool2dGeometry& g, std::int64_t n,
                                      std::int64_t oh, Fold fold) {
  const float* image = x + n * g.h * g.w * g.c;
  for (std::int64_t ow = 0; ow < g.wo; ++ow) {
    float* o = out + ((n * g.ho + oh) * g.wo + ow) * g.c;
    const PoolWindow r = pool_window(g, oh, ow);
    if (r.hs >= r.he || r.ws >= r.we)
      std::fill(o, o + g.c, -std::numeric_limits<float>::infinity());
    else
      fold(image, o, r);
  }
}

// max_pool_nhwc_row in f32 by fold_window_avx512, 64 channels at a time.
KILN_TARGET_AVX512 void max_pool_nhwc_row_avx512(const float* x, float* out, const Pool2dGeometry& g,
                                                 std::int64_t n, std::int64_t oh) {
  using Fold = void (*)(const float*, float*, const PoolWindow&, std::int64_t, std::int64_t, __mmask16);
  static constexpr Fold folds[] = {fold_window_avx512<1>, fold_window_avx512<2>, fold_window_avx512<3>,
                                   fold_window_avx512<4>};
  for_each_window(x, out, g, n, oh, [&](const float* image, float* o, const PoolWindow& r) {
    for (std::int64_t c0 = 0; c0 < g.c; c0 += 64) {
      const std::int64_t left = std::min<std::int64_t>(g.c - c0, 64), vectors = (left + 15) / 16;
      const __mmask16 last = left % 16 == 0 ? avx512::kAll : avx512::tail_lanes(left % 16);
      folds[vectors - 1](image + c0, o + c0, r, g.w, g.c, last);
    }
  });
}
#endif

#ifdef KILN_HAS_SIMD_CLONES
// max_nan16's fold in 8 lanes, for CPUs with AVX2 and no AVX-512.
KILN_TARGET_AVX2 inline __m256 max_nan8(__m256 a, __m256 b) {
  const __m256 m = _mm256_max_ps(b, a);
  return _mm256_blendv_ps(m, b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}

// fold_window_avx512 in AVX2: V full vectors of 8 channels.
template <int V>
KILN_TARGET_AVX2 void fold_window_avx2(const float* x, float* o, const PoolWindow& r, std::int64_t w,
                                       std::int64_t c) {
  __m256 acc[V];
  const float* first = x + (r.hs * w + r.ws) * c;
  for (int v = 0; v < V; ++v) acc[v] = _mm256_loadu_ps(first + 8 * v);
  for (std::int64_t ih = r.hs; ih < r.he; ++ih)
    for (std::int64_t iw = ih == r.hs ? r.ws + 1 : r.ws; iw < r.we; ++iw) {
      const float* xs = x + (ih * w + iw) * c;
      for (int v = 0; v < V; ++v) acc[v] = max_nan8(acc[v], _mm256_loadu_ps(xs + 8 * v));
    }
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(o + 8 * v, acc[v]);
}

// max_pool_nhwc_row in f32 on AVX2: 32 channels at a time by
// fold_window_avx2 (ShuffleNet's pool above at this level: 4.0 ms by GCC's
// form of the generic fold, 1.6 so, on an AMD EPYC), the last c % 8 one
// by one.
KILN_TARGET_AVX2 void max_pool_nhwc_row_avx2(const float* x, float* out, const Pool2dGeometry& g, std::int64_t n,
                                             std::int64_t oh) {
  using Fold = void (*)(const float*, float*, const PoolWindow&, std::int64_t, std::int64_t);
  static constexpr Fold folds[] = {fold_window_avx2<1>, fold_window_avx2<2>, fold_window_avx2<3>,
                                   fold_window_avx2<4>};
  for_each_window(x, out, g, n, oh, [&](const float* image, float* o, const PoolWindow& r) {
    for (std::int64_t c0 = 0; c0 + 8 <= g.c; c0 += 32)
      folds[std::min<std::int64_t>(4, (g.c - c0) / 8) - 1](image + c0, o + c0, r, g.w, g.c);
    for (std::int64_t c0 = g.c / 8 * 8; c0 < g.c; ++c0) fold_window<1>(image + c0, o + c0, r, g.w, g.c);
  });
}
#endif

// Output rows [r0, r1) (r = n · ho + oh) of an NHWC max pool, compiled for
// each SIMD level (simd_dispatch): the channel loop runs as wide as the CPU;
// f32 windows other than 2x2 by hand in AVX-512 and AVX2.
template <typename T>
struct MaxPoolNhwcRows {
  KILN_SIMD_INLINE static void run(const T* x, T* out, const Pool2dGeometry* g, std::int64_t r0,
                                   std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) max_pool_nhwc_row(x, out, *g, r / g->ho, r % g->ho);
  }
#ifdef KILN_HAS_SIMD_CLONES
  KILN_TARGET_AVX512 static void run_avx512(const float* x, float* out, const Pool2dGeometry* g, std::int64_t r0,
                                            std::int64_t r1)
    requires std::is_same_v<T, float>
  {
    if (is_2x2(*g)) return run(x, out, g, r0, r1);
    for (std::int64_t r = r0; r < r1; ++r) max_pool_nhwc_row_avx512(x, out, *g, r / g->ho, r % g->ho);
  }
  KILN_TARGET_AVX2 static void run_avx2(const float* x, float* out, const Pool2dGeometry* g, std::int64_t r0,
                                        std::int64_t r1)
    requires std::is_same_v<T, float>
  {
    if (is_2x2(*g)) return run(x, out, g, r0, r1);
    for (std::int64_t r = r0; r < r1; ++r) max_pool_nhwc_row_avx2(x, out, *g, r / g->ho, r % g->ho);
  }
#endif
};

// max_pool2d over NHWC x [n, h, w, c], output rows (n, oh) split across
// the kernel's threads.
template <typename T>
void max_pool_nhwc(const T* x, T* out, const Pool2dGeometry& g) {
  const std::int64_t row_bytes = g.wo * g.c * g.kh * g.kw * std::int64_t(sizeof(T));
  parallel_for(g.n * g.ho, items_per_range(row_bytes), [&](std::int64_t r0, std::int64_t r1) {
    simd_dispatch<MaxPoolNhwcRows<T>>(x, out, &g, r0, r1);
  });
}

template <typename T>
struct MaxPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const auto& a = ctx.attrs<MaxPool2dOp>();
    if (a.data_format == "NHWC") return run_nhwc(ctx, x, a);
    const Pool2dGeometry g = pool::geometry(ctx.op()->name(), x.dims(), a);
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.ho, g.wo}, x.dtype());
    if (out.numel() == 0) return;
    const std::int64_t planes = g.n * g.c;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const std::int64_t plane_bytes = g.h * g.w * std::int64_t(sizeof(T));
    parallel_for(planes, items_per_range(plane_bytes), [&](std::int64_t p0, std::int64_t p1) {
      pool_planes(px, po, g, p0, p1);
    });
  }

  // Planes [p0, p1) of an NCHW max pool.
  static void pool_planes(const T* px, T* po, const Pool2dGeometry& g, std::int64_t p0,
                          std::int64_t p1) {
    if (is_2x2(g)) {
      for (std::int64_t pl = p0; pl < p1; ++pl)
        for (std::int64_t oh = 0; oh < g.ho; ++oh) {
          const T* __restrict r0 = px + pl * g.h * g.w + 2 * oh * g.w;
          const T* __restrict r1 = r0 + g.w;
          T* __restrict o = po + (pl * g.ho + oh) * g.wo;
          for (std::int64_t ow = 0; ow < g.wo; ++ow) {
            const T a = max_nan(r0[2 * ow], r0[2 * ow + 1]);
            const T b = max_nan(r1[2 * ow], r1[2 * ow + 1]);
            o[ow] = max_nan(a, b);
          }
        }
      return;
    }
    // (Compiled for wider SIMD levels it measured no faster: a 3x3 stride-2
    // pool of [8, 64, 112, 112] is bound by reading x.)
    if constexpr (std::is_floating_point_v<T>) {
      const WindowColumns wc(g);
      for (std::int64_t pl = p0; pl < p1; ++pl) max_pool_plane(px + pl * g.h * g.w, po + pl * g.ho * g.wo, g, wc);
      return;
    }
    for (std::int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = px + pl * g.h * g.w;
      T* o = po + pl * g.ho * g.wo;
      for (std::int64_t oh = 0; oh < g.ho; ++oh)
        for (std::int64_t ow = 0; ow < g.wo; ++ow)
          o[oh * g.wo + ow] = xp[pool_argmax(xp, g, pool_window(g, oh, ow))];
    }
  }

  static void run_nhwc(KernelContext& ctx, const Tensor& x, const MaxPool2dOp::Attributes& a) {
    const Pool2dGeometry g = max_pool_geometry(ctx.op()->name(), x.dims(), a, true);
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.ho, g.wo, g.c}, x.dtype());
    if (out.numel() > 0) max_pool_nhwc(x.data<T>(), out.data<T>(), g);
  }
};

// One window offset folded over an output row's running maxima: best[ow] /
// at[ow] take src[ow + shift] (input index base + ow · step) where it
// replaces the maximum (replaces_max's rule as one bool). src is read with
// unit stride (a stride-2 row from its even or odd columns), every load goes
// into a local first and the flag is a bool, so both stores are plain
// selects and the loop vectorizes: a strided load, an `a[i] = c ? x : a[i]`
// or a T-valued flag beside the int32 select each left GCC 12 a branch per
// element.
template <typename T>
struct FoldWindowOffset {
  KILN_SIMD_INLINE static void run(const T* __restrict src, std::int64_t shift, T* __restrict best,
                                   std::int32_t* __restrict at, std::int32_t base, std::int32_t step,
                                   std::int64_t lo, std::int64_t hi) {
    for (std::int64_t ow = lo; ow < hi; ++ow) {
      const T v = src[ow + shift], m = best[ow];
      const std::int32_t a = at[ow], k = base + static_cast<std::int32_t>(ow) * step;
      const bool take = !(v <= m) & (m == m);
      best[ow] = take ? v : m;
      at[ow] = take ? k : a;
    }
  }
};

// The same for any stride, reading x[base + ow · step] (strides above 2).
template <typename T>
void fold_strided_window_offset(const T* __restrict xp, T* __restrict best, std::int32_t* __restrict at,
                                std::int32_t base, std::int32_t step, std::int64_t lo, std::int64_t hi) {
  for (std::int64_t ow = lo; ow < hi; ++ow) {
    const std::int32_t k = base + static_cast<std::int32_t>(ow) * step;
    const T v = xp[k];
    const T f = replaces_max(best[ow], v);
    best[ow] = f != T(0) ? v : best[ow];
    at[ow] = f != T(0) ? k : at[ow];
  }
}

// One plane's max-pool gradient, an output row at a time: each window's
// first maximum (pool_argmax's: row-major, NaN wins) found by folding the
// window's offsets over the whole row from -inf (branch-free, so the loop
// vectorizes; a window of -inf only takes pool_argmax itself), then dout
// added at it in (oh, ow) order. Writes all of dp.
template <typename T>
void max_pool_grad_plane(const T* __restrict xp, const T* __restrict d, T* __restrict dp,
                         const Pool2dGeometry& g) {
  std::fill(dp, dp + g.h * g.w, T(0));
  if (g.h * g.w > std::numeric_limits<std::int32_t>::max()) {  // indices past int32
    for (std::int64_t oh = 0; oh < g.ho; ++oh)
      for (std::int64_t ow = 0; ow < g.wo; ++ow)
        dp[pool_argmax(xp, g, pool_window(g, oh, ow))] += d[oh * g.wo + ow];
    return;
  }
  const std::int64_t half = (g.w + 1) / 2;
  T* __restrict best = scratch<T>(g.wo + 2 * half);
  T* __restrict even = best + g.wo;  // a stride-2 row's even and odd columns
  T* __restrict odd = even + half;
  std::int32_t* __restrict at = scratch<std::int32_t>(g.wo);
  for (std::int64_t oh = 0; oh < g.ho; ++oh) {
    std::fill(best, best + g.wo, -std::numeric_limits<T>::infinity());
    std::fill(at, at + g.wo, std::int32_t{-1});
    for (std::int64_t i = 0; i < g.kh; ++i) {
      const std::int64_t ih = oh * g.sh - g.pt + i;
      if (ih < 0 || ih >= g.h) continue;
      const T* row = xp + ih * g.w;
      if (g.sw == 2)
        for (std::int64_t c = 0; c < g.w; ++c) (c % 2 ? odd : even)[c / 2] = row[c];
      for (std::int64_t j = 0; j < g.kw; ++j) {
        std::int64_t lo, hi;
        const std::int64_t off = j - g.pl;
        valid_columns(off, g.sw, g.w, g.wo, lo, hi);
        const auto base = static_cast<std::int32_t>(ih * g.w + off);
        const auto step = static_cast<std::int32_t>(g.sw);
        if (g.sw <= 2)
          simd_dispatch<FoldWindowOffset<T>>(g.sw == 1 ? row : off % 2 ? odd : even, g.sw == 1 ? off : off >> 1,
                                             best, at, base, step, lo, hi);
        else
          fold_strided_window_offset(xp, best, at, base, step, lo, hi);
      }
    }
    for (std::int64_t ow = 0; ow < g.wo; ++ow) {
      const std::int64_t k = at[ow] >= 0 ? at[ow] : pool_argmax(xp, g, pool_window(g, oh, ow));
      dp[k] += d[oh * g.wo + ow];
    }
  }
}

// One window position (input pixel xs, index idx) folded over an output
// pixel's running maxima per channel: best / at take it where it replaces
// the maximum (pool_argmax's rule), as plain selects across the channels.
template <typename T>
KILN_SIMD_INLINE void fold_nhwc_pixel(const T* __restrict xs, T* __restrict best, std::int64_t* __restrict at,
                                      std::int64_t idx, std::int64_t c) {
  for (std::int64_t k = 0; k < c; ++k) {
    const T v = xs[k], m = best[k];
    const std::int64_t a = at[k];
    const bool take = !(v <= m) & (m == m);
    best[k] = take ? v : m;
    at[k] = take ? idx : a;
  }
}

// One 2x2 window's gradient: gr at its first maximum (row-major, NaN wins:
// pool_argmax's rule), 0 at its other three places. The window is a b / c
// e; its gradient goes to ga gb / gc ge. 0 / 1 flags as T and one-level
// selects only: GCC 12 if-converts those (not bool & / | or nested ?:),
// so the loops calling it vectorize.
template <typename T>
KILN_SIMD_INLINE void window_2x2_grad(T a, T b, T c, T e, T gr, T& ga, T& gb, T& gc, T& ge) {
  const T fb = replaces_max(a, b);
  const T mab = fb != T(0) ? b : a;
  const T fc = replaces_max(mab, c);
  const T mabc = fc != T(0) ? c : mab;
  const T fe = replaces_max(mabc, e);
  const T kc = fc * (T(1) - fe), kb = fb * (T(1) - fc) * (T(1) - fe);
  const T ka = (T(1) - fb) * (T(1) - fc) * (T(1) - fe);
  ge = fe != T(0) ? gr : T(0);
  gc = kc != T(0) ? gr : T(0);
  gb = kb != T(0) ? gr : T(0);
  ga = ka != T(0) ? gr : T(0);
}

#ifdef KILN_HAS_SIMD_CLONES
// replaces_max over 16 lanes: q replaces m where !(q <= m) and m is not NaN.
KILN_TARGET_AVX512 inline __mmask16 replaces_max16(__m512 m, __m512 q) {
  return _mm512_cmp_ps_mask(q, m, _CMP_NLE_UQ) & _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q);
}

// An f32 2x2 stride-2 NHWC pool's image of window_2x2_grad, 16 channels a
// vector and the last one masked: a few channels (LeNet's 6) run as one
// vector, where the compiler's loop would run them one at a time with its
// selects compiled to branches (0.9 ms for LeNet's 64x28x28x6 on ReLU
// outputs, whose ties the branches mispredict; 0.2 so).
KILN_TARGET_AVX512 void windows_2x2_avx512(const float* x, const float* d, float* dx, const Pool2dGeometry& g) {
  const std::int64_t row = g.w * g.c, c = g.c;
  for (std::int64_t oh = 0; oh < g.ho; ++oh)
    for (std::int64_t ow = 0; ow < g.wo; ++ow) {
      const std::int64_t at = 2 * oh * row + 2 * ow * c;
      const float* gr = d + (oh * g.wo + ow) * c;
      for (std::int64_t k = 0; k < c; k += 16) {
        const __mmask16 lanes = c - k >= 16 ? avx512::kAll : avx512::tail_lanes(c - k);
        const std::int64_t p[4] = {at + k, at + c + k, at + row + k, at + row + c + k};  // a b / e f
        const __m512 a = _mm512_maskz_loadu_ps(lanes, x + p[0]), b = _mm512_maskz_loadu_ps(lanes, x + p[1]);
        const __m512 e = _mm512_maskz_loadu_ps(lanes, x + p[2]), f = _mm512_maskz_loadu_ps(lanes, x + p[3]);
        const __mmask16 fb = replaces_max16(a, b);
        const __m512 mab = _mm512_mask_blend_ps(fb, a, b);
        const __mmask16 fe = replaces_max16(mab, e);
        const __mmask16 ff = replaces_max16(_mm512_mask_blend_ps(fe, mab, e), f);
        const __mmask16 won[4] = {__mmask16(~(fb | fe | ff)), __mmask16(fb & ~fe & ~ff), __mmask16(fe & ~ff), ff};
        const __m512 grad = _mm512_maskz_loadu_ps(lanes, gr + k);
        for (int i = 0; i < 4; ++i) _mm512_mask_storeu_ps(dx + p[i], lanes, _mm512_maskz_mov_ps(won[i], grad));
      }
    }
}
#endif

// Images [n0, n1) of an NHWC max-pool gradient: per output pixel, each
// channel's first maximum in its window (row-major, NaN wins: pool_argmax's,
// starting from the window's first element), then dout added there in (oh,
// ow) order, the NCHW kernel's sums; a 2x2 stride-2 pool (windows apart)
// by window_2x2_grad, as the NCHW kernel's own loop. Writes all of dx's
// images.
template <typename T>
struct MaxPoolGradNhwcImages {
  KILN_SIMD_INLINE static void run(const T* px, const T* pd, T* pdx, const Pool2dGeometry* pg, T* best,
                                   std::int64_t* at, std::int64_t n0, std::int64_t n1) {
    const Pool2dGeometry& g = *pg;
    for (std::int64_t n = n0; n < n1; ++n) {
      const T* x = px + n * g.h * g.w * g.c;
      T* dx = pdx + n * g.h * g.w * g.c;
      if (!is_2x2(g) || 2 * g.ho != g.h || 2 * g.wo != g.w)  // else the windows cover dx
        std::fill(dx, dx + g.h * g.w * g.c, T(0));
      if (is_2x2(g)) {
        windows_2x2(x, pd + n * g.ho * g.wo * g.c, dx, g);
        continue;
      }
      for (std::int64_t oh = 0; oh < g.ho; ++oh)
        for (std::int64_t ow = 0; ow < g.wo; ++ow) {
          const PoolWindow r = pool_window(g, oh, ow);
          const std::int64_t first = r.hs * g.w + r.ws;
          std::copy(x + first * g.c, x + (first + 1) * g.c, best);
          std::fill(at, at + g.c, first);
          for (std::int64_t ih = r.hs; ih < r.he; ++ih)
            for (std::int64_t iw = r.ws; iw < r.we; ++iw)
              fold_nhwc_pixel(x + (ih * g.w + iw) * g.c, best, at, ih * g.w + iw, g.c);
          const T* d = pd + ((n * g.ho + oh) * g.wo + ow) * g.c;
          for (std::int64_t k = 0; k < g.c; ++k) dx[at[k] * g.c + k] += d[k];
        }
    }
  }

  // A 2x2 stride-2 pool's image (windows apart, LeNet's): each output
  // pixel's windows across its channels.
  KILN_SIMD_INLINE static void windows_2x2(const T* x, const T* d, T* dx, const Pool2dGeometry& g) {
#ifdef KILN_HAS_SIMD_CLONES
    if constexpr (std::is_same_v<T, float>)
      if (cpu_simd_level() == SimdLevel::Avx512) return windows_2x2_avx512(x, d, dx, g);
#endif
    const std::int64_t row = g.w * g.c, c = g.c;
    for (std::int64_t oh = 0; oh < g.ho; ++oh)
      for (std::int64_t ow = 0; ow < g.wo; ++ow) {
        const std::int64_t at = 2 * oh * row + 2 * ow * c;
        pixel_windows_2x2(x + at, x + at + c, x + at + row, x + at + row + c, d + (oh * g.wo + ow) * c, dx + at,
                          dx + at + c, dx + at + row, dx + at + row + c, c);
      }
  }

  // window_2x2_grad for c channels: the windows' places a b / e f, their
  // gradients' ga gb / ge gf.
  KILN_SIMD_INLINE static void pixel_windows_2x2(const T* __restrict a, const T* __restrict b,
                                                 const T* __restrict e, const T* __restrict f,
                                                 const T* __restrict gr, T* __restrict ga, T* __restrict gb,
                                                 T* __restrict ge, T* __restrict gf, std::int64_t c) {
    for (std::int64_t k = 0; k < c; ++k) window_2x2_grad(a[k], b[k], e[k], f[k], gr[k], ga[k], gb[k], ge[k], gf[k]);
  }
};

// max_pool2d_grad over NHWC x [N, H, W, C] and dout [N, Ho, Wo, C], the
// images split across the threads (each dx element written by one).
// kiln::Error naming the op unless x has rank 4 and dout the forward's shape.
template <typename T>
void max_pool_grad_nhwc(KernelContext& ctx, const Tensor& x, const Tensor& dout) {
  const std::string_view op = ctx.op()->name();
  const Pool2dGeometry g = max_pool_geometry(op, x.dims(), ctx.attrs<GradOf<MaxPool2dOp>>(), true);
  conv::check_dout(op, dout.dims(), Dims{g.n, g.ho, g.wo, g.c});
  Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
  if (dx.numel() == 0) return;
  const T* px = x.data<T>();
  const T* pd = dout.data<T>();
  T* pdx = dx.data<T>();
  const std::int64_t image_bytes = 2 * g.h * g.w * g.c * std::int64_t(sizeof(T));
  parallel_for(g.n, items_per_range(image_bytes), [&](std::int64_t n0, std::int64_t n1) {
    T* best = scratch<T>(g.c);
    std::int64_t* at = scratch<std::int64_t>(g.c);
    simd_dispatch<MaxPoolGradNhwcImages<T>>(px, pd, pdx, &g, best, at, n0, n1);
  });
}

template <typename T>
struct MaxPoolGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), dout = typed_input<T>(ctx, 1);
    if (ctx.attrs<GradOf<MaxPool2dOp>>().data_format == "NHWC") return max_pool_grad_nhwc<T>(ctx, x, dout);
    const Pool2dGeometry g =
        pool::geometry(ctx.op()->name(), x.dims(), ctx.attrs<GradOf<MaxPool2dOp>>());
    pool::check_dout(ctx.op()->name(), dout.dims(), g);
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    if (dx.numel() == 0) return;
    T* pdx = dx.data<T>();
    const T* px = x.data<T>();
    const T* pd = dout.data<T>();
    const std::int64_t plane_bytes = 2 * g.h * g.w * std::int64_t(sizeof(T));
    parallel_for(g.n * g.c, items_per_range(plane_bytes), [&](std::int64_t p0, std::int64_t p1) {
      grad_planes(px, pd, pdx, g, p0, p1);
    });
  }

  // Planes [p0, p1) of an NCHW max-pool gradient; writes all of their dx.
  static void grad_planes(const T* px, const T* pd, T* pdx, const Pool2dGeometry& g, std::int64_t p0,
                          std::int64_t p1) {
    for (std::int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = px + pl * g.h * g.w;
      const T* d = pd + pl * g.ho * g.wo;
      T* dp = pdx + pl * g.h * g.w;
      if (is_2x2(g))
        grad_plane_2x2(xp, d, dp, g);
      else
        max_pool_grad_plane(xp, d, dp, g);
    }
  }

  // A 2x2 stride-2 pool's plane: windows do not overlap, so each gets its
  // gradient at its first maximum (NaN wins, as argmax) and 0 at its other
  // three places, branch-free.
  static void grad_plane_2x2(const T* px, const T* pd, T* pdx, const Pool2dGeometry& g) {
    std::fill(pdx, pdx + g.h * g.w, T(0));
    for (std::int64_t oh = 0; oh < g.ho; ++oh) {
      const T* __restrict x0 = px + 2 * oh * g.w;
      const T* __restrict x1 = x0 + g.w;
      T* __restrict d0 = pdx + 2 * oh * g.w;
      T* __restrict d1 = d0 + g.w;
      const T* __restrict d = pd + oh * g.wo;
      for (std::int64_t ow = 0; ow < g.wo; ++ow)
        window_2x2_grad(x0[2 * ow], x0[2 * ow + 1], x1[2 * ow], x1[2 * ow + 1], d[ow], d0[2 * ow], d0[2 * ow + 1],
                        d1[2 * ow], d1[2 * ow + 1]);
    }
  }
};

// The bf16 and f16 max pools and gradients: each NCHW plane, NHWC run of
// output rows or NHWC image widened into the thread's f32 buffer, the f32
// loops above run on it, and the result rounded once: the f32 kernel's
// values on the widened tensors (a maximum rounds to itself), without an f32
// copy of either tensor.
template <DataType D>
struct HalfMaxPoolK {
  using Half = std::uint16_t;

  static void run(KernelContext& ctx) {
    const Tensor x = input_of(ctx, 0, D);  // a copy: alive past alloc_output
    const auto& a = ctx.attrs<MaxPool2dOp>();
    const bool nhwc = a.data_format == "NHWC";
    const Pool2dGeometry g = max_pool_geometry(ctx.op()->name(), x.dims(), a, nhwc);
    Tensor& out = ctx.alloc_output(0, nhwc ? Dims{g.n, g.ho, g.wo, g.c} : Dims{g.n, g.c, g.ho, g.wo}, D);
    if (out.numel() == 0) return;
    const auto* px = static_cast<const Half*>(x.raw_data());
    auto* po = static_cast<Half*>(out.raw_data());
    if (nhwc) {
      parallel_for(g.n * g.ho, items_per_range(g.wo * g.c * g.kh * g.kw * 2),
                   [&](std::int64_t r0, std::int64_t r1) { nhwc_rows(px, po, g, r0, r1); });
      return;
    }
    const std::int64_t plane = g.h * g.w, pooled = g.ho * g.wo;
    parallel_for(g.n * g.c, items_per_range(plane * 2), [&](std::int64_t p0, std::int64_t p1) {
      float* buf = scratch<float, 1>(plane + pooled);
      for (std::int64_t pl = p0; pl < p1; ++pl) {
        widen_half_row<D>(px + pl * plane, buf, plane);
        MaxPoolK<float>::pool_planes(buf, buf + plane, g, 0, 1);
        round_half_row<D>(buf + plane, po + pl * pooled, pooled);
      }
    });
  }

  // NHWC output rows [r0, r1) (r = n · ho + oh), up to kRows of one image at
  // a time: the input rows they read widened, pooled as an image of those
  // rows alone (its top padding shifted so each window reads what it read).
  static void nhwc_rows(const Half* x, Half* out, const Pool2dGeometry& g, std::int64_t r0, std::int64_t r1) {
    constexpr std::int64_t kRows = 8;
    const std::int64_t row = g.w * g.c, pooled_row = g.wo * g.c;
    float* buf = scratch<float, 1>(((kRows - 1) * g.sh + g.kh) * row + kRows * pooled_row);
    for (std::int64_t r = r0; r < r1;) {
      const std::int64_t n = r / g.ho, oh0 = r % g.ho, oh1 = std::min({g.ho, oh0 + kRows, oh0 + r1 - r});
      const std::int64_t lo = std::max<std::int64_t>(0, oh0 * g.sh - g.pt);
      const std::int64_t hi = std::clamp<std::int64_t>((oh1 - 1) * g.sh - g.pt + g.kh, lo, g.h);
      Pool2dGeometry part = g;
      part.n = 1, part.h = hi - lo, part.ho = oh1 - oh0, part.pt = g.pt + lo - oh0 * g.sh;
      float* pooled = buf + (hi - lo) * row;
      widen_half_row<D>(x + (n * g.h + lo) * row, buf, (hi - lo) * row);
      simd_dispatch<MaxPoolNhwcRows<float>>(buf, pooled, &part, std::int64_t{0}, part.ho);
      round_half_row<D>(pooled, out + r * pooled_row, part.ho * pooled_row);
      r += oh1 - oh0;
    }
  }
};

template <DataType D>
struct HalfMaxPoolGradK {
  using Half = std::uint16_t;

  static void run(KernelContext& ctx) {
    const Tensor x = input_of(ctx, 0, D), dout = input_of(ctx, 1, D);  // copies: alive past alloc_output
    const std::string_view op = ctx.op()->name();
    const auto& a = ctx.attrs<GradOf<MaxPool2dOp>>();
    const bool nhwc = a.data_format == "NHWC";
    const Pool2dGeometry g = max_pool_geometry(op, x.dims(), a, nhwc);
    if (nhwc)
      conv::check_dout(op, dout.dims(), Dims{g.n, g.ho, g.wo, g.c});
    else
      pool::check_dout(op, dout.dims(), g);
    Tensor& dx = ctx.alloc_output(0, x.dims(), D);
    if (dx.numel() == 0) return;
    const auto* px = static_cast<const Half*>(x.raw_data());
    const auto* pd = static_cast<const Half*>(dout.raw_data());
    auto* pdx = static_cast<Half*>(dx.raw_data());
    // An NHWC image or an NCHW plane at a time (the f32 kernels' units).
    const std::int64_t unit = nhwc ? g.h * g.w * g.c : g.h * g.w, pooled = nhwc ? g.ho * g.wo * g.c : g.ho * g.wo;
    parallel_for(nhwc ? g.n : g.n * g.c, items_per_range(unit * 4), [&](std::int64_t u0, std::int64_t u1) {
      float* xs = scratch<float, 1>(2 * unit + pooled);
      float *ds = xs + unit, *dxs = ds + pooled;
      float* best = nhwc ? scratch<float>(g.c) : nullptr;
      std::int64_t* at = nhwc ? scratch<std::int64_t>(g.c) : nullptr;
      for (std::int64_t u = u0; u < u1; ++u) {
        widen_half_row<D>(px + u * unit, xs, unit);
        widen_half_row<D>(pd + u * pooled, ds, pooled);
        if (nhwc)
          simd_dispatch<MaxPoolGradNhwcImages<float>>(xs, ds, dxs, &g, best, at, std::int64_t{0}, std::int64_t{1});
        else
          MaxPoolGradK<float>::grad_planes(xs, ds, dxs, g, 0, 1);
        round_half_row<D>(dxs, pdx + u * unit, unit);
      }
    });
  }
};

template <DataType D>
void register_half_max_pools() {
  KernelRegistrar<MaxPool2dOp>(PlaceKind::Cpu, D, &HalfMaxPoolK<D>::run, MaxPool2dOp::name);
  KernelRegistrar<GradOf<MaxPool2dOp>>(PlaceKind::Cpu, D, &HalfMaxPoolGradK<D>::run, GradOf<MaxPool2dOp>::name);
}

[[maybe_unused]] const bool half_max_pools_registered = [] {
  register_half_max_pools<DataType::BFloat16>();
  register_half_max_pools<DataType::Float16>();
  return true;
}();

// avg_pool_extent along W for every output column, as T: a divisor is
// T(rows) · cols[ow], which is T(rows · cols) (both factors exact, the
// product rounded once), so a row divides in one vector loop.
template <typename T>
std::vector<T> avg_pool_column_extents(const Pool2dGeometry& g, bool exclusive) {
  std::vector<T> cols(static_cast<std::size_t>(g.wo));
  for (std::int64_t ow = 0; ow < g.wo; ++ow)
    cols[ow] = T(avg_pool_extent(ow, g.kw, g.sw, g.pl, g.pr, g.w, exclusive));
  return cols;
}

// One plane's average pool, a row at a time: fold_pool_row's sums (the
// bits of a loop over each window), each divided by avg_pool_count's
// divisor, its row extent times its column's.
template <typename T>
KILN_SIMD_INLINE void avg_pool_plane(const T* __restrict xp, T* __restrict o, const Pool2dGeometry& g,
                                     const WindowColumns& wc, const T* __restrict cols, bool exclusive) {
  for (std::int64_t oh = 0; oh < g.ho; ++oh) {
    T* __restrict row = o + oh * g.wo;
    std::fill(row, row + g.wo, T(0));
    fold_pool_row(xp, row, g, wc, oh, [](T s, T v) { return s + v; });
    const T rows = T(avg_pool_extent(oh, g.kh, g.sh, g.pt, g.pb, g.h, exclusive));
    for (std::int64_t ow = 0; ow < g.wo; ++ow) {
      const T cnt = rows * cols[ow];
      row[ow] = cnt > T(0) ? row[ow] / cnt : T(0);
    }
  }
}

// One plane's average-pool gradient, a whole dout row at a time: the row's
// shares (dout / divisor) added into each shifted input row the window
// offsets (i, j) read. j runs backwards so that every dx element takes its
// shares in the order of the outputs (oh, ow) it feeds, as a loop over the
// outputs' windows would: the same bits.
template <typename T>
KILN_SIMD_INLINE void avg_pool_grad_plane(const T* __restrict d, T* __restrict dp, T* __restrict share,
                                          const Pool2dGeometry& g, const WindowColumns& wc,
                                          const T* __restrict cols, bool exclusive) {
  std::fill(dp, dp + g.h * g.w, T(0));
  for (std::int64_t oh = 0; oh < g.ho; ++oh) {
    const T rows = T(avg_pool_extent(oh, g.kh, g.sh, g.pt, g.pb, g.h, exclusive));
    for (std::int64_t ow = 0; ow < g.wo; ++ow) {
      const T cnt = rows * cols[ow];
      share[ow] = cnt > T(0) ? d[oh * g.wo + ow] / cnt : T(0);
    }
    for (std::int64_t i = 0; i < g.kh; ++i) {
      const std::int64_t ih = oh * g.sh - g.pt + i;
      if (ih < 0 || ih >= g.h) continue;
      T* __restrict xr = dp + ih * g.w;
      for (std::int64_t j = g.kw - 1; j >= 0; --j) {
        const std::int64_t lo = wc.lo[j], hi = wc.hi[j];
        T* __restrict xs = xr + (j - g.pl);
        for (std::int64_t ow = lo; ow < hi; ++ow) xs[ow * g.sw] += share[ow];
      }
    }
  }
}

// Planes [p0, p1) of an NCHW average pool and of its gradient (share: a
// row of wo), compiled for each SIMD level (simd_dispatch).
template <typename T>
struct AvgPoolPlanes {
  KILN_SIMD_INLINE static void run(const T* px, T* po, const Pool2dGeometry* g, const WindowColumns* wc,
                                   const T* cols, bool exclusive, std::int64_t p0, std::int64_t p1) {
    for (std::int64_t pl = p0; pl < p1; ++pl)
      avg_pool_plane(px + pl * g->h * g->w, po + pl * g->ho * g->wo, *g, *wc, cols, exclusive);
  }
};
template <typename T>
struct AvgPoolGradPlanes {
  KILN_SIMD_INLINE static void run(const T* pd, T* pdx, T* share, const Pool2dGeometry* g, const WindowColumns* wc,
                                   const T* cols, bool exclusive, std::int64_t p0, std::int64_t p1) {
    for (std::int64_t pl = p0; pl < p1; ++pl)
      avg_pool_grad_plane(pd + pl * g->ho * g->wo, pdx + pl * g->h * g->w, share, *g, *wc, cols, exclusive);
  }
};

template <typename T>
struct AvgPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const auto& a = ctx.attrs<AvgPool2dOp>();
    const Pool2dGeometry g = pool::geometry(ctx.op()->name(), x.dims(), a);
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.ho, g.wo}, x.dtype());
    if (out.numel() == 0) return;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const std::vector<T> cols = avg_pool_column_extents<T>(g, a.exclusive);
    const WindowColumns wc(g);
    const std::int64_t plane_bytes = g.h * g.w * std::int64_t(sizeof(T));
    parallel_for(g.n * g.c, items_per_range(plane_bytes), [&](std::int64_t p0, std::int64_t p1) {
      simd_dispatch<AvgPoolPlanes<T>>(px, po, &g, &wc, cols.data(), bool(a.exclusive), p0, p1);
    });
  }
};

template <typename T>
struct AvgPoolGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), dout = typed_input<T>(ctx, 1);
    const auto& a = ctx.attrs<GradOf<AvgPool2dOp>>();
    const Pool2dGeometry g = pool::geometry(ctx.op()->name(), x.dims(), a);
    pool::check_dout(ctx.op()->name(), dout.dims(), g);
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    if (dx.numel() == 0) return;
    T* pdx = dx.data<T>();
    const T* pd = dout.data<T>();
    const std::vector<T> cols = avg_pool_column_extents<T>(g, a.exclusive);
    const WindowColumns wc(g);
    const std::int64_t plane_bytes = g.h * g.w * std::int64_t(sizeof(T));
    parallel_for(g.n * g.c, items_per_range(plane_bytes), [&](std::int64_t p0, std::int64_t p1) {
      std::vector<T> share(static_cast<std::size_t>(g.wo));
      simd_dispatch<AvgPoolGradPlanes<T>>(pd, pdx, share.data(), &g, &wc, cols.data(), bool(a.exclusive), p0, p1);
    });
  }
};

template <typename T>
struct AdaptiveAvgPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const auto& a = ctx.attrs<AdaptiveAvgPool2dOp>();
    const Pool2dGeometry g = pool::adaptive_geometry(ctx.op()->name(), x.dims(), a.output_size);
    const std::int64_t n = g.n, c = g.c, h = g.h, w = g.w, ho = g.ho, wo = g.wo;
    Tensor& out = ctx.alloc_output(0, Dims{n, c, ho, wo}, x.dtype());
    if (out.numel() == 0) return;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (std::int64_t pl = 0; pl < n * c; ++pl) {
      const T* xp = px + pl * h * w;
      T* o = po + pl * ho * wo;
      for (std::int64_t oh = 0; oh < ho; ++oh) {
        const std::int64_t hs = adaptive_start(oh, h, ho), he = adaptive_end(oh, h, ho);
        for (std::int64_t ow = 0; ow < wo; ++ow) {
          const std::int64_t ws = adaptive_start(ow, w, wo), we = adaptive_end(ow, w, wo);
          T s = 0;
          for (std::int64_t ih = hs; ih < he; ++ih)
            for (std::int64_t iw = ws; iw < we; ++iw) s += xp[ih * w + iw];
          const std::int64_t cnt = (he - hs) * (we - ws);
          o[oh * wo + ow] = cnt > 0 ? s / T(cnt) : T(0);
        }
      }
    }
  }
};

template <typename T>
struct AdaptiveAvgPoolGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), dout = typed_input<T>(ctx, 1);
    const auto& a = ctx.attrs<GradOf<AdaptiveAvgPool2dOp>>();
    const Pool2dGeometry g = pool::adaptive_geometry(ctx.op()->name(), x.dims(), a.output_size);
    const std::int64_t n = g.n, c = g.c, h = g.h, w = g.w, ho = g.ho, wo = g.wo;
    pool::check_dout(ctx.op()->name(), dout.dims(), g);
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    if (dx.numel() == 0) return;
    T* pdx = dx.data<T>();
    std::memset(pdx, 0, dx.bytes());
    const T* pd = dout.data<T>();
    for (std::int64_t pl = 0; pl < n * c; ++pl) {
      T* dp = pdx + pl * h * w;
      const T* d = pd + pl * ho * wo;
      for (std::int64_t oh = 0; oh < ho; ++oh) {
        const std::int64_t hs = adaptive_start(oh, h, ho), he = adaptive_end(oh, h, ho);
        for (std::int64_t ow = 0; ow < wo; ++ow) {
          const std::int64_t ws = adaptive_start(ow, w, wo), we = adaptive_end(ow, w, wo);
          const std::int64_t cnt = (he - hs) * (we - ws);
          if (cnt == 0) continue;
          const T v = d[oh * wo + ow] / T(cnt);
          for (std::int64_t ih = hs; ih < he; ++ih)
            for (std::int64_t iw = ws; iw < we; ++iw) dp[ih * w + iw] += v;
        }
      }
    }
  }
};

}  // namespace

KILN_REGISTER_KERNELS(MaxPool2dOp, Cpu, MaxPoolK, float, double, std::int8_t, std::int16_t,
                      std::int32_t, std::int64_t, std::uint8_t, std::uint16_t, std::uint32_t,
                      std::uint64_t);
KILN_REGISTER_KERNELS(GradOf<MaxPool2dOp>, Cpu, MaxPoolGradK, float, double);
KILN_REGISTER_KERNELS(AvgPool2dOp, Cpu, AvgPoolK, float, double);
KILN_REGISTER_KERNELS(GradOf<AvgPool2dOp>, Cpu, AvgPoolGradK, float, double);
KILN_REGISTER_KERNELS(AdaptiveAvgPool2dOp, Cpu, AdaptiveAvgPoolK, float, double);
KILN_REGISTER_KERNELS(GradOf<AdaptiveAvgPool2dOp>, Cpu, AdaptiveAvgPoolGradK, float, double);

}  // namespace kiln::cpu
