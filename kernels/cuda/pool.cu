// Device halves of the CUDA max_pool2d / avg_pool2d / adaptive_avg_pool2d
// and their gradients (NCHW), from the CPU's window functions (kiln/dialect/pool_window.h): one
// thread per output element forward; one per input element backward,
// gathering from the windows that hold it in the CPU's (oh, ow) order — no
// atomics, so the gradients are the CPU's bit for bit.
#include <cstdint>

#include "grid_stride.cuh"
#include "launch.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void max_pool(const T* __restrict__ x, T* __restrict__ out, Pool2dGeometry g,
                         std::int64_t n) {
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t plane = i / (g.ho * g.wo), at = i % (g.ho * g.wo);
    const T* xp = x + plane * g.h * g.w;
    out[i] = xp[pool_argmax(xp, g, pool_window(g, at / g.wo, at % g.wo))];
  }
}

template <typename T>
__global__ void avg_pool(const T* __restrict__ x, T* __restrict__ out, Pool2dGeometry g,
                         bool exclusive, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t plane = i / (g.ho * g.wo), at = i % (g.ho * g.wo);
    const std::int64_t oh = at / g.wo, ow = at % g.wo;
    const T* xp = x + plane * g.h * g.w;
    const PoolWindow r = pool_window(g, oh, ow);
    T s = 0;
    for (std::int64_t ih = r.hs; ih < r.he; ++ih)
      for (std::int64_t iw = r.ws; iw < r.we; ++iw) s += xp[ih * g.w + iw];
    const std::int64_t cnt = avg_pool_count(g, oh, ow, exclusive);
    out[i] = cnt > 0 ? s / T(cnt) : T(0);
  }
}

// dx at input (plane, ih, iw): Σ over the windows holding it, (oh, ow)
// row-major, of max: dout where it is the window's first maximum; avg:
// dout / the window's divisor.
template <bool is_max, typename T>
__global__ void pool_grad(const T* __restrict__ x, const T* __restrict__ dout, T* __restrict__ dx,
                          Pool2dGeometry g, bool exclusive, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t plane = i / (g.h * g.w), at = i % (g.h * g.w);
    const std::int64_t ih = at / g.w, iw = at % g.w;
    std::int64_t oh0, oh1, ow0, ow1;
    pool_outputs_covering(ih, g.kh, g.sh, g.pt, g.ho, oh0, oh1);
    pool_outputs_covering(iw, g.kw, g.sw, g.pl, g.wo, ow0, ow1);
    const T* xp = x + plane * g.h * g.w;
    const T* d = dout + plane * g.ho * g.wo;
    T acc = 0;
    for (std::int64_t oh = oh0; oh <= oh1; ++oh)
      for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
        if constexpr (is_max) {
          if (pool_argmax(xp, g, pool_window(g, oh, ow)) == at) acc += d[oh * g.wo + ow];
        } else {
          const std::int64_t cnt = avg_pool_count(g, oh, ow, exclusive);
          if (cnt > 0) acc += d[oh * g.wo + ow] / T(cnt);
        }
      }
    dx[i] = acc;
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
  if (max) max_pool<<<blocks_for(n), kThreads, 0, s>>>(x, out, g, n);
  else avg_pool<<<blocks_for(n), kThreads, 0, s>>>(x, out, g, exclusive, n);
}

template <typename T>
void launch_pool_grad(bool max, const T* x, const T* dout, T* dx, const Pool2dGeometry& g,
                      bool exclusive, cudaStream_t s) {
  const std::int64_t n = g.n * g.c * g.h * g.w;
  if (n == 0) return;
  if (max) pool_grad<true><<<blocks_for(n), kThreads, 0, s>>>(x, dout, dx, g, exclusive, n);
  else pool_grad<false><<<blocks_for(n), kThreads, 0, s>>>(x, dout, dx, g, exclusive, n);
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
