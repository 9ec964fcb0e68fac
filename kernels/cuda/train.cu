// CUDA kernels of the remaining ops a training step needs: the index check
// of gather / embedding / cross-entropy, row gathers and their scatter-add
// gradients (atomics), the optimizer updates (kiln/kernel/optimizer_math.h,
// shared with the CPU), loss scaling's unscale-and-check and state step
// (kiln/kernel/loss_scaling_math.h) and the random ops (kiln/kernel/random.h's
// counter-based generator, shared with the CPU). Launched by train.cc
// (launch.h).
//
// The optimizer updates and random numbers give the CPU kernels' bits
// (their math uses only correctly rounded operations and no FMA); a
// scatter-add sums in the order its atomics land, so it equals the CPU's
// up to rounding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gradient_in.cuh"
#include "grid_stride.cuh"
#include "kiln/kernel/loss_scaling_math.h"
#include "kiln/kernel/optimizer_math.h"
#include "kiln/kernel/random.h"
#include "launch.h"

namespace kiln::cuda {
namespace {

// ---- indices ----

template <typename I>
__global__ void find_bad_index(const I* ids, std::int64_t count, std::int64_t n, std::int64_t skip,
                               unsigned long long* pos) {
  KILN_GRID_STRIDE(k, count) {
    const std::int64_t id = static_cast<std::int64_t>(ids[k]);
    if (id != skip && (id < 0 || id >= n)) atomicMin(pos, static_cast<unsigned long long>(k));
  }
}

// Rows copied in words W (the widest that divides the row and both pointers).
template <typename W, typename I>
__global__ void take_rows(const I* ids, std::int64_t count, const W* src, W* dst,
                          std::int64_t outer, std::int64_t n, std::int64_t row,
                          std::int64_t zero_id) {
  KILN_GRID_STRIDE(i, outer * count * row) {
    const std::int64_t j = i % row, k = (i / row) % count, o = i / (row * count);
    const std::int64_t id = static_cast<std::int64_t>(ids[k]);
    dst[i] = id == zero_id ? W(0) : src[(o * n + id) * row + j];
  }
}

template <typename T, typename I>
__global__ void scatter_add(const I* ids, std::int64_t count, const T* src, T* dst,
                            std::int64_t outer, std::int64_t n, std::int64_t row,
                            std::int64_t skip) {
  KILN_GRID_STRIDE(i, outer * count * row) {
    const std::int64_t j = i % row, k = (i / row) % count, o = i / (row * count);
    const std::int64_t id = static_cast<std::int64_t>(ids[k]);
    if (id != skip) atomicAdd(dst + (o * n + id) * row + j, src[i]);
  }
}

// ---- optimizers ----

// Every update kernel first reads the skip flag (null: none).
__device__ inline bool skipped(const bool* skip) { return skip && *skip; }

template <typename T>
__global__ void sgd(T* p, GradientIn g, const T* lr, const bool* skip, std::int64_t n) {
  if (skipped(skip)) return;
  const T rate = *lr;
  KILN_GRID_STRIDE(i, n) p[i] = sgd_step(p[i], gradient_at<T>(g, i), rate);
}

template <typename T>
__global__ void momentum(T* p, T* v, GradientIn g, const T* lr, const bool* skip, T mu, bool nesterov,
                         std::int64_t n) {
  if (skipped(skip)) return;
  const T rate = *lr;
  KILN_GRID_STRIDE(i, n) momentum_step(p[i], v[i], gradient_at<T>(g, i), rate, mu, nesterov);
}

template <typename T>
__global__ void adam(T* p, T* m1, T* m2, GradientIn g, const T* lr, const bool* skip, const T* b1p,
                     const T* b2p, T beta1, T beta2, T eps, T coeff, bool decay, std::int64_t n) {
  if (skipped(skip)) return;
  const T rate = *lr;
  const AdamStep<T> step = adam_step_of(rate, *b1p, *b2p, beta1, beta2, eps);
  const T keep = T(1) - mul_rn(rate, coeff);  // adamw_: param -= lr · coeff · param
  KILN_GRID_STRIDE(i, n) {
    T pi = p[i];
    if (decay) pi = mul_rn(pi, keep);
    adam_element(pi, m1[i], m2[i], gradient_at<T>(g, i), step);
    p[i] = pi;
  }
}

// After adam: the beta powers times beta (one thread; b1p_out may be b1p).
template <typename T>
__global__ void advance_beta_pows(const T* b1p, const T* b2p, T* b1p_out, T* b2p_out, T beta1,
                                  T beta2, const bool* skip) {
  if (skipped(skip)) return;
  const T a = *b1p, b = *b2p;
  *b1p_out = mul_rn(a, beta1);
  *b2p_out = mul_rn(b, beta2);
}

// ---- loss scaling ----

// y = x · (1 / scale) in f32 (f64 for double); *found = true where some x
// is an inf or a nan (every writer writes true: no race on the result).
__device__ inline float widen16(std::uint16_t v, bool bf16) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(v)) : __half2float(__ushort_as_half(v));
}

template <typename T>
__global__ void unscale(const T* __restrict__ x, T* __restrict__ y, std::int64_t n,
                        const float* scale, bool* found) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const C inv = C(1) / static_cast<C>(*scale);
  bool bad = false;
  KILN_GRID_STRIDE(i, n) {
    bad |= !isfinite(x[i]);
    y[i] = x[i] * inv;
  }
  if (bad) *found = true;
}

__global__ void unscale16(const std::uint16_t* __restrict__ x, std::uint16_t* __restrict__ y,
                          std::int64_t n, const float* scale, bool* found, bool bf16) {
  const float inv = 1.0f / *scale;
  bool bad = false;
  KILN_GRID_STRIDE(i, n) {
    const float v = widen16(x[i], bf16);
    bad |= !isfinite(v);
    const float r = v * inv;
    y[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(r)) : __half_as_ushort(__float2half_rn(r));
  }
  if (bad) *found = true;
}

// One thread: kiln/kernel/loss_scaling_math.h's step on the device state.
__global__ void update_loss_scaling(const bool* found, float* scale, std::int32_t* good,
                                    std::int32_t* bad, LossScaleRule rule) {
  const LossScaleState s = next_loss_scale(LossScaleState{*scale, *good, *bad}, *found, rule);
  *scale = s.scale;
  *good = s.good;
  *bad = s.bad;
}

// ---- random ----

template <typename T>
__global__ void uniform(T* out, std::int64_t n, std::uint64_t key, double lo, double span, T hi,
                        T below_hi) {
  KILN_GRID_STRIDE(i, n) {
    const T v = static_cast<T>(
        uniform_value(lo, span, random_uniform01(key, static_cast<std::uint64_t>(i))));
    out[i] = (v >= hi && span > 0) ? below_hi : v;  // keep [min, max) after rounding to T
  }
}

// One thread per Box-Muller pair (elements 2k, 2k + 1).
template <typename T>
__global__ void gaussian(T* out, std::int64_t n, std::uint64_t key, double mean, double std) {
  KILN_GRID_STRIDE(k, (n + 1) / 2) {
    double z0, z1;
    random_normal_pair(key, static_cast<std::uint64_t>(k), z0, z1);
    out[2 * k] = static_cast<T>(gaussian_value(mean, std, z0));
    if (2 * k + 1 < n) out[2 * k + 1] = static_cast<T>(gaussian_value(mean, std, z1));
  }
}

template <typename T>
__global__ void dropout(const T* x, T* out, bool* mask, std::int64_t n, std::uint64_t key, double p,
                        T scale) {
  KILN_GRID_STRIDE(i, n) {
    const bool keep = random_uniform01(key, static_cast<std::uint64_t>(i)) >= p;
    mask[i] = keep;
    out[i] = keep ? x[i] * scale : T(0);
  }
}

template <typename T>
__global__ void dropout_grad(const T* d, const bool* mask, T* out, std::int64_t n, T scale) {
  KILN_GRID_STRIDE(i, n) out[i] = mask[i] ? d[i] * scale : T(0);
}

}  // namespace

template <typename I>
void launch_find_bad_index(const I* ids, std::int64_t count, std::int64_t n, std::int64_t skip,
                           unsigned long long* pos, cudaStream_t s) {
  if (count) find_bad_index<<<blocks_for(count), kThreads, 0, s>>>(ids, count, n, skip, pos);
}

template <typename I>
void launch_take_rows(const I* ids, std::int64_t count, const void* src, void* dst,
                      std::int64_t outer, std::int64_t n, std::int64_t row_bytes,
                      std::int64_t zero_id, cudaStream_t s) {
  const std::int64_t total = outer * count * row_bytes;
  if (total == 0) return;
  const auto aligned = [&](std::int64_t w) {
    return row_bytes % w == 0 && reinterpret_cast<std::uintptr_t>(src) % w == 0 &&
           reinterpret_cast<std::uintptr_t>(dst) % w == 0;
  };
  if (aligned(8))
    take_rows<<<blocks_for(total / 8), kThreads, 0, s>>>(
        ids, count, static_cast<const std::uint64_t*>(src), static_cast<std::uint64_t*>(dst), outer,
        n, row_bytes / 8, zero_id);
  else if (aligned(4))
    take_rows<<<blocks_for(total / 4), kThreads, 0, s>>>(
        ids, count, static_cast<const std::uint32_t*>(src), static_cast<std::uint32_t*>(dst), outer,
        n, row_bytes / 4, zero_id);
  else
    take_rows<<<blocks_for(total), kThreads, 0, s>>>(
        ids, count, static_cast<const std::uint8_t*>(src), static_cast<std::uint8_t*>(dst), outer,
        n, row_bytes, zero_id);
}

template <typename T, typename I>
void launch_scatter_add(const I* ids, std::int64_t count, const T* src, T* dst, std::int64_t outer,
                        std::int64_t n, std::int64_t row, std::int64_t skip, cudaStream_t s) {
  const std::int64_t total = outer * count * row;
  if (total)
    scatter_add<<<blocks_for(total), kThreads, 0, s>>>(ids, count, src, dst, outer, n, row, skip);
}

template <typename T>
void launch_sgd(T* p, GradientIn g, const T* lr, const bool* skip, std::int64_t n, cudaStream_t s) {
  if (n) sgd<<<blocks_for(n), kThreads, 0, s>>>(p, g, lr, skip, n);
}

template <typename T>
void launch_momentum(T* p, T* v, GradientIn g, const T* lr, const bool* skip, T mu, bool nesterov,
                     std::int64_t n, cudaStream_t s) {
  if (n) momentum<<<blocks_for(n), kThreads, 0, s>>>(p, v, g, lr, skip, mu, nesterov, n);
}

template <typename T>
void launch_adam(T* p, T* m1, T* m2, GradientIn g, const T* lr, const bool* skip, const T* b1p,
                 const T* b2p, T* b1p_out, T* b2p_out, T beta1, T beta2, T eps, T coeff, bool decay,
                 std::int64_t n, cudaStream_t s) {
  if (n)
    adam<<<blocks_for(n), kThreads, 0, s>>>(p, m1, m2, g, lr, skip, b1p, b2p, beta1, beta2, eps,
                                            coeff, decay, n);
  advance_beta_pows<<<1, 1, 0, s>>>(b1p, b2p, b1p_out, b2p_out, beta1, beta2, skip);
}

template <typename T>
void launch_unscale(const T* x, T* y, std::int64_t n, const float* scale, bool* found, cudaStream_t s) {
  if (n) unscale<<<blocks_for(n), kThreads, 0, s>>>(x, y, n, scale, found);
}

void launch_unscale16(const std::uint16_t* x, std::uint16_t* y, std::int64_t n, const float* scale,
                      bool* found, bool bf16, cudaStream_t s) {
  if (n) unscale16<<<blocks_for(n), kThreads, 0, s>>>(x, y, n, scale, found, bf16);
}

void launch_update_loss_scaling(const bool* found, float* scale, std::int32_t* good, std::int32_t* bad,
                                const LossScaleRule& rule, cudaStream_t s) {
  update_loss_scaling<<<1, 1, 0, s>>>(found, scale, good, bad, rule);
}

template <typename T>
void launch_uniform(T* out, std::int64_t n, std::uint64_t key, double lo, double span, T hi,
                    T below_hi, cudaStream_t s) {
  if (n) uniform<<<blocks_for(n), kThreads, 0, s>>>(out, n, key, lo, span, hi, below_hi);
}

template <typename T>
void launch_gaussian(T* out, std::int64_t n, std::uint64_t key, double mean, double std,
                     cudaStream_t s) {
  if (n) gaussian<<<blocks_for((n + 1) / 2), kThreads, 0, s>>>(out, n, key, mean, std);
}

template <typename T>
void launch_dropout(const T* x, T* out, bool* mask, std::int64_t n, std::uint64_t key, double p,
                    T scale, cudaStream_t s) {
  if (n) dropout<<<blocks_for(n), kThreads, 0, s>>>(x, out, mask, n, key, p, scale);
}

template <typename T>
void launch_dropout_grad(const T* d, const bool* mask, T* out, std::int64_t n, T scale,
                         cudaStream_t s) {
  if (n) dropout_grad<<<blocks_for(n), kThreads, 0, s>>>(d, mask, out, n, scale);
}

// ---- explicit instantiations: the dtypes train.cc registers ----

#define KILN_INDEX(I)                                                                         \
  template void launch_find_bad_index<I>(const I*, std::int64_t, std::int64_t, std::int64_t,  \
                                         unsigned long long*, cudaStream_t);                  \
  template void launch_take_rows<I>(const I*, std::int64_t, const void*, void*, std::int64_t, \
                                    std::int64_t, std::int64_t, std::int64_t, cudaStream_t);  \
  template void launch_scatter_add<float, I>(const I*, std::int64_t, const float*, float*,    \
                                             std::int64_t, std::int64_t, std::int64_t,        \
                                             std::int64_t, cudaStream_t);                     \
  template void launch_scatter_add<double, I>(const I*, std::int64_t, const double*, double*, \
                                              std::int64_t, std::int64_t, std::int64_t,       \
                                              std::int64_t, cudaStream_t);
KILN_INDEX(std::int32_t)
KILN_INDEX(std::int64_t)

#define KILN_TRAIN(T)                                                                              \
  template void launch_sgd<T>(T*, GradientIn, const T*, const bool*, std::int64_t, cudaStream_t);  \
  template void launch_momentum<T>(T*, T*, GradientIn, const T*, const bool*, T, bool, std::int64_t, \
                                   cudaStream_t);                                                  \
  template void launch_adam<T>(T*, T*, T*, GradientIn, const T*, const bool*, const T*, const T*,  \
                               T*, T*, T, T, T, T, bool, std::int64_t, cudaStream_t);              \
  template void launch_uniform<T>(T*, std::int64_t, std::uint64_t, double, double, T, T,           \
                                  cudaStream_t);                                                   \
  template void launch_gaussian<T>(T*, std::int64_t, std::uint64_t, double, double, cudaStream_t); \
  template void launch_dropout<T>(const T*, T*, bool*, std::int64_t, std::uint64_t, double, T,     \
                                  cudaStream_t);                                                   \
  template void launch_dropout_grad<T>(const T*, const bool*, T*, std::int64_t, T, cudaStream_t); \
  template void launch_unscale<T>(const T*, T*, std::int64_t, const float*, bool*, cudaStream_t);
KILN_TRAIN(float)
KILN_TRAIN(double)

}  // namespace kiln::cuda
