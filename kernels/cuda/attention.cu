// Device halves of the CUDA scaled-dot-product attention (attention.cc runs
// the GEMMs through cuBLAS): the row passes between them. Rows are the
// [B·H·Lq, Lk] score matrix of all heads; one block per row, its threads
// striding along the keys.
#include <cstdint>
#include <limits>

#include "grid_stride.cuh"
#include "key_lengths.cuh"
#include "launch.h"

namespace kiln::cuda {
namespace {

constexpr int kRowThreads = 128;

// The block's combination of each thread's `v` (sum or max), on every thread.
template <bool is_max, typename T>
__device__ T block_combine(T v) {
  __shared__ T part[kRowThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? (w > v ? w : v) : v + w;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // part[] is reused by the next call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = part[0];
  for (int w = 1; w < kRowThreads / 32; ++w) v = is_max ? (part[w] > v ? part[w] : v) : v + part[w];
  return v;
}

// How many keys row `row` of all heads' scores sees.
__device__ std::int64_t visible_keys(const AttentionRows& a, std::int64_t row) {
  return keys_seen(a.causal, key_count(a.keys, row / a.lq / a.h, a.lk), row % a.lq);
}

template <typename T>
__global__ void softmax_rows(T* __restrict__ s, T* __restrict__ lse, AttentionRows a) {
  const std::int64_t row = blockIdx.x, lk = a.lk;
  T* r = s + row * lk;
  const std::int64_t n = visible_keys(a, row);
  T m = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) m = r[j] > m ? r[j] : m;
  m = block_combine<true>(m);
  T sum = 0;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const T e = exp(r[j] - m);
    r[j] = e;
    sum += e;
  }
  sum = block_combine<false>(sum);
  const T inv = T(1) / sum;
  for (std::int64_t j = threadIdx.x; j < lk; j += blockDim.x) r[j] = j < n ? r[j] * inv : T(0);
  if (threadIdx.x == 0) lse[row] = m + log(sum);
}

template <typename T>
__global__ void probability_rows(T* __restrict__ p, const T* __restrict__ lse,
                                 const T* __restrict__ dout, const T* __restrict__ out,
                                 T* __restrict__ delta, AttentionRows a, std::int64_t dv) {
  const std::int64_t row = blockIdx.x, lk = a.lk;
  T* r = p + row * lk;
  const std::int64_t n = visible_keys(a, row);
  const T l = lse[row];  // -inf when n is 0: no exp taken
  for (std::int64_t j = threadIdx.x; j < lk; j += blockDim.x) r[j] = j < n ? exp(r[j] - l) : T(0);
  T acc = 0;
  for (std::int64_t c = threadIdx.x; c < dv; c += blockDim.x) acc += dout[row * dv + c] * out[row * dv + c];
  acc = block_combine<false>(acc);
  if (threadIdx.x == 0) delta[row] = acc;
}

template <typename T>
__global__ void score_grad(T* __restrict__ p, const T* __restrict__ dp, const T* __restrict__ delta,
                           std::int64_t lk, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) p[i] *= dp[i] - delta[i / lk];
}

}  // namespace

template <typename T>
void launch_attention_softmax(T* s, T* lse, const AttentionRows& r, cudaStream_t st) {
  if (r.rows) softmax_rows<<<static_cast<unsigned>(r.rows), kRowThreads, 0, st>>>(s, lse, r);
}

template <typename T>
void launch_attention_probabilities(T* p, const T* lse, const T* dout, const T* out, T* delta,
                                    const AttentionRows& r, std::int64_t dv, cudaStream_t st) {
  if (r.rows)
    probability_rows<<<static_cast<unsigned>(r.rows), kRowThreads, 0, st>>>(p, lse, dout, out, delta, r, dv);
}

template <typename T>
void launch_attention_score_grad(T* p, const T* dp, const T* delta, std::int64_t rows,
                                 std::int64_t lk, cudaStream_t st) {
  const std::int64_t n = rows * lk;
  if (n) score_grad<<<blocks_for(n), kThreads, 0, st>>>(p, dp, delta, lk, n);
}

#define KILN_ATTENTION(T)                                                                          \
  template void launch_attention_softmax<T>(T*, T*, const AttentionRows&, cudaStream_t);          \
  template void launch_attention_probabilities<T>(T*, const T*, const T*, const T*, T*,            \
                                                  const AttentionRows&, std::int64_t, cudaStream_t); \
  template void launch_attention_score_grad<T>(T*, const T*, const T*, std::int64_t, std::int64_t, \
                                               cudaStream_t);
KILN_ATTENTION(float)
KILN_ATTENTION(double)

}  // namespace kiln::cuda
