// Device halves of the CUDA scaled-dot-product attention (attention.cc runs
// the GEMMs through cuBLAS): the row passes between them. Rows are the
// [B·H·Lq, Lk] score matrix of all heads; a block per row (past the grid's
// cap, each block takes rows a grid apart), its threads striding along the
// keys. A mask applies to a score as the row pass reads
// it; a -inf score gives exactly 0 probability, a row of them an empty sum.
// Dropout (kiln/kernel/attention_dropout.h) draws a row's keep mask four
// keys to a thread, one random word each, row index the matrix's row.
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

// Where row `row`'s mask elements begin (its key j at + j · sj).
__device__ std::int64_t mask_row(const AttentionRows& a, std::int64_t row) {
  const std::int64_t bh = row / a.lq;
  return bh / a.h * a.mask.sb + bh % a.h * a.mask.sh + row % a.lq * a.mask.si;
}

// Score x of key j in a row whose mask elements begin at `at`, masked.
template <typename T>
__device__ T masked(const AttentionRows& a, std::int64_t at, std::int64_t j, T x) {
  if (!a.mask.data) return x;
  const std::int64_t o = at + j * a.mask.sj;
  if (a.mask.boolean)
    return static_cast<const std::uint8_t*>(a.mask.data)[o] != 0 ? x : -std::numeric_limits<T>::infinity();
  return x + static_cast<const T*>(a.mask.data)[o];
}

// Row `row` of the scores s: its softmax, dropped out, and its lse.
template <typename T>
__device__ void softmax_row(T* __restrict__ s, T* __restrict__ lse, const AttentionRows& a, std::int64_t row) {
  constexpr T kNone = -std::numeric_limits<T>::infinity();
  const std::int64_t lk = a.lk, at = mask_row(a, row);
  T* r = s + row * lk;
  const std::int64_t n = visible_keys(a, row);
  T m = kNone;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    r[j] = masked(a, at, j, r[j]);
    m = r[j] > m ? r[j] : m;
  }
  m = block_combine<true>(m);
  T sum = 0;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const T e = r[j] == kNone ? T(0) : exp(r[j] - m);
    r[j] = e;
    sum += e;
  }
  sum = block_combine<false>(sum);
  const T inv = m == kNone ? T(0) : T(1) / sum;  // a row without keys: an empty sum
  const AttentionDropout drop = dropout_rule(a.dropout);
  if (!drop.active()) {
    for (std::int64_t j = threadIdx.x; j < lk; j += blockDim.x) r[j] = j < n ? r[j] * inv : T(0);
  } else {
    const T scale = static_cast<T>(drop.scale);
    for (std::int64_t w = threadIdx.x; w < drop.row_words; w += blockDim.x) {
      const std::uint64_t bits = drop.word(row, w);
      for (std::int64_t j = 4 * w; j < 4 * w + 4 && j < lk; ++j)
        r[j] = j < n && drop.keeps(bits, j) ? r[j] * inv * scale : T(0);
    }
  }
  if (threadIdx.x == 0) lse[row] = m == kNone ? kNone : m + log(sum);
}

// A block per row, each block taking rows a grid apart.
template <typename T>
__global__ void softmax_rows(T* __restrict__ s, T* __restrict__ lse, AttentionRows a) {
  for (std::int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) softmax_row(s, lse, a, row);
}

template <typename T>
__device__ void probability_row(T* __restrict__ p, const T* __restrict__ lse, const T* __restrict__ dout,
                                const T* __restrict__ out, T* __restrict__ delta, const AttentionRows& a,
                                std::int64_t dv, std::int64_t row) {
  constexpr T kNone = -std::numeric_limits<T>::infinity();
  const std::int64_t lk = a.lk, at = mask_row(a, row);
  T* r = p + row * lk;
  const std::int64_t n = visible_keys(a, row);
  const T l = lse[row];  // -inf for a row without keys: no exp taken
  for (std::int64_t j = threadIdx.x; j < lk; j += blockDim.x) {
    const T x = j < n && l != kNone ? masked(a, at, j, r[j]) : kNone;
    r[j] = x == kNone ? T(0) : exp(x - l);
  }
  T acc = 0;
  for (std::int64_t c = threadIdx.x; c < dv; c += blockDim.x) acc += dout[row * dv + c] * out[row * dv + c];
  acc = block_combine<false>(acc);
  if (threadIdx.x == 0) delta[row] = acc;
}

template <typename T>
__global__ void probability_rows(T* __restrict__ p, const T* __restrict__ lse,
                                 const T* __restrict__ dout, const T* __restrict__ out,
                                 T* __restrict__ delta, AttentionRows a, std::int64_t dv) {
  for (std::int64_t row = blockIdx.x; row < a.rows; row += gridDim.x)
    probability_row(p, lse, dout, out, delta, a, dv, row);
}

template <typename T>
__global__ void score_grad(const T* __restrict__ p, T* __restrict__ dp, const T* __restrict__ delta,
                           std::int64_t lk, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) dp[i] = p[i] * (dp[i] - delta[i / lk]);
}

// The same under dropout, a thread per random word (four keys of a row):
// dS = P ∘ (Z ∘ dP - Δ) in place of dP, P ∘ Z in place of P.
template <typename T>
__global__ void drop_score_grad(T* __restrict__ p, T* __restrict__ dp, const T* __restrict__ delta,
                                DropoutRef dropout, std::int64_t lk, std::int64_t n) {
  const AttentionDropout drop = dropout_rule(dropout);
  const T scale = static_cast<T>(drop.scale);
  KILN_GRID_STRIDE(e, n) {
    const std::int64_t row = e / drop.row_words, w = e % drop.row_words;
    const std::uint64_t bits = drop.word(row, w);
    const T dl = delta[row];
    for (std::int64_t j = 4 * w; j < 4 * w + 4 && j < lk; ++j) {
      const std::int64_t i = row * lk + j;
      const T z = drop.keeps(bits, j) ? scale : T(0);
      dp[i] = p[i] * (z * dp[i] - dl);
      p[i] *= z;
    }
  }
}

// dmask element e of [nb, nh, ni, nj]: Σ of dS over the dims the mask
// broadcasts over (a dim of 1 there and not in the scores).
template <typename T>
__global__ void mask_grad(const T* __restrict__ ds, T* __restrict__ dmask, AttentionRows a, std::int64_t b,
                          std::int64_t n) {
  const std::int64_t nb = a.mask.sb ? b : 1, nh = a.mask.sh ? a.h : 1, ni = a.mask.si ? a.lq : 1,
                     nj = a.mask.sj ? a.lk : 1;
  KILN_GRID_STRIDE(e, n) {
    const std::int64_t j0 = e % nj, i0 = e / nj % ni, h0 = e / nj / ni % nh, b0 = e / nj / ni / nh;
    T acc = 0;
    for (std::int64_t bi = nb > 1 ? b0 : 0; bi < (nb > 1 ? b0 + 1 : b); ++bi)
      for (std::int64_t hi = nh > 1 ? h0 : 0; hi < (nh > 1 ? h0 + 1 : a.h); ++hi)
        for (std::int64_t i = ni > 1 ? i0 : 0; i < (ni > 1 ? i0 + 1 : a.lq); ++i) {
          const T* row = ds + ((bi * a.h + hi) * a.lq + i) * a.lk;
          for (std::int64_t j = nj > 1 ? j0 : 0; j < (nj > 1 ? j0 + 1 : a.lk); ++j) acc += row[j];
        }
    dmask[e] = acc;
  }
}

// x[e] = 0 for the elements of [B, H, Lk, W] in rows past their batch's key count.
template <typename T>
__global__ void zero_past_keys(T* __restrict__ x, KeyLengths keys, std::int64_t h, std::int64_t lk, std::int64_t w,
                               std::int64_t n) {
  KILN_GRID_STRIDE(e, n) {
    const std::int64_t row = e / w;
    if (row % lk >= key_count(keys, row / lk / h, lk)) x[e] = T(0);
  }
}

}  // namespace

template <typename T>
void launch_attention_softmax(T* s, T* lse, const AttentionRows& r, cudaStream_t st) {
  if (r.rows) softmax_rows<<<blocks_over(r.rows), kRowThreads, 0, st>>>(s, lse, r);
}

template <typename T>
void launch_attention_probabilities(T* p, const T* lse, const T* dout, const T* out, T* delta,
                                    const AttentionRows& r, std::int64_t dv, cudaStream_t st) {
  if (r.rows)
    probability_rows<<<blocks_over(r.rows), kRowThreads, 0, st>>>(p, lse, dout, out, delta, r, dv);
}

template <typename T>
void launch_attention_score_grad(T* p, T* dp, const T* delta, const AttentionRows& r, cudaStream_t st) {
  if (r.rows == 0 || r.lk == 0) return;
  if (r.dropout.key) {
    const std::int64_t n = r.rows * r.dropout.row_words;
    drop_score_grad<<<blocks_for(n), kThreads, 0, st>>>(p, dp, delta, r.dropout, r.lk, n);
  } else {
    const std::int64_t n = r.rows * r.lk;
    score_grad<<<blocks_for(n), kThreads, 0, st>>>(static_cast<const T*>(p), dp, delta, r.lk, n);
  }
}

template <typename T>
void launch_attention_mask_grad(const T* ds, T* dmask, const AttentionRows& r, std::int64_t b,
                                cudaStream_t st) {
  const std::int64_t n = (r.mask.sb ? b : 1) * (r.mask.sh ? r.h : 1) * (r.mask.si ? r.lq : 1) *
                         (r.mask.sj ? r.lk : 1);
  if (n) mask_grad<<<blocks_for(n), kThreads, 0, st>>>(ds, dmask, r, b, n);
}

template <typename T>
void launch_zero_past_key_lengths(T* x, const KeyLengths& keys, std::int64_t b, std::int64_t h, std::int64_t lk,
                                  std::int64_t w, cudaStream_t st) {
  const std::int64_t n = b * h * lk * w;
  if (n && keys.lengths) zero_past_keys<<<blocks_for(n), kThreads, 0, st>>>(x, keys, h, lk, w, n);
}

#define KILN_ATTENTION(T)                                                                          \
  template void launch_attention_softmax<T>(T*, T*, const AttentionRows&, cudaStream_t);          \
  template void launch_attention_probabilities<T>(T*, const T*, const T*, const T*, T*,            \
                                                  const AttentionRows&, std::int64_t, cudaStream_t); \
  template void launch_attention_score_grad<T>(T*, T*, const T*, const AttentionRows&, cudaStream_t); \
  template void launch_attention_mask_grad<T>(const T*, T*, const AttentionRows&, std::int64_t,     \
                                              cudaStream_t);                                       \
  template void launch_zero_past_key_lengths<T>(T*, const KeyLengths&, std::int64_t, std::int64_t, std::int64_t, \
                                                std::int64_t, cudaStream_t);
KILN_ATTENTION(float)
KILN_ATTENTION(double)

}  // namespace kiln::cuda
