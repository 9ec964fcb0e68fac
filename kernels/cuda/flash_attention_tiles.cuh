// Fused scaled-dot-product attention on CUDA, tile by tile through shared
// memory: f32's kernels, and bf16 / f16's where KILN_CUDA_FLASH=wmma or an
// op has a mask (else those dtypes run flash_attention_mma.cuh's
// register tiles); flash_attention.cu launches them. Apart from the 16-bit tensor-core
// products, the kernels also run on the CPU under test/kernel/warp_emulation.h. The scores never
// leave shared memory. Each block owns one (batch·head, tile of rows) pair and walks the
// tiles of the other side, so a head's [Lq, Lk] matrix is never held whole.
//
//   forward     a block per (head, tile of query rows): for each tile of keys,
//               S = Q·Kᵀ, an online softmax (a running max m and sum l per
//               row; the output accumulated so far is rescaled by
//               exp(m_old - m_new)), O += P·V; then out = O / l and
//               lse = m + log l.
//   delta       Δ_i = Σ dout_i ∘ out_i, a warp per row.
//   backward kv a block per (head, tile of keys), looping over the query
//               tiles that see them: P = exp(scale·S - lse) recomputed,
//               dP = dO·Vᵀ, dS = scale · P ∘ (dP - Δ), dV += Pᵀ·dO,
//               dK += dSᵀ·Q.
//   backward q  a block per (head, tile of query rows), looping over the key
//               tiles they see: dQ += dS·K.
// Attention dropout (kiln/kernel/attention_dropout.h, row bh·Lq + i of
// score (i, j) of head bh) multiplies the probabilities that weigh V by Z,
// the keep mask times the inverse keep rate: the forward's P after its running sum
// took them (so l and lse are the softmax's), the gradient's P in dV +=
// (P ∘ Z)ᵀ·dO, and dS = scale · P ∘ (Z ∘ dP - Δ).
// No atomics: each output element is summed by one thread (or one warp's
// fragment) in a fixed order, so results are bit-identical run to run.
//
// The tiles are [R, DH] and [R, R] blocks of shared memory (R = 64 rows, 32
// where DH = 128 would not fit), DH the head dim rounded up to 32, 64 or
// 128 (the columns past D or Dv hold zeros, as do the rows past L). Every
// product is tile_product: shared memory to shared memory, an f32
// accumulator tile. f32 operands multiply on CUDA cores, a thread per output
// element; bf16 / f16 operands on tensor cores (nvcuda::wmma 16×16×16
// fragments, f32 accumulation), with P and dS rounded to the operands'
// dtype for their products. Softmax statistics, Δ and the accumulators are
// f32; out and the gradients are rounded once when stored; lse stays f32
// (a 16-bit lse would scale each row's recomputed probabilities by its
// rounding error, up to a few percent).
//
// Rows are read in place through their strides, either layout: element
// (row r, column c) of head i lies at head_offset(i) + r·row_step + c.
#pragma once

#ifdef __CUDACC__
#include <mma.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "flash_attention_common.cuh"

namespace kiln::cuda::flash {

// ---- shared-memory tiles ----

constexpr std::size_t kSmemAlign = 128;
// The offset after `bytes` placed at `at`, aligned for the next tile.
constexpr std::size_t after(std::size_t at, std::size_t bytes) {
  return (at + bytes + kSmemAlign - 1) / kSmemAlign * kSmemAlign;
}

// Tiles of R rows with head dim DH: operands [R][DH] and probabilities
// [R][R] of E, f32 accumulators [R][DH] and scores [R][R]. Row strides are
// padded against bank conflicts (odd for the f32 CUDA-core products; for
// wmma a multiple of 8 16-bit or 4 f32 elements, as its loads need).
template <typename E, int DH, int R>
struct TileShapes {
  static constexpr bool kF32 = std::is_same_v<E, float>;
  static constexpr int kDim = DH, kRows = R;
  static constexpr int kLdOperand = DH + (kF32 ? 1 : 8), kLdProbs = R + (kF32 ? 1 : 8);
  static constexpr int kLdAcc = DH + (kF32 ? 1 : 4), kLdScores = R + (kF32 ? 1 : 4);
  static constexpr std::size_t kOperandBytes = sizeof(E) * R * kLdOperand,
                               kProbsBytes = sizeof(E) * R * kLdProbs,
                               kAccBytes = sizeof(float) * R * kLdAcc,
                               kScoresBytes = sizeof(float) * R * kLdScores,
                               kRowBytes = sizeof(float) * R;
};

// The forward's tiles: q, k, v, the scores, the probabilities, the output
// accumulator and each row's running max and sum (byte offsets).
template <typename E, int DH>
struct ForwardLayout : TileShapes<E, DH, (std::is_same_v<E, float> && DH == 128) ? 32 : 64> {
  using T = TileShapes<E, DH, (std::is_same_v<E, float> && DH == 128) ? 32 : 64>;
  static constexpr std::size_t q = 0, k = after(q, T::kOperandBytes), v = after(k, T::kOperandBytes),
                               scores = after(v, T::kOperandBytes),
                               probs = after(scores, T::kScoresBytes),
                               acc = after(probs, T::kProbsBytes),
                               row_max = after(acc, T::kAccBytes),
                               row_sum = after(row_max, T::kRowBytes),
                               bytes = after(row_sum, T::kRowBytes);
};

// The gradient kernels' tiles: q, dout, k, v, the scores and dP, P (the
// key-tile kernel only) and dS, one accumulator (dQ or dK) or two (dK, dV),
// each query row's lse and Δ.
template <typename E, int DH, bool kKeyTile>
struct BackwardLayout : TileShapes<E, DH, DH == 128 ? 32 : 64> {
  using T = TileShapes<E, DH, DH == 128 ? 32 : 64>;
  static constexpr std::size_t q = 0, dout = after(q, T::kOperandBytes),
                               k = after(dout, T::kOperandBytes), v = after(k, T::kOperandBytes),
                               scores = after(v, T::kOperandBytes),
                               dprobs = after(scores, T::kScoresBytes),
                               probs = after(dprobs, T::kScoresBytes),
                               dscores = after(probs, kKeyTile ? T::kProbsBytes : 0),
                               acc = after(dscores, T::kProbsBytes),
                               acc2 = after(acc, T::kAccBytes),
                               lse = after(acc2, kKeyTile ? T::kAccBytes : 0),
                               delta = after(lse, T::kRowBytes),
                               bytes = after(delta, T::kRowBytes);
};

template <typename X>
__device__ X* tile_at(unsigned char* smem, std::size_t offset) {
  return reinterpret_cast<X*>(smem + offset);
}

// Rows [row0, row0 + R) of one head of x (`rows` rows of `width` columns,
// `step` elements apart) into t ([R][ld], DH columns); zeros past either end.
template <int R, int DH, typename E>
__device__ void load_rows(E* t, int ld, const Global<E>* x, std::int64_t row0, std::int64_t rows,
                          std::int64_t width, std::int64_t step) {
  for (int e = threadIdx.x; e < R * DH; e += kFlashThreads) {
    const int r = e / DH, c = e % DH;
    const std::int64_t row = row0 + r;
    t[r * ld + c] = row < rows && c < width ? load_elem<E>(x + row * step + c) : narrow<E>(0.f);
  }
}
// The other way: t's rows that exist (< rows) and columns < width into x.
template <int R, int DH, typename E>
__device__ void store_rows(Global<E>* x, const float* t, int ld, std::int64_t row0,
                           std::int64_t rows, std::int64_t width, std::int64_t step) {
  for (int e = threadIdx.x; e < R * DH; e += kFlashThreads) {
    const int r = e / DH, c = e % DH;
    const std::int64_t row = row0 + r;
    if (row < rows && c < width) store_elem<E>(x + row * step + c, t[r * ld + c]);
  }
}
template <int R, int DH>
__device__ void zero_tile(float* t, int ld) {
  for (int e = threadIdx.x; e < R * DH; e += kFlashThreads) t[(e / DH) * ld + e % DH] = 0.f;
}

// c (f32 [M][ldc]) = (accumulate ? c : 0) + op(a) · op(b), op(a) M×K and
// op(b) K×N: a is [M][lda], or [K][lda] holding op(a)ᵀ when a_t; b is
// [K][ldb], or [N][ldb] holding op(b)ᵀ when b_t. The whole block calls it;
// each output element is one thread's (f32) or one warp's fragment's (16-bit).
template <int M, int N, int K, bool a_t, bool b_t, typename E>
__device__ void tile_product(const E* a, int lda, const E* b, int ldb, float* c, int ldc,
                             bool accumulate) {
  if constexpr (std::is_same_v<E, float>) {
    for (int e = threadIdx.x; e < M * N; e += kFlashThreads) {
      const int m = e / N, n = e % N;
      float sum = accumulate ? c[m * ldc + n] : 0.f;
#pragma unroll 8
      for (int k = 0; k < K; ++k)
        sum += a[a_t ? k * lda + m : m * lda + k] * b[b_t ? n * ldb + k : k * ldb + n];
      c[m * ldc + n] = sum;
    }
  } else {
#if !defined(__CUDACC__)
    static_assert(std::is_same_v<E, float>, "the CPU's warp emulation runs the f32 tiles only");
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // bf16 fragments need sm_80; kiln builds for sm_90
#else
    using namespace nvcuda;
    using ALayout = std::conditional_t<a_t, wmma::col_major, wmma::row_major>;
    using BLayout = std::conditional_t<b_t, wmma::col_major, wmma::row_major>;
    constexpr int kTilesN = N / 16;
    static_assert(M % 16 == 0 && N % 16 == 0 && K % 16 == 0);
    for (int f = threadIdx.x / 32; f < (M / 16) * kTilesN; f += kFlashWarps) {
      const int tm = f / kTilesN, tn = f % kTilesN;
      float* cf = c + tm * 16 * ldc + tn * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      if (accumulate) wmma::load_matrix_sync(acc, cf, ldc, wmma::mem_row_major);
      else wmma::fill_fragment(acc, 0.f);
      for (int tk = 0; tk < K / 16; ++tk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, E, ALayout> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, E, BLayout> fb;
        wmma::load_matrix_sync(fa, a + (a_t ? tk * 16 * lda + tm * 16 : tm * 16 * lda + tk * 16), lda);
        wmma::load_matrix_sync(fb, b + (b_t ? tn * 16 * ldb + tk * 16 : tk * 16 * ldb + tn * 16), ldb);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(cf, acc, ldc, wmma::mem_row_major);
    }
#endif
  }
}

// ---- forward ----

// One key tile (keys j0..) of the online softmax, a warp per query row (q0
// + r, of head bh with `keys` keys): the row's scores scaled and masked,
// its running max and sum moved on, probs = exp(score - max) (0 for a -inf
// score; then dropped out under drop, after the sum took them), and the
// output accumulated so far rescaled to the new max.
template <typename L, typename E>
__device__ void tile_softmax(const FlashAttentionShape& s, const AttentionDropout& drop, std::int64_t bh,
                             std::int64_t keys, std::int64_t q0, std::int64_t j0, const float* scores, E* probs,
                             float* acc, float* row_max, float* row_sum) {
  constexpr int kPerLane = L::kRows / 32;
  const int lane = threadIdx.x % 32;
  const float keep_scale = static_cast<float>(drop.scale);
  for (int r = threadIdx.x / 32; r < L::kRows; r += kFlashWarps) {
    const std::int64_t seen = keys_seen(s.causal, keys, q0 + r) - j0;  // columns [0, seen) are seen
    const bool row = q0 + r < s.lq;  // a row past Lq reads no mask (nor is it stored)
    float x[kPerLane];
    float tile_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int col = lane + 32 * t;
      const float scaled = scores[r * L::kLdScores + col] * s.scale;
      x[t] = col >= seen ? -INFINITY : row ? masked_score<E>(s, bh, q0 + r, j0 + col, scaled) : scaled;
      tile_max = fmaxf(tile_max, x[t]);
    }
    const float old_max = row_max[r];
    const float new_max = fmaxf(old_max, warp_max(tile_max));
    const float base = new_max == -INFINITY ? 0.f : new_max;  // nothing seen yet: all exp 0
    float sum = 0;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const float p = x[t] == -INFINITY ? 0.f : expf(x[t] - base);
      const bool kept = !drop.active() || drop.keep(bh * s.lq + q0 + r, j0 + lane + 32 * t);
      probs[r * L::kLdProbs + lane + 32 * t] = narrow<E>(!kept ? 0.f : drop.active() ? p * keep_scale : p);
      sum += p;
    }
    sum = warp_sum(sum);
    const float rescale = expf(old_max - base);
    for (int col = lane; col < L::kDim; col += 32) acc[r * L::kLdAcc + col] *= rescale;
    __syncwarp();
    if (lane == 0) {
      row_max[r] = new_max;
      row_sum[r] = row_sum[r] * rescale + sum;
    }
  }
}

// Block (head blockIdx.x, query rows blockIdx.y · R ..).
template <typename E, int DH>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward(FlashAttentionShape s, DropoutRef dropout, const Global<E>* q, const Global<E>* k,
                  const Global<E>* v, Global<E>* out, float* lse) {
  using L = ForwardLayout<E, DH>;
  constexpr int R = L::kRows;
  extern __shared__ __align__(128) unsigned char smem[];
  E *qt = tile_at<E>(smem, L::q), *kt = tile_at<E>(smem, L::k), *vt = tile_at<E>(smem, L::v),
    *probs = tile_at<E>(smem, L::probs);
  float *scores = tile_at<float>(smem, L::scores), *acc = tile_at<float>(smem, L::acc),
        *row_max = tile_at<float>(smem, L::row_max), *row_sum = tile_at<float>(smem, L::row_sum);
  const std::int64_t bh = blockIdx.x, q0 = static_cast<std::int64_t>(blockIdx.y) * R;
  const std::int64_t k_step = kv_row_step(s, s.d), v_step = kv_row_step(s, s.dv);
  const Global<E>* kh = k + kv_head_offset(s, bh, s.lk, s.d);
  const Global<E>* vh = v + kv_head_offset(s, bh, s.lk, s.dv);
  load_rows<R, DH>(qt, L::kLdOperand, q + head_offset(s, bh, s.lq, s.d), q0, s.lq, s.d, row_step(s, s.d));
  zero_tile<R, DH>(acc, L::kLdAcc);
  for (int r = threadIdx.x; r < R; r += kFlashThreads) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
  }
  const std::int64_t keys = head_keys(s, bh);
  const std::int64_t key_end = s.causal ? std::min<std::int64_t>(keys, q0 + R) : keys;
  const AttentionDropout drop = dropout_rule(dropout);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += R) {
    __syncthreads();  // the last tile's products are done with kt, vt, probs
    load_rows<R, DH>(kt, L::kLdOperand, kh, j0, keys, s.d, k_step);  // zeros for the padding
    load_rows<R, DH>(vt, L::kLdOperand, vh, j0, keys, s.dv, v_step);
    __syncthreads();
    tile_product<R, R, DH, false, true>(qt, L::kLdOperand, kt, L::kLdOperand, scores, L::kLdScores,
                                        false);
    __syncthreads();
    tile_softmax<L>(s, drop, bh, keys, q0, j0, scores, probs, acc, row_max, row_sum);
    __syncthreads();
    tile_product<R, DH, R, false, false>(probs, L::kLdProbs, vt, L::kLdOperand, acc, L::kLdAcc,
                                         true);
  }
  __syncthreads();
  Global<E>* oh = out + head_offset(s, bh, s.lq, s.dv);
  const std::int64_t out_step = row_step(s, s.dv);
  for (int e = threadIdx.x; e < R * DH; e += kFlashThreads) {
    const int r = e / DH, c = e % DH;
    if (q0 + r < s.lq && c < s.dv)  // a row that saw no key: an empty sum, 0 (a NaN row stays NaN)
      store_elem<E>(oh + (q0 + r) * out_step + c, row_max[r] == -INFINITY ? 0.f : acc[r * L::kLdAcc + c] / row_sum[r]);
  }
  for (int r = threadIdx.x; r < R; r += kFlashThreads)
    if (q0 + r < s.lq) lse[bh * s.lq + q0 + r] = row_max[r] + logf(row_sum[r]);
}

// ---- backward ----

// delta[row] = Σ dout ∘ out over row `row` (= head·Lq + i) of all heads' rows.
template <typename E>
__global__ void flash_delta(FlashAttentionShape s, const Global<E>* out, const Global<E>* dout,
                            float* delta) {
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * kFlashWarps + threadIdx.x / 32;
  if (row >= s.bh * s.lq) return;  // the whole warp
  const std::int64_t at = head_offset(s, row / s.lq, s.lq, s.dv) + (row % s.lq) * row_step(s, s.dv);
  const int lane = threadIdx.x % 32;
  float sum = 0;
  for (std::int64_t c = lane; c < s.dv; c += 32)
    sum += widen(load_elem<E>(out + at + c)) * widen(load_elem<E>(dout + at + c));
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

// Query rows i0.. of head bh: q and dout into their tiles, lse and Δ per
// row (0 past Lq).
template <typename L, typename E>
__device__ void load_query_tile(const FlashAttentionShape& s, std::int64_t bh, std::int64_t i0,
                                const Global<E>* q, const Global<E>* dout, const float* lse,
                                const float* delta, E* qt, E* dout_t, float* lse_t,
                                float* delta_t) {
  load_rows<L::kRows, L::kDim>(qt, L::kLdOperand, q + head_offset(s, bh, s.lq, s.d), i0, s.lq,
                               s.d, row_step(s, s.d));
  load_rows<L::kRows, L::kDim>(dout_t, L::kLdOperand, dout + head_offset(s, bh, s.lq, s.dv), i0,
                               s.lq, s.dv, row_step(s, s.dv));
  for (int r = threadIdx.x; r < L::kRows; r += kFlashThreads) {
    const std::int64_t i = i0 + r;
    lse_t[r] = i < s.lq ? lse[bh * s.lq + i] : 0.f;
    delta_t[r] = i < s.lq ? delta[bh * s.lq + i] : 0.f;
  }
}

// Query rows i0.. against keys j0.. of head bh with `keys` keys: P =
// exp(scale · S [+ mask] - lse) where the row sees the key (0 elsewhere, on
// rows past Lq and for a masked -inf score, also in a row without keys,
// whose lse is -inf), P ∘ Z into probs unless null, and dS = scale · P ∘
// (Z ∘ dP - Δ) into dscores, Z being drop's keep mask times its scale (1
// without dropout; under it a thread takes a row's four keys of one
// random word).
template <typename L, typename E>
__device__ void score_grads(const FlashAttentionShape& s, const AttentionDropout& drop, std::int64_t bh,
                            std::int64_t keys, std::int64_t i0, std::int64_t j0, const float* scores,
                            const float* dprobs, const float* lse_t, const float* delta_t, E* probs, E* dscores) {
  constexpr int R = L::kRows;
  const auto grad = [&](int r, int c, float z) {
    const std::int64_t i = i0 + r;
    const bool seen = i < s.lq && j0 + c < keys_seen(s.causal, keys, i);
    const float x = seen ? masked_score<E>(s, bh, i, j0 + c, scores[r * L::kLdScores + c] * s.scale) : -INFINITY;
    const float p = x == -INFINITY ? 0.f : expf(x - lse_t[r]);
    if (probs) probs[r * L::kLdProbs + c] = narrow<E>(p * z);
    dscores[r * L::kLdProbs + c] = narrow<E>(s.scale * p * (z * dprobs[r * L::kLdScores + c] - delta_t[r]));
  };
  if (!drop.active()) {
    for (int e = threadIdx.x; e < R * R; e += kFlashThreads) grad(e / R, e % R, 1.f);
    return;
  }
  const float keep_scale = static_cast<float>(drop.scale);
  for (int e = threadIdx.x; e < R * R / 4; e += kFlashThreads) {
    const int r = e / (R / 4), c = e % (R / 4) * 4;  // j0 + c: a multiple of 4
    const std::uint64_t bits = drop.word(bh * s.lq + i0 + r, (j0 + c) / 4);
    for (int u = 0; u < 4; ++u) grad(r, c + u, drop.keeps(bits, j0 + c + u) ? keep_scale : 0.f);
  }
}

// Block (head blockIdx.x, keys blockIdx.y · R ..): dK and dV of those keys.
template <typename E, int DH>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_kv(FlashAttentionShape s, DropoutRef dropout, const Global<E>* q, const Global<E>* k,
                      const Global<E>* v, const float* lse, const Global<E>* dout,
                      const float* delta, Global<E>* dk, Global<E>* dv) {
  using L = BackwardLayout<E, DH, true>;
  constexpr int R = L::kRows;
  extern __shared__ __align__(128) unsigned char smem[];
  E *qt = tile_at<E>(smem, L::q), *dout_t = tile_at<E>(smem, L::dout), *kt = tile_at<E>(smem, L::k),
    *vt = tile_at<E>(smem, L::v), *probs = tile_at<E>(smem, L::probs),
    *dscores = tile_at<E>(smem, L::dscores);
  float *scores = tile_at<float>(smem, L::scores), *dprobs = tile_at<float>(smem, L::dprobs),
        *dk_acc = tile_at<float>(smem, L::acc), *dv_acc = tile_at<float>(smem, L::acc2),
        *lse_t = tile_at<float>(smem, L::lse), *delta_t = tile_at<float>(smem, L::delta);
  const std::int64_t bh = blockIdx.x, j0 = static_cast<std::int64_t>(blockIdx.y) * R;
  const std::int64_t keys = head_keys(s, bh);  // zeros for the padding
  load_rows<R, DH>(kt, L::kLdOperand, k + kv_head_offset(s, bh, s.lk, s.d), j0, keys, s.d, kv_row_step(s, s.d));
  load_rows<R, DH>(vt, L::kLdOperand, v + kv_head_offset(s, bh, s.lk, s.dv), j0, keys, s.dv,
                   kv_row_step(s, s.dv));
  zero_tile<R, DH>(dk_acc, L::kLdAcc);
  zero_tile<R, DH>(dv_acc, L::kLdAcc);
  const AttentionDropout drop = dropout_rule(dropout);
  // Causal: rows before j0 see none of these keys; keys past the head's
  // key count none see.
  for (std::int64_t i0 = j0 >= keys ? s.lq : s.causal ? j0 : 0; i0 < s.lq; i0 += R) {
    __syncthreads();  // the last tile's products are done with the query tiles
    load_query_tile<L>(s, bh, i0, q, dout, lse, delta, qt, dout_t, lse_t, delta_t);
    __syncthreads();
    tile_product<R, R, DH, false, true>(qt, L::kLdOperand, kt, L::kLdOperand, scores, L::kLdScores,
                                        false);
    tile_product<R, R, DH, false, true>(dout_t, L::kLdOperand, vt, L::kLdOperand, dprobs,
                                        L::kLdScores, false);
    __syncthreads();
    score_grads<L>(s, drop, bh, keys, i0, j0, scores, dprobs, lse_t, delta_t, probs, dscores);
    __syncthreads();
    tile_product<R, DH, R, true, false>(probs, L::kLdProbs, dout_t, L::kLdOperand, dv_acc,
                                        L::kLdAcc, true);
    tile_product<R, DH, R, true, false>(dscores, L::kLdProbs, qt, L::kLdOperand, dk_acc,
                                        L::kLdAcc, true);
  }
  __syncthreads();
  // dk, dv: query-head-shaped (each query head's share, summed per group
  // afterwards under grouped-query attention).
  store_rows<R, DH, E>(dk + head_offset(s, bh, s.lk, s.d), dk_acc, L::kLdAcc, j0, s.lk, s.d,
                       row_step(s, s.d));
  store_rows<R, DH, E>(dv + head_offset(s, bh, s.lk, s.dv), dv_acc, L::kLdAcc, j0, s.lk, s.dv,
                       row_step(s, s.dv));
}

// Block (head blockIdx.x, query rows blockIdx.y · R ..): dQ of those rows.
template <typename E, int DH>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_q(FlashAttentionShape s, DropoutRef dropout, const Global<E>* q, const Global<E>* k,
                     const Global<E>* v, const float* lse, const Global<E>* dout,
                     const float* delta, Global<E>* dq) {
  using L = BackwardLayout<E, DH, false>;
  constexpr int R = L::kRows;
  extern __shared__ __align__(128) unsigned char smem[];
  E *qt = tile_at<E>(smem, L::q), *dout_t = tile_at<E>(smem, L::dout), *kt = tile_at<E>(smem, L::k),
    *vt = tile_at<E>(smem, L::v), *dscores = tile_at<E>(smem, L::dscores);
  float *scores = tile_at<float>(smem, L::scores), *dprobs = tile_at<float>(smem, L::dprobs),
        *dq_acc = tile_at<float>(smem, L::acc), *lse_t = tile_at<float>(smem, L::lse),
        *delta_t = tile_at<float>(smem, L::delta);
  const std::int64_t bh = blockIdx.x, i0 = static_cast<std::int64_t>(blockIdx.y) * R;
  const std::int64_t k_step = kv_row_step(s, s.d), v_step = kv_row_step(s, s.dv);
  const Global<E>* kh = k + kv_head_offset(s, bh, s.lk, s.d);
  const Global<E>* vh = v + kv_head_offset(s, bh, s.lk, s.dv);
  load_query_tile<L>(s, bh, i0, q, dout, lse, delta, qt, dout_t, lse_t, delta_t);
  zero_tile<R, DH>(dq_acc, L::kLdAcc);
  const std::int64_t keys = head_keys(s, bh);
  const std::int64_t key_end = s.causal ? std::min<std::int64_t>(keys, i0 + R) : keys;
  const AttentionDropout drop = dropout_rule(dropout);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += R) {
    __syncthreads();  // the last tile's product is done with kt
    load_rows<R, DH>(kt, L::kLdOperand, kh, j0, keys, s.d, k_step);  // zeros for the padding
    load_rows<R, DH>(vt, L::kLdOperand, vh, j0, keys, s.dv, v_step);
    __syncthreads();
    tile_product<R, R, DH, false, true>(qt, L::kLdOperand, kt, L::kLdOperand, scores, L::kLdScores,
                                        false);
    tile_product<R, R, DH, false, true>(dout_t, L::kLdOperand, vt, L::kLdOperand, dprobs,
                                        L::kLdScores, false);
    __syncthreads();
    score_grads<L>(s, drop, bh, keys, i0, j0, scores, dprobs, lse_t, delta_t, static_cast<E*>(nullptr), dscores);
    __syncthreads();
    tile_product<R, DH, R, false, false>(dscores, L::kLdProbs, kt, L::kLdOperand, dq_acc,
                                         L::kLdAcc, true);
  }
  __syncthreads();
  store_rows<R, DH, E>(dq + head_offset(s, bh, s.lq, s.d), dq_acc, L::kLdAcc, i0, s.lq, s.d,
                       row_step(s, s.d));
}

}  // namespace kiln::cuda::flash
