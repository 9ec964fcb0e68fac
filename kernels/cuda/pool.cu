// Device halves of the CUDA max_pool2d / avg_pool2d / adaptive_avg_pool2d
// and their gradients (NCHW), from the CPU's window functions
// (kiln/dialect/pool_window.h). Forward: one thread per output element.
// max_pool2d's and avg_pool2d's gradients: a block per tile of dx (a few
// planes' rows and columns) finds, once, each covering window's first
// maximum (max) or dout / divisor (avg) into shared memory, then each
// thread gathers its dx elements' windows from there in the CPU's (oh, ow)
// order — no atomics, so the gradients are the CPU's bit for bit. A tile
// whose windows overflow shared memory, and adaptive_avg_pool2d's
// gradient, gather per dx element from global memory. Index math is 32-bit
// where the planes allow (fits_int32), else 64-bit. bf16 / f16 elements
// are widened to f32 where read and rounded once where written, the bits
// half_via_f32 gives through the f32 kernels, without its f32 copies of x,
// dout and the result (about a fifth of the bytes it moves).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "grid_stride.cuh"
#include "launch.h"
#include "widen.cuh"

namespace kiln::cuda {
namespace {

// A plane's extents, window, strides and leading paddings, as I.
template <typename I>
struct Plane {
  I h, w, ho, wo, kh, kw, sh, sw, pt, pl;
};

template <typename I>
Plane<I> plane_of(const Pool2dGeometry& g) {
  return {I(g.h), I(g.w), I(g.ho), I(g.wo), I(g.kh), I(g.kw), I(g.sh), I(g.sw), I(g.pt), I(g.pl)};
}

// Whether int32 holds the index math over g's planes and a grid-stride loop
// over `count` items: each extent, window, stride and padding at most 2^27
// (their sums, window origins included, stay under 2^30) and the plane
// sizes and count at most 2^30 (a loop index plus a grid's threads, under
// 2^29, stays under 2^31).
bool fits_int32(const Pool2dGeometry& g, std::int64_t count) {
  constexpr std::int64_t term = std::int64_t{1} << 27, total = std::int64_t{1} << 30;
  for (std::int64_t v : {g.h, g.w, g.ho, g.wo, g.kh, g.kw, g.sh, g.sw, g.pt, g.pb, g.pl, g.pr})
    if (v > term) return false;
  return g.h * g.w <= total && g.ho * g.wo <= total && count <= total;
}

// The square window side the kernels unroll (2 or 3), else 0.
int unrolled_side(const Pool2dGeometry& g) {
  return g.kh == g.kw && (g.kh == 2 || g.kh == 3) ? static_cast<int>(g.kh) : 0;
}

// f(index in the plane) for each input element of window (oh, ow), clipped
// to the plane, in row-major order: pool_window's elements. K > 0: the
// window is K x K, its loops unrolled. G: a Plane, or the Pool2dGeometry.
template <int K, typename G, typename F>
__device__ __forceinline__ void each_in_window(const G& g, PoolIndex<G> oh, PoolIndex<G> ow, F f) {
  using I = PoolIndex<G>;
  const I h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
  if constexpr (K > 0) {
#pragma unroll
    for (int i = 0; i < K; ++i)
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const I ih = h0 + i, iw = w0 + j;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) f(ih * g.w + iw);
      }
  } else {
    const BasicPoolWindow<I> r = pool_window(g, oh, ow);
    for (I ih = r.hs; ih < r.he; ++ih)
      for (I iw = r.ws; iw < r.we; ++iw) f(ih * g.w + iw);
  }
}

// pool_argmax of window (oh, ow) of plane xp, m its value: the same fold
// from the window's first element over the unrolled K x K loop (K > 0) or
// over 16-bit elements widened (their own comparisons are not needed).
template <int K, typename G, typename S>
__device__ __forceinline__ PoolIndex<G> window_argmax(const S* __restrict__ xp, const G& g, PoolIndex<G> oh,
                                                      PoolIndex<G> ow, Widened<S>& m) {
  using I = PoolIndex<G>;
  const BasicPoolWindow<I> r = pool_window(g, oh, ow);
  if constexpr (K == 0 && std::is_same_v<S, Widened<S>>) {
    const I best = pool_argmax(xp, g, r);
    m = xp[best];
    return best;
  } else {
    I best = r.hs * g.w + r.ws;
    m = widened(xp[best]);
    each_in_window<K>(g, oh, ow, [&](I k) {
      const Widened<S> v = widened(xp[k]);
      if (pool_max_replaces(v, m)) {
        m = v;
        best = k;
      }
    });
    return best;
  }
}

// One thread per output element (i over n = N·C·Ho·Wo): its window's
// maximum, or its sum in row-major order over avg_pool_count.
template <int K, bool is_max, typename I, typename S>
__global__ void pool_forward(const S* __restrict__ x, S* __restrict__ out, Plane<I> g, Pool2dGeometry full,
                             bool exclusive, I n) {
  using T = Widened<S>;
  const I pooled = g.ho * g.wo, stride = I(blockDim.x) * I(gridDim.x);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < n; i += stride) {
    const I plane = i / pooled, at = i - plane * pooled, oh = at / g.wo, ow = at - oh * g.wo;
    const S* xp = x + static_cast<std::int64_t>(plane) * (g.h * g.w);
    if constexpr (is_max) {
      T m;
      window_argmax<K>(xp, g, oh, ow, m);
      out[i] = narrowed<S>(m);
    } else {
      T s = 0;
      each_in_window<K>(g, oh, ow, [&](I k) { s += widened(xp[k]); });
      const std::int64_t cnt = avg_pool_count(full, oh, ow, exclusive);
      out[i] = narrowed<S>(cnt > 0 ? s / T(cnt) : T(0));
    }
  }
}

// dx elements per block tile: 4 a thread.
constexpr int kTileSlots = 1024;

// A gradient block's tile: 2^lg_th rows x 2^lg_tw columns of each of
// 2^lg_p planes (kTileSlots in all), at (tile / tiles_w, tile % tiles_w)
// in tile units, planes a group of 2^lg_p; the windows covering its rows
// (columns) lie within wr (wc) consecutive output rows (columns) from the
// first covering its first row (column). nwin: 2^lg_p · wr · wc, rounded
// up to even so that shared memory's arrays after the T array align.
struct GradTile {
  int lg_th, lg_tw, lg_p, wr, wc, nwin;
  std::int64_t tiles_w, tiles, groups;
};

// Phase one of a tile (rows from ih0, columns from iw0, planes from p0):
// tab's first / last covering output per tile row, then per column; per
// covering window j (plane, oh0 + row, ow0 + column), win_d[j] its dout
// (max) or dout / its divisor (avg, 0 for a divisor of 0, which adds
// nothing as no sum here is -0) and, max, win_at[j] its pool_argmax.
template <int K, bool is_max, typename I, typename S>
__device__ __forceinline__ void tile_windows(const S* __restrict__ x, const S* __restrict__ dout, const Plane<I>& g,
                                             const Pool2dGeometry& full, bool exclusive, const GradTile& t,
                                             std::int64_t planes, std::int64_t p0, I ih0, I iw0, I oh0, I ow0,
                                             Widened<S>* win_d, I* win_at, I* tab) {
  using T = Widened<S>;
  const int th = 1 << t.lg_th, tw = 1 << t.lg_tw;
  for (int q = threadIdx.x; q < th + tw; q += blockDim.x) {
    if (q < th) pool_outputs_covering(ih0 + q, g.kh, g.sh, g.pt, g.ho, tab[2 * q], tab[2 * q + 1]);
    else pool_outputs_covering(iw0 + (q - th), g.kw, g.sw, g.pl, g.wo, tab[2 * q], tab[2 * q + 1]);
  }
  const unsigned per_plane = unsigned(t.wr) * unsigned(t.wc), nwin = per_plane << t.lg_p;
  for (unsigned j = threadIdx.x; j < nwin; j += blockDim.x) {
    const unsigned p = j / per_plane, rc = j - p * per_plane, r = rc / unsigned(t.wc);
    const I oh = oh0 + I(r), ow = ow0 + I(rc - r * unsigned(t.wc));
    const std::int64_t plane = p0 + p;
    if (plane >= planes || oh >= g.ho || ow >= g.wo) continue;
    const T d = widened(dout[plane * (g.ho * g.wo) + oh * g.wo + ow]);
    if constexpr (is_max) {
      T m;
      win_at[j] = window_argmax<K>(x + plane * (g.h * g.w), g, oh, ow, m);
      win_d[j] = d;
    } else {
      const std::int64_t cnt = avg_pool_count(full, oh, ow, exclusive);
      win_d[j] = cnt > 0 ? d / T(cnt) : T(0);
    }
  }
}

// max_pool2d's (is_max) or avg_pool2d's gradient, a tile a block: the
// tile's windows into shared memory (tile_windows), then per dx element
// (plane, ih, iw) the sum over the windows holding it, (oh, ow)
// row-major, of max: dout where (ih, iw) is the window's pool_argmax;
// avg: dout / the window's divisor. Grid: tiles along x, plane groups
// along y, each block looping over both.
template <int K, bool is_max, typename I, typename S>
__global__ void pool_grad_tiled(const S* __restrict__ x, const S* __restrict__ dout, S* __restrict__ dx,
                                Plane<I> g, Pool2dGeometry full, bool exclusive, GradTile t,
                                std::int64_t planes) {
  using T = Widened<S>;
  extern __shared__ __align__(16) unsigned char pool_shared[];
  T* win_d = reinterpret_cast<T*>(pool_shared);
  I* win_at = reinterpret_cast<I*>(win_d + t.nwin);
  I* tab = win_at + (is_max ? t.nwin : 0);  // first, last per tile row, then per tile column
  const int th = 1 << t.lg_th, tw = 1 << t.lg_tw, per_plane = t.wr * t.wc;
  const I hw = g.h * g.w;
  for (std::int64_t grp = blockIdx.y; grp < t.groups; grp += gridDim.y)
    for (std::int64_t tile = blockIdx.x; tile < t.tiles; tile += gridDim.x) {
      const std::int64_t p0 = grp << t.lg_p;
      const I ih0 = I(tile / t.tiles_w) << t.lg_th, iw0 = I(tile % t.tiles_w) << t.lg_tw;
      I oh0, ow0, unused;
      pool_outputs_covering(ih0, g.kh, g.sh, g.pt, g.ho, oh0, unused);
      pool_outputs_covering(iw0, g.kw, g.sw, g.pl, g.wo, ow0, unused);
      __syncthreads();  // the previous tile's reads of shared memory are done
      tile_windows<K, is_max>(x, dout, g, full, exclusive, t, planes, p0, ih0, iw0, oh0, ow0, win_d, win_at, tab);
      __syncthreads();
      const int c = threadIdx.x & (tw - 1);
      const I iw = iw0 + c, ow_a = tab[2 * (th + c)], ow_b = tab[2 * (th + c) + 1];
      for (int slot = threadIdx.x; slot < kTileSlots; slot += blockDim.x) {
        const int p = slot >> (t.lg_th + t.lg_tw), r = (slot >> t.lg_tw) & (th - 1);
        const I ih = ih0 + r;
        if (p0 + p >= planes || ih >= g.h || iw >= g.w) continue;
        const I at = ih * g.w + iw;
        T acc = 0;
        for (I oh = tab[2 * r]; oh <= tab[2 * r + 1]; ++oh) {
          const I row = I(p * per_plane) + (oh - oh0) * I(t.wc) - ow0;  // + ow: the window's j
          for (I ow = ow_a; ow <= ow_b; ++ow) {
            if constexpr (is_max) {
              if (win_at[row + ow] == at) acc += win_d[row + ow];
            } else {
              acc += win_d[row + ow];
            }
          }
        }
        dx[(p0 + p) * hw + at] = narrowed<S>(acc);
      }
    }
}

// pool_grad_tiled's sums, a thread per dx element reading the windows from
// global memory (each window's maximum found anew for each element it
// holds): for tiles whose windows overflow shared memory.
template <bool is_max, typename S>
__global__ void pool_grad_gather(const S* __restrict__ x, const S* __restrict__ dout, S* __restrict__ dx,
                                 Pool2dGeometry g, bool exclusive, std::int64_t n) {
  using T = Widened<S>;
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t plane = i / (g.h * g.w), at = i % (g.h * g.w);
    const std::int64_t ih = at / g.w, iw = at % g.w;
    std::int64_t oh0, oh1, ow0, ow1;
    pool_outputs_covering(ih, g.kh, g.sh, g.pt, g.ho, oh0, oh1);
    pool_outputs_covering(iw, g.kw, g.sw, g.pl, g.wo, ow0, ow1);
    const S* xp = x + plane * g.h * g.w;
    const S* d = dout + plane * g.ho * g.wo;
    T acc = 0;
    for (std::int64_t oh = oh0; oh <= oh1; ++oh)
      for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
        if constexpr (is_max) {
          T m;
          if (window_argmax<0>(xp, g, oh, ow, m) == at) acc += widened(d[oh * g.wo + ow]);
        } else {
          const std::int64_t cnt = avg_pool_count(g, oh, ow, exclusive);
          if (cnt > 0) acc += widened(d[oh * g.wo + ow]) / T(cnt);
        }
      }
    dx[i] = narrowed<S>(acc);
  }
}

// adaptive_avg_pool2d: output (oh, ow) averages its adaptive window,
// summed row-major as the CPU does.
template <typename T>
__global__ void adaptive_avg_pool(const T* __restrict__ x, T* __restrict__ out, Pool2dGeometry g,
                                  std::int64_t n) {
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t plane = i / (g.ho * g.wo), at = i % (g.ho * g.wo);
    const std::int64_t oh = at / g.wo, ow = at % g.wo;
    const std::int64_t hs = adaptive_start(oh, g.h, g.ho), he = adaptive_end(oh, g.h, g.ho);
    const std::int64_t ws = adaptive_start(ow, g.w, g.wo), we = adaptive_end(ow, g.w, g.wo);
    const T* xp = x + plane * g.h * g.w;
    T s = 0;
    for (std::int64_t ih = hs; ih < he; ++ih)
      for (std::int64_t iw = ws; iw < we; ++iw) s += xp[ih * g.w + iw];
    const std::int64_t cnt = (he - hs) * (we - ws);
    out[i] = cnt > 0 ? s / T(cnt) : T(0);
  }
}

// Its gradient at input (plane, ih, iw): Σ dout / the window's size over
// the windows holding it, in the CPU's (oh, ow) order.
template <typename T>
__global__ void adaptive_avg_pool_grad(const T* __restrict__ dout, T* __restrict__ dx, Pool2dGeometry g,
                                       std::int64_t n) {
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t plane = i / (g.h * g.w), at = i % (g.h * g.w);
    const std::int64_t ih = at / g.w, iw = at % g.w;
    std::int64_t oh0, oh1, ow0, ow1;
    adaptive_outputs_covering(ih, g.h, g.ho, oh0, oh1);
    adaptive_outputs_covering(iw, g.w, g.wo, ow0, ow1);
    const T* d = dout + plane * g.ho * g.wo;
    T acc = 0;
    for (std::int64_t oh = oh0; oh <= oh1; ++oh) {
      const std::int64_t hs = adaptive_start(oh, g.h, g.ho), he = adaptive_end(oh, g.h, g.ho);
      if (ih < hs || ih >= he) continue;
      for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
        const std::int64_t ws = adaptive_start(ow, g.w, g.wo), we = adaptive_end(ow, g.w, g.wo);
        if (iw < ws || iw >= we) continue;
        acc += d[oh * g.wo + ow] / T((he - hs) * (we - ws));
      }
    }
    dx[i] = acc;
  }
}

static_assert(kThreads % 64 == 0 && kTileSlots % kThreads == 0,
              "a gradient thread's tile slots share one column (a tile is at most 64 wide)");

// The smallest e with 2^e >= v (v >= 1).
int ceil_log2(std::int64_t v) {
  int e = 0;
  while ((std::int64_t{1} << e) < v) ++e;
  return e;
}

// pool_grad_tiled's tile for g: as wide as a plane up to 64 columns, as
// tall as it up to kTileSlots in all, as many planes as fill the rest;
// false when its shared memory (bytes, with index_bytes-wide indices)
// would pass the 48 KiB a launch gets without opting in.
bool grad_tile(const Pool2dGeometry& g, bool max, std::size_t value_bytes, std::size_t index_bytes,
               GradTile& t, std::size_t& bytes) {
  t.lg_tw = ceil_log2(std::min<std::int64_t>(g.w, 64));
  t.lg_th = ceil_log2(std::min<std::int64_t>(g.h, kTileSlots >> t.lg_tw));
  t.lg_p = ceil_log2(kTileSlots) - t.lg_tw - t.lg_th;
  const std::int64_t th = std::int64_t{1} << t.lg_th, tw = std::int64_t{1} << t.lg_tw;
  // A tile's rows [ih0, ih0 + th) meet the windows from covering's first of
  // ih0 to its last of ih0 + th − 1: at most (th + kh − 2) / sh + 1 rows.
  const std::int64_t wr = std::min(g.ho, (th + g.kh - 2) / g.sh + 1);
  const std::int64_t wc = std::min(g.wo, (tw + g.kw - 2) / g.sw + 1);
  const std::int64_t nwin = ((wr * wc << t.lg_p) + 1) / 2 * 2;
  bytes = static_cast<std::size_t>(nwin) * (value_bytes + (max ? index_bytes : 0)) +
          static_cast<std::size_t>(2 * (th + tw)) * index_bytes;
  if (nwin > (std::int64_t{48} << 10) || bytes > (std::size_t{48} << 10)) return false;
  t.wr = static_cast<int>(wr), t.wc = static_cast<int>(wc), t.nwin = static_cast<int>(nwin);
  t.tiles_w = (g.w + tw - 1) / tw;
  t.tiles = (g.h + th - 1) / th * t.tiles_w;
  t.groups = ((g.n * g.c) + (std::int64_t{1} << t.lg_p) - 1) >> t.lg_p;
  return true;
}

template <int K, typename I, typename T>
void forward(bool max, const T* x, T* out, const Pool2dGeometry& g, bool exclusive, std::int64_t n,
             cudaStream_t s) {
  if (max) pool_forward<K, true, I><<<blocks_for(n), kThreads, 0, s>>>(x, out, plane_of<I>(g), g, exclusive, I(n));
  else pool_forward<K, false, I><<<blocks_for(n), kThreads, 0, s>>>(x, out, plane_of<I>(g), g, exclusive, I(n));
}

template <int K, bool is_max, typename I, typename T>
void grad_tiled(const T* x, const T* dout, T* dx, const Pool2dGeometry& g, bool exclusive, const GradTile& t,
                std::size_t bytes, cudaStream_t s) {
  const dim3 grid(blocks_over(t.tiles), static_cast<unsigned>(std::min<std::int64_t>(t.groups, 65535)));
  pool_grad_tiled<K, is_max, I><<<grid, kThreads, bytes, s>>>(x, dout, dx, plane_of<I>(g), g, exclusive, t,
                                                               g.n * g.c);
}

}  // namespace

template <typename T>
void launch_adaptive_avg_pool(const T* x, T* out, const Pool2dGeometry& g, cudaStream_t s) {
  const std::int64_t n = g.n * g.c * g.ho * g.wo;
  if (n) adaptive_avg_pool<<<blocks_for(n), kThreads, 0, s>>>(x, out, g, n);
}

template <typename T>
void launch_adaptive_avg_pool_grad(const T* dout, T* dx, const Pool2dGeometry& g, cudaStream_t s) {
  const std::int64_t n = g.n * g.c * g.h * g.w;
  if (n) adaptive_avg_pool_grad<<<blocks_for(n), kThreads, 0, s>>>(dout, dx, g, n);
}

template <typename T>
void launch_pool(bool max, const T* x, T* out, const Pool2dGeometry& g, bool exclusive,
                 cudaStream_t s) {
  const std::int64_t n = g.n * g.c * g.ho * g.wo;
  if (n == 0) return;
  if (!fits_int32(g, n)) return forward<0, std::int64_t>(max, x, out, g, exclusive, n, s);
  switch (unrolled_side(g)) {
    case 3: return forward<3, std::int32_t>(max, x, out, g, exclusive, n, s);
    case 2: return forward<2, std::int32_t>(max, x, out, g, exclusive, n, s);
    default: return forward<0, std::int32_t>(max, x, out, g, exclusive, n, s);
  }
}

template <typename T>
void launch_pool_grad(bool max, const T* x, const T* dout, T* dx, const Pool2dGeometry& g,
                      bool exclusive, cudaStream_t s) {
  const std::int64_t n = g.n * g.c * g.h * g.w;
  if (n == 0) return;
  const bool narrow = fits_int32(g, 0);  // the tiles' loops are 64-bit
  GradTile t;
  std::size_t bytes = 0;
  if (!grad_tile(g, max, sizeof(Widened<T>), narrow ? 4 : 8, t, bytes)) {
    if (max) pool_grad_gather<true><<<blocks_for(n), kThreads, 0, s>>>(x, dout, dx, g, exclusive, n);
    else pool_grad_gather<false><<<blocks_for(n), kThreads, 0, s>>>(x, dout, dx, g, exclusive, n);
    return;
  }
  if (!narrow) {
    if (max) return grad_tiled<0, true, std::int64_t>(x, dout, dx, g, exclusive, t, bytes, s);
    return grad_tiled<0, false, std::int64_t>(x, dout, dx, g, exclusive, t, bytes, s);
  }
  if (!max) return grad_tiled<0, false, std::int32_t>(x, dout, dx, g, exclusive, t, bytes, s);
  switch (unrolled_side(g)) {
    case 3: return grad_tiled<3, true, std::int32_t>(x, dout, dx, g, exclusive, t, bytes, s);
    case 2: return grad_tiled<2, true, std::int32_t>(x, dout, dx, g, exclusive, t, bytes, s);
    default: return grad_tiled<0, true, std::int32_t>(x, dout, dx, g, exclusive, t, bytes, s);
  }
}

void launch_pool_half(DataType dt, bool max, const void* x, void* out, const Pool2dGeometry& g, bool exclusive,
                      cudaStream_t s) {
  if (dt == DataType::BFloat16)
    return launch_pool(max, static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(out), g, exclusive, s);
  launch_pool(max, static_cast<const __half*>(x), static_cast<__half*>(out), g, exclusive, s);
}

void launch_pool_grad_half(DataType dt, bool max, const void* x, const void* dout, void* dx,
                           const Pool2dGeometry& g, bool exclusive, cudaStream_t s) {
  if (dt == DataType::BFloat16)
    return launch_pool_grad(max, static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(dout),
                            static_cast<__nv_bfloat16*>(dx), g, exclusive, s);
  launch_pool_grad(max, static_cast<const __half*>(x), static_cast<const __half*>(dout), static_cast<__half*>(dx), g,
                   exclusive, s);
}

#define KILN_POOL(T)                                                                        \
  template void launch_pool<T>(bool, const T*, T*, const Pool2dGeometry&, bool, cudaStream_t); \
  template void launch_pool_grad<T>(bool, const T*, const T*, T*, const Pool2dGeometry&, bool, \
                                    cudaStream_t);
#define KILN_ADAPTIVE_POOL(T)                                                                  \
  template void launch_adaptive_avg_pool<T>(const T*, T*, const Pool2dGeometry&, cudaStream_t); \
  template void launch_adaptive_avg_pool_grad<T>(const T*, T*, const Pool2dGeometry&, cudaStream_t);
KILN_ADAPTIVE_POOL(float)
KILN_ADAPTIVE_POOL(double)
KILN_POOL(float)
KILN_POOL(double)
KILN_POOL(std::int32_t)
KILN_POOL(std::int64_t)

}  // namespace kiln::cuda
