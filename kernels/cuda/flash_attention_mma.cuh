// The kernels of fused scaled-dot-product attention for bf16 and f16 with
// the tiles in registers (FlashAttention-2's scheme), on the tensor cores' warp-level
// mma.sync m16n8k16 (f32 accumulation). flash_attention.cu's shared-memory
// kernels compute the same quantities tile by tile through shared memory
// (and remain f32's kernels, and 16-bit's under KILN_CUDA_FLASH=wmma).
//
// A block is 4 warps; each warp owns 16 rows of its side and keeps their
// operand, score and accumulator fragments in registers, so the only
// shared-memory traffic is the other side's tiles, read once per product:
//
//   forward     a block per (head, 64 query rows); per tile of 64 keys,
//               S = Q·Kᵀ into registers, the online softmax on them (running
//               max and sum per row, in log2 units), P rounded to the operand
//               dtype and fed back as the A fragments of O += P·V (the
//               accumulator layout of two 16×8 tiles is the A layout of one
//               16×16 one).
//   backward kv a block per (head, 64 keys), a warp per 16 keys; per tile of
//               query rows (64, or 32 at head dim 128), Sᵀ = K·Qᵀ and
//               dPᵀ = V·dOᵀ, Pᵀ = exp(scale·Sᵀ - lse) and
//               dSᵀ = scale · Pᵀ ∘ (dPᵀ - Δ), then dV += Pᵀ·dO, dK += dSᵀ·Q.
//   backward q  a block per (head, 64 query rows); per tile of 64 keys,
//               S, dP, P and dS as above, dQ += dS·K.
// Δ comes from flash_attention.cu's kernel. Each output element is one
// thread's accumulator, summed in a fixed order, so results are bit-identical
// run to run; only where the attention gradient's sums are asked to be
// atomic (AttentionGradSum::Atomic) does the kv kernel also add its share of
// dQ into an f32 buffer by atomic adds (not bit-identical), and the q
// kernel is not run.
//
// Attention dropout (kDropout, a DropoutRef beside the shape; the atomic
// kv kernel has none): the forward multiplies P by the keep mask and its
// scale Z after the online softmax's sums (lse stays the softmax's), the
// backward uses P ∘ Z for dV and dS = scale · P ∘ (Z ∘ dP - Δ). A lane's
// keys 2t and 2t + 1 (of one 4-key group) share one draw in the forward and
// the q kernel (kiln/kernel/attention_dropout.h); the kv kernel's lanes
// hold other rows' keys and draw per score.
//
// Fragments (PTX ISA, mma.m16n8k16 with .bf16 / .f16 operands): lane l, g =
// l / 4, t = l % 4. A (16×16, row-major) registers: (g, 2t..2t+1),
// (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..), the lower column in the low half.
// B (16×8, k × n) registers: (k 2t..2t+1, n g), (k 2t+8.., n g).
// C / D (16×8 f32): (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
// A and B fragments of a matrix stored row by row along k come from
// ldmatrix (.x4: an A fragment, or two B fragments); B fragments of a
// matrix stored row by row along n (V in P·V, dO, Q and K in the
// backward's products) from ldmatrix .x4 .trans, two at a time. The forward keeps its warp's
// Q fragments in registers for all key tiles.
//
// The warp-level instructions (mma, ldmatrix, cp.async) come from
// warp_mma.cuh, which an includer puts first: flash_attention_mma.cu, or a
// test's CPU emulation of them.
//
// Shared-memory rows are DH + 8 elements (a multiple of 16 bytes, and the
// 16 bytes ldmatrix reads from each of 8 consecutive rows fall in distinct
// banks). Columns past D or
// Dv and rows past L hold zeros. Global rows are read 16 bytes at a time
// where every operand allows it (aligned, D and Dv multiples of 8), else
// element by element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "flash_attention_common.cuh"

namespace kiln::cuda::flash {

constexpr int kMmaThreads = 128, kWarpRows = 16, kBlockRows = kMmaThreads / 32 * kWarpRows;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <int DH>
constexpr int kLd = DH + 8;
// The backward kv kernel's query rows per tile (registers: dK and dV
// accumulators at DH = 128 take 128 per thread).
template <int DH>
constexpr int kKvQueryRows = DH == 128 ? 32 : 64;

// lo and hi rounded to E, lo in the low half.
template <typename E>
__device__ std::uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<E, __half>)
    return __half_as_ushort(__float2half_rn(lo)) |
           static_cast<std::uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16;
  else
    return __bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           static_cast<std::uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16;
}

// The A fragment of rows [0, 16) and columns [k0, k0 + 16) of a row-major
// tile (ld elements a row): one ldmatrix of its four 8×8 quarters, lanes
// 0–15 giving rows 0–15 at k0 and lanes 16–31 the same rows at k0 + 8.
template <typename E>
__device__ void load_a(std::uint32_t (&a)[4], const E* tile, int ld, int k0) {
  const int l = threadIdx.x % 32;
  load_matrix_x4(a, tile + (l % 16) * ld + k0 + l / 16 * 8);
}
// The B fragments (k in [k0, k0 + 16), n in [n0, n0 + 8) in b[0], b[1] and
// n in [n0 + 8, n0 + 16) in b[2], b[3]) of B = Mᵀ, M the row-major tile
// (rows n, columns k): one ldmatrix, lanes 0–15 giving rows n0.. at k0 and
// k0 + 8, lanes 16–31 rows n0 + 8.. likewise.
template <typename E>
__device__ void load_b_rows(std::uint32_t (&b)[4], const E* tile, int ld, int n0, int k0) {
  const int l = threadIdx.x % 32;
  load_matrix_x4(b, tile + (n0 + l / 16 * 8 + l % 8) * ld + k0 + l / 8 % 2 * 8);
}
// The B fragments (k in [k0, k0 + 16), n in [n0, n0 + 8) in b[0], b[1] and
// n in [n0 + 8, n0 + 16) in b[2], b[3]) of B = M itself, M the row-major
// tile (rows k, columns n): one transposing ldmatrix, lanes 0–15 giving
// rows k0..k0 + 15 at n0 and lanes 16–31 the same rows at n0 + 8.
template <typename E>
__device__ void load_b_cols(std::uint32_t (&b)[4], const E* tile, int ld, int k0, int n0) {
  const int l = threadIdx.x % 32;
  load_matrix_x4_trans(b, tile + (k0 + l % 16) * ld + n0 + l / 16 * 8);
}

// Starts copying rows [row0, row0 + R) of one head of x (`rows` rows of
// `width` columns, `step` elements apart) into t ([R][kLd<DH>]); zeros past
// either end. vec (x, width and step allow 16-byte copies): asynchronous,
// landed after the group's wait_copies; else element by element, done on
// return. Either way visible to the block after a __syncthreads.
template <int R, int DH, typename E>
__device__ void start_tile(E* t, const Global<E>* x, std::int64_t row0, std::int64_t rows,
                           std::int64_t width, std::int64_t step, bool vec) {
  constexpr int ld = kLd<DH>;
  if (vec) {
    constexpr int kChunks = DH / 8;
    for (int e = threadIdx.x; e < R * kChunks; e += kMmaThreads) {
      const int r = e / kChunks, c = e % kChunks * 8;
      const std::int64_t row = row0 + r;
      const bool valid = row < rows && c < width;
      copy_async16(t + r * ld + c, valid ? x + row * step + c : x, valid);
    }
    return;
  }
  for (int e = threadIdx.x; e < R * DH; e += kMmaThreads) {
    const int r = e / DH, c = e % DH;
    const std::int64_t row = row0 + r;
    t[r * ld + c] = row < rows && c < width ? load_elem<E>(x + row * step + c) : narrow<E>(0.f);
  }
}

// Starts copying keys [j0, j0 + 64) of one head's k and v (kh, vh) into
// stage `stage` of kv_tiles (k at tile 2·stage, v at 2·stage + 1, each
// [64][kLd<DH>]): start_tile's rules, the head's `keys` its rows (zeros
// for the padding past them, never read).
template <int DH, typename E>
__device__ void start_key_tiles(E* kv_tiles, int stage, const FlashAttentionShape& s, const Global<E>* kh,
                                const Global<E>* vh, std::int64_t keys, std::int64_t j0, bool vec) {
  constexpr int R = kBlockRows, ld = kLd<DH>;
  start_tile<R, DH>(kv_tiles + 2 * stage * R * ld, kh, j0, keys, s.d, kv_row_step(s, s.d), vec);
  start_tile<R, DH>(kv_tiles + (2 * stage + 1) * R * ld, vh, j0, keys, s.dv, kv_row_step(s, s.dv), vec);
}

// A warp's [16, DH] f32 accumulator (fragments acc[DH / 8]) into rows
// row0 + [0, 16) of x (those < rows, columns < width), each scaled by
// row_scale (rows g and g + 8); rows from zero_from on get zeros.
template <int DH, typename E>
__device__ void store_acc(Global<E>* x, const float (&acc)[DH / 8][4], std::int64_t row0,
                          std::int64_t rows, std::int64_t width, std::int64_t step,
                          const float (&row_scale)[2], std::int64_t zero_from = INT64_MAX) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int nb = 0; nb < DH / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::int64_t row = row0 + g + (e / 2) * 8;
      const int col = nb * 8 + 2 * t + e % 2;
      if (row < rows && col < width)
        store_elem<E>(x + row * step + col, row < zero_from ? acc[nb][e] * row_scale[e / 2] : 0.f);
    }
}

// acc (a warp's [16, N] scores) += A·Bᵀ over columns [ks·16, ks·16 + 16):
// af A's fragment there, B the rows [0, N) of a row-major tile.
template <int N, int DH, typename E>
__device__ void scores_step(float (&acc)[N / 8][4], const std::uint32_t (&af)[4], const E* b, int ks) {
#pragma unroll
  for (int nb = 0; nb < N / 8; nb += 2) {
    std::uint32_t bf[4];
    load_b_rows(bf, b, kLd<DH>, nb * 8, ks * 16);
    mma<E>(acc[nb], af, bf[0], bf[1]);
    mma<E>(acc[nb + 1], af, bf[2], bf[3]);
  }
}
template <int N>
__device__ void zero(float (&acc)[N / 8][4]) {
#pragma unroll
  for (int nb = 0; nb < N / 8; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.f;
}

// acc (a warp's [16, N] scores) = A·Bᵀ over DH: A the warp's 16 rows of a
// row-major tile, B the rows [0, N) of another.
template <int N, int DH, typename E>
__device__ void scores_of(float (&acc)[N / 8][4], const E* a, const E* b) {
  zero<N>(acc);
#pragma unroll
  for (int ks = 0; ks < DH / 16; ++ks) {
    std::uint32_t af[4];
    load_a(af, a, kLd<DH>, ks * 16);
    scores_step<N, DH>(acc, af, b, ks);
  }
}
// The same with A's fragments held in registers (a[ks] for columns ks·16..).
template <int N, int DH, typename E>
__device__ void scores_of(float (&acc)[N / 8][4], const std::uint32_t (&a)[DH / 16][4], const E* b) {
  zero<N>(acc);
#pragma unroll
  for (int ks = 0; ks < DH / 16; ++ks) scores_step<N, DH>(acc, a[ks], b, ks);
}

// acc ([16, N]) += A·M over M's rows [k0, k0 + 16): af A's fragment there,
// M a row-major tile (ld elements a row) read from column n0 on.
template <int N, typename E>
__device__ void product_step(float (&acc)[N / 8][4], const std::uint32_t (&af)[4], const E* m, int ld, int k0,
                             int n0) {
#pragma unroll
  for (int nb = 0; nb < N / 8; nb += 2) {
    std::uint32_t bf[4];
    load_b_cols(bf, m, ld, k0, n0 + nb * 8);
    mma<E>(acc[nb], af, bf[0], bf[1]);
    mma<E>(acc[nb + 1], af, bf[2], bf[3]);
  }
}

// acc ([16, DH]) += P·M: P the warp's [16, K] f32 fragments rounded to E as
// A fragments, M rows [0, K) of a row-major [K][kLd<DH>] tile.
template <int K, int DH, typename E>
__device__ void accumulate_product(float (&acc)[DH / 8][4], const float (&p)[K / 8][4], const E* m) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const std::uint32_t pa[4] = {pack<E>(p[2 * kk][0], p[2 * kk][1]), pack<E>(p[2 * kk][2], p[2 * kk][3]),
                                 pack<E>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                 pack<E>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
    product_step<DH>(acc, pa, m, kLd<DH>, kk * 16, 0);
  }
}

// The max (sum) over a row's 4 lanes (t = 0..3): every lane gets it.
inline __device__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
inline __device__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// How many of the 64 keys from j0 on a row that sees `seen` keys sees.
inline __device__ int seen_in_tile(std::int64_t seen, std::int64_t j0) {
  return static_cast<int>(seen <= j0 ? 0 : seen - j0 < kBlockRows ? seen - j0 : kBlockRows);
}

// One key tile's online softmax on a warp's scores sc (rows g, g + 8 of
// the warp, which see the tile's first `seen` columns): scaled to log2
// units and masked, the running max m moved on, sc = exp2(sc - m), the
// partial sums l and the output accumulator o rescaled to the new max,
// l += this tile's sums. kMasked false: every row sees the whole tile (no
// comparisons; the causal diagonal's tile and a tile past Lk mask).
template <int DH, bool kMasked>
__device__ void online_softmax(float (&sc)[kBlockRows / 8][4], float (&o)[DH / 8][4], float (&m)[2],
                               float (&l)[2], const int (&seen)[2], float scale_log2) {
  const int t = threadIdx.x % 4;
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int nb = 0; nb < kBlockRows / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      sc[nb][e] = !kMasked || nb * 8 + 2 * t + e % 2 < seen[e / 2] ? sc[nb][e] * scale_log2 : -INFINITY;
      mx[e / 2] = fmaxf(mx[e / 2], sc[nb][e]);
    }
  float base[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = quad_max(mx[i]);
    base[i] = mx[i] == -INFINITY ? 0.f : mx[i];  // nothing seen yet: every exp 0
    const float rescale = exp2f(m[i] - base[i]);
    m[i] = mx[i];
    l[i] *= rescale;
#pragma unroll
    for (int nb = 0; nb < DH / 8; ++nb) {
      o[nb][2 * i] *= rescale;
      o[nb][2 * i + 1] *= rescale;
    }
  }
#pragma unroll
  for (int nb = 0; nb < kBlockRows / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      sc[nb][e] = exp2f(sc[nb][e] - base[e / 2]);
      l[e / 2] += sc[nb][e];
    }
}

// The forward's shared memory: q [64] rows of DH, then k and v [64] rows
// twice (the tile in use and the next one landing).
template <typename E, int DH>
constexpr std::size_t kForwardBytes = sizeof(E) * 5 * kBlockRows * kLd<DH>;

// The query tile of block row blockIdx.y: the last first, so that under a
// causal mask the blocks with the most keys to see start first.
inline __device__ std::int64_t query_tile_start() {
  return static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * kBlockRows;
}

// f(nb, e, z) for each element e of each fragment nb of a warp's [16, N]
// scores from key j0 on (rows `row` and row + 8 of the dropout's rows), z
// the keep mask times its scale: keys 2t and 2t + 1 of each 8 share a draw.
template <int N, typename F>
__device__ void for_each_keep(const AttentionDropout& drop, std::int64_t row, std::int64_t j0, F&& f) {
  const int t = threadIdx.x % 4;
  const float scale = static_cast<float>(drop.scale);
#pragma unroll
  for (int nb = 0; nb < N / 8; ++nb)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const std::int64_t j = j0 + nb * 8 + 2 * t;
      const std::uint64_t bits = drop.word(row + 8 * i, j >> 2);
      f(nb, 2 * i, drop.keeps(bits, j) ? scale : 0.f);
      f(nb, 2 * i + 1, drop.keeps(bits, j + 1) ? scale : 0.f);
    }
}

// Block (head blockIdx.x, query rows query_tile_start() ..).
template <typename E, int DH, bool kDropout = false>
__global__ void __launch_bounds__(kMmaThreads)
    mma_forward(FlashAttentionShape s, DropoutRef dropout, bool vec, const Global<E>* q, const Global<E>* k,
                const Global<E>* v, Global<E>* out, float* lse) {
  constexpr int R = kBlockRows, ld = kLd<DH>;
  extern __shared__ __align__(128) unsigned char smem[];
  E* qt = reinterpret_cast<E*>(smem);
  E* kv_tiles = qt + R * ld;  // stage i: k at 2i, v at 2i + 1 tiles of R rows
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  const std::int64_t bh = blockIdx.x, q0 = query_tile_start(), keys = head_keys(s, bh);
  const std::int64_t qk_step = row_step(s, s.d), v_step = row_step(s, s.dv);
  const Global<E>* kh = k + kv_head_offset(s, bh, s.lk, s.d);
  const Global<E>* vh = v + kv_head_offset(s, bh, s.lk, s.dv);
  const auto start_keys = [&](std::int64_t j0, int stage) {
    start_key_tiles<DH>(kv_tiles, stage, s, kh, vh, keys, j0, vec);
  };
  start_tile<R, DH>(qt, q + head_offset(s, bh, s.lq, s.d), q0, s.lq, s.d, qk_step, vec);
  start_keys(0, 0);
  commit_copies();
  const std::int64_t row0 = q0 + warp * kWarpRows;
  const std::int64_t seen[2] = {keys_seen(s.causal, keys, row0 + g), keys_seen(s.causal, keys, row0 + g + 8)};
  // The fewest of its rows see (keys_seen grows with i).
  const std::int64_t warp_seen = keys_seen(s.causal, keys, row0);
  float o[DH / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  std::uint32_t qf[DH / 16][4];
  const AttentionDropout drop = kDropout ? dropout_rule(dropout) : AttentionDropout{};
  const std::int64_t key_end = s.causal ? std::min<std::int64_t>(keys, q0 + R) : keys;
  for (std::int64_t j0 = 0, stage = 0; j0 < key_end; j0 += R, stage ^= 1) {
    if (j0 + R < key_end) start_keys(j0 + R, stage ^ 1);  // into the stage read last tile
    commit_copies();
    wait_copies<1>();  // this tile's copies (and q's) have landed
    __syncthreads();
    if (j0 == 0)  // the warp's query fragments, read once: they stay in registers
#pragma unroll
      for (int ks = 0; ks < DH / 16; ++ks) load_a(qf[ks], qt + warp * kWarpRows * ld, ld, ks * 16);
    float sc[R / 8][4];
    scores_of<R, DH, E>(sc, qf, kv_tiles + 2 * stage * R * ld);
    const int tile_seen[2] = {seen_in_tile(seen[0], j0), seen_in_tile(seen[1], j0)};
    if (seen_in_tile(warp_seen, j0) == R)  // the same for the whole warp
      online_softmax<DH, false>(sc, o, m, l, tile_seen, s.scale * kLog2e);
    else
      online_softmax<DH, true>(sc, o, m, l, tile_seen, s.scale * kLog2e);
    if constexpr (kDropout)
      for_each_keep<R>(drop, bh * s.lq + row0 + g, j0, [&](int nb, int e, float z) { sc[nb][e] *= z; });
    accumulate_product<R, DH>(o, sc, kv_tiles + (2 * stage + 1) * R * ld);
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  wait_copies<0>();
  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = quad_sum(l[i]);
    inv[i] = m[i] == -INFINITY ? 0.f : 1.f / l[i];  // a row that saw no key: an empty sum, 0 (NaN stays NaN)
  }
  store_acc<DH, E>(out + head_offset(s, bh, s.lq, s.dv), o, row0, s.lq, s.dv, v_step, inv);
  if (threadIdx.x % 4 == 0)
    for (int i = 0; i < 2; ++i) {
      const std::int64_t row = row0 + g + 8 * i;
      if (row < s.lq) lse[bh * s.lq + row] = (m[i] + log2f(l[i])) * kLn2;
    }
}

// ---- backward ----

// p = exp(scale · s - lse) where the query sees the key (else 0) and
// ds = scale · p ∘ (dp - Δ), in place of s and dp.
inline __device__ void score_grad(const FlashAttentionShape& s, float& sc, float& dp, bool seen, float lse,
                           float delta) {
  const float p = seen ? exp2f(sc * (s.scale * kLog2e) - lse * kLog2e) : 0.f;
  sc = p;
  dp = s.scale * p * (dp - delta);
}
// The same under dropout, z the score's keep mask times its scale:
// p ∘ z in place of s, ds = scale · p ∘ (z ∘ dp - Δ) in place of dp.
inline __device__ void dropped_score_grad(const FlashAttentionShape& s, float& sc, float& dp, bool seen,
                                          float lse, float delta, float z) {
  const float p = seen ? exp2f(sc * (s.scale * kLog2e) - lse * kLog2e) : 0.f;
  sc = p * z;
  dp = s.scale * p * (z * dp - delta);
}

// Query i0 + col sees a key where col < rows and col >= first (the key's
// first query, causal; 0 otherwise; QR for a key from `keys` on).
struct QueryRange {
  int rows, first[2];
};
template <int QR>
__device__ QueryRange queries_seeing(const FlashAttentionShape& s, std::int64_t keys, std::int64_t i0,
                                     std::int64_t key_row) {
  QueryRange r{static_cast<int>(std::min<std::int64_t>(s.lq - i0, QR)), {0, 0}};
  for (int i = 0; i < 2; ++i) {
    const std::int64_t key = key_row + 8 * i;
    r.first[i] = key >= keys   ? QR
                 : s.causal ? static_cast<int>(std::clamp<std::int64_t>(key - i0, 0, QR))
                            : 0;
  }
  return r;
}

// The kv kernel's shared memory: k and v [64] rows of DH, then twice (the
// tile in use and the next one landing) q and dout [QR] rows and lse and
// Δ [QR].
template <typename E, int DH>
constexpr std::size_t kKvStageBytes =
    sizeof(E) * 2 * kKvQueryRows<DH> * kLd<DH> + sizeof(float) * 2 * kKvQueryRows<DH>;
template <typename E, int DH>
constexpr std::size_t kKvBytes = sizeof(E) * 2 * kBlockRows * kLd<DH> + 2 * kKvStageBytes<E, DH>;
// With dQ summed by atomics, then dS of the stage's queries ([QR] rows of
// the block's 64 keys).
constexpr int kLdScores = kBlockRows + 8;
template <typename E, int DH>
constexpr std::size_t kKvAtomicBytes = kKvBytes<E, DH> + sizeof(E) * kKvQueryRows<DH> * kLdScores;

// The atomic kv kernel's dQ share of one query tile: dQ[i0 + ..] += dS·K
// over the block's 64 keys, dS ([QR][kLdScores], rows queries) from shared
// memory. Warp w takes query rows (w % (QR / 16))·16 .. + 16 and, at QR =
// 32, half of the columns; its f32 sums go to the head's rows of a
// q-shaped f32 tensor (dq_head, zeroed before the kernel) by atomic adds.
template <int QR, int DH, typename E>
__device__ void add_query_grad(const FlashAttentionShape& s, float* dq_head, std::int64_t i0, const E* ds,
                               const E* kt) {
  constexpr int kRowGroups = QR / 16, kCols = DH * kRowGroups / 4;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int rows0 = warp % kRowGroups * 16, col0 = warp / kRowGroups * kCols;
  float acc[kCols / 8][4];
  zero<kCols>(acc);
#pragma unroll
  for (int kk = 0; kk < kBlockRows / 16; ++kk) {
    std::uint32_t af[4];
    load_a(af, ds + rows0 * kLdScores, kLdScores, kk * 16);
    product_step<kCols>(acc, af, kt, kLd<DH>, kk * 16, col0);
  }
  const std::int64_t step = row_step(s, s.d);
#pragma unroll
  for (int nb = 0; nb < kCols / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::int64_t row = i0 + rows0 + g + (e / 2) * 8;
      const int col = col0 + nb * 8 + 2 * t + e % 2;
      if (row < s.lq && col < s.d) atomicAdd(dq_head + row * step + col, acc[nb][e]);
    }
}

// The kv kernel's score_grad over a warp's transposed tiles (rows keys
// `key` and key + 8, columns the tile's queries from dropout row `row0`)
// under dropout: each score draws its own bits (a lane's two queries are
// two rows, its two keys 8 apart).
template <int QR>
__device__ void dropped_score_grads_t(const FlashAttentionShape& s, const AttentionDropout& drop,
                                      float (&st)[QR / 8][4], float (&dpt)[QR / 8][4], const QueryRange& seen,
                                      const float* lse_t, const float* delta_t, std::int64_t row0,
                                      std::int64_t key) {
  const int t = threadIdx.x % 4;
  const float scale = static_cast<float>(drop.scale);
#pragma unroll
  for (int nb = 0; nb < QR / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = nb * 8 + 2 * t + e % 2;
      const std::int64_t j = key + 8 * (e / 2);
      const float z = drop.keep(row0 + col, j) ? scale : 0.f;
      dropped_score_grad(s, st[nb][e], dpt[nb][e], col < seen.rows && col >= seen.first[e / 2], lse_t[col],
                         delta_t[col], z);
    }
}

// Block (head blockIdx.x, keys blockIdx.y · 64 ..): dK and dV of those keys;
// kAtomicDq: also their share of every query row's dQ, added to dq_acc
// (add_query_grad), so that no q kernel runs.
template <typename E, int DH, bool kAtomicDq, bool kDropout = false>
__global__ void __launch_bounds__(kMmaThreads)
    mma_backward_kv(FlashAttentionShape s, DropoutRef dropout, bool vec, const Global<E>* q, const Global<E>* k,
                    const Global<E>* v, const float* lse, const Global<E>* dout,
                    const float* delta, Global<E>* dk, Global<E>* dv, float* dq_acc) {
  constexpr int R = kBlockRows, QR = kKvQueryRows<DH>, ld = kLd<DH>;
  extern __shared__ __align__(128) unsigned char smem[];
  E* kt = reinterpret_cast<E*>(smem);
  E* vt = kt + R * ld;
  unsigned char* stages = smem + sizeof(E) * 2 * R * ld;
  const auto query_tile = [&](int stage, int i) {  // i: 0 q, 1 dout
    return reinterpret_cast<E*>(stages + stage * kKvStageBytes<E, DH>) + i * QR * ld;
  };
  const auto row_stats = [&](int stage, int i) {  // i: 0 lse, 1 Δ
    return reinterpret_cast<float*>(query_tile(stage, 2)) + i * QR;
  };
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const std::int64_t bh = blockIdx.x, j0 = static_cast<std::int64_t>(blockIdx.y) * R;
  const std::int64_t qk_step = row_step(s, s.d), v_step = row_step(s, s.dv);
  const Global<E>* qh = q + head_offset(s, bh, s.lq, s.d);
  const Global<E>* doh = dout + head_offset(s, bh, s.lq, s.dv);
  const auto start_queries = [&](std::int64_t i0, int stage) {
    start_tile<QR, DH>(query_tile(stage, 0), qh, i0, s.lq, s.d, qk_step, vec);
    start_tile<QR, DH>(query_tile(stage, 1), doh, i0, s.lq, s.dv, v_step, vec);
    for (int r = threadIdx.x; r < QR; r += kMmaThreads) {
      const bool valid = i0 + r < s.lq;
      const std::int64_t at = valid ? bh * s.lq + i0 + r : 0;
      copy_async4(row_stats(stage, 0) + r, lse + at, valid);
      copy_async4(row_stats(stage, 1) + r, delta + at, valid);
    }
  };
  // Earlier rows see none of these keys; none sees a key past the head's
  // count. The deterministic pass runs its padded tiles anyway, storing
  // zeros: reading the count before its loop costs it registers it spills
  // (ptxas, sm_90) and nothing computed there reaches another row. The
  // atomic pass reads zeros for the padding (its dS·K would carry a NaN
  // there into dQ).
  const std::int64_t keys = kAtomicDq ? head_keys(s, bh) : s.lk;
  start_tile<R, DH>(kt, k + kv_head_offset(s, bh, s.lk, s.d), j0, keys, s.d, kv_row_step(s, s.d), vec);
  start_tile<R, DH>(vt, v + kv_head_offset(s, bh, s.lk, s.dv), j0, keys, s.dv, kv_row_step(s, s.dv), vec);
  const std::int64_t first_query = j0 >= keys ? s.lq : s.causal ? j0 : 0;
  if (first_query < s.lq) start_queries(first_query, 0);
  commit_copies();
  const std::int64_t key0 = j0 + warp * kWarpRows;
  float dk_acc[DH / 8][4] = {}, dv_acc[DH / 8][4] = {};
  const AttentionDropout drop = kDropout ? dropout_rule(dropout) : AttentionDropout{};
  int stage = 0;
  for (std::int64_t i0 = first_query; i0 < s.lq; i0 += QR, stage ^= 1) {
    if (i0 + QR < s.lq) start_queries(i0 + QR, stage ^ 1);
    commit_copies();
    wait_copies<1>();
    __syncthreads();
    const E *qt = query_tile(stage, 0), *dot = query_tile(stage, 1);
    const float *lse_t = row_stats(stage, 0), *delta_t = row_stats(stage, 1);
    float st[QR / 8][4], dpt[QR / 8][4];  // Sᵀ and dPᵀ: rows keys, columns queries
    scores_of<QR, DH>(st, kt + warp * kWarpRows * ld, qt);
    scores_of<QR, DH>(dpt, vt + warp * kWarpRows * ld, dot);
    // Keys past the head's count: the atomic pass's dS·K reads every key
    // row's dS, so it masks them; each key row's dK and dV are its own, so
    // the deterministic pass computes them as seen and stores zeros.
    const QueryRange seen = queries_seeing<QR>(s, keys, i0, key0 + g);
    if constexpr (kDropout) {
      dropped_score_grads_t<QR>(s, drop, st, dpt, seen, lse_t, delta_t, bh * s.lq + i0, key0 + g);
    } else {
#pragma unroll
      for (int nb = 0; nb < QR / 8; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = nb * 8 + 2 * t + e % 2;
          score_grad(s, st[nb][e], dpt[nb][e], col < seen.rows && col >= seen.first[e / 2],
                     lse_t[col], delta_t[col]);
        }
    }
    accumulate_product<QR, DH>(dv_acc, st, dot);
    accumulate_product<QR, DH>(dk_acc, dpt, qt);
    if constexpr (kAtomicDq) {
      E* ds = reinterpret_cast<E*>(stages + 2 * kKvStageBytes<E, DH>);
#pragma unroll
      for (int nb = 0; nb < QR / 8; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e)  // dSᵀ's (key, query) as dS's (query, key), rounded as for dK
          ds[(nb * 8 + 2 * t + e % 2) * kLdScores + warp * kWarpRows + g + (e / 2) * 8] = narrow<E>(dpt[nb][e]);
      __syncthreads();
      add_query_grad<QR, DH>(s, dq_acc + head_offset(s, bh, s.lq, s.d), i0, ds, kt);
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  wait_copies<0>();
  const float one[2] = {1.f, 1.f};
  const std::int64_t live = head_keys(s, bh);  // rows from here on: zeros
  // dk, dv: query-head-shaped (each query head's share, summed per group
  // afterwards under grouped-query attention).
  store_acc<DH, E>(dk + head_offset(s, bh, s.lk, s.d), dk_acc, key0, s.lk, s.d, qk_step, one, live);
  store_acc<DH, E>(dv + head_offset(s, bh, s.lk, s.dv), dv_acc, key0, s.lk, s.dv, v_step, one, live);
}

// The q kernel's shared memory: q and dout [64] rows of DH, then k and v
// [64] rows twice.
template <typename E, int DH>
constexpr std::size_t kQBytes = sizeof(E) * 6 * kBlockRows * kLd<DH>;

// Block (head blockIdx.x, query rows query_tile_start() ..): dQ of those rows.
template <typename E, int DH, bool kDropout = false>
__global__ void __launch_bounds__(kMmaThreads)
    mma_backward_q(FlashAttentionShape s, DropoutRef dropout, bool vec, const Global<E>* q, const Global<E>* k,
                   const Global<E>* v, const float* lse, const Global<E>* dout,
                   const float* delta, Global<E>* dq) {
  constexpr int R = kBlockRows, ld = kLd<DH>;
  extern __shared__ __align__(128) unsigned char smem[];
  E* qt = reinterpret_cast<E*>(smem);
  E *dot = qt + R * ld, *kv_tiles = dot + R * ld;  // stage i: k at 2i, v at 2i + 1
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const std::int64_t bh = blockIdx.x, i0 = query_tile_start(), keys = head_keys(s, bh);
  const std::int64_t qk_step = row_step(s, s.d), v_step = row_step(s, s.dv);
  const Global<E>* kh = k + kv_head_offset(s, bh, s.lk, s.d);
  const Global<E>* vh = v + kv_head_offset(s, bh, s.lk, s.dv);
  const auto start_keys = [&](std::int64_t j0, int stage) {
    start_key_tiles<DH>(kv_tiles, stage, s, kh, vh, keys, j0, vec);
  };
  start_tile<R, DH>(qt, q + head_offset(s, bh, s.lq, s.d), i0, s.lq, s.d, qk_step, vec);
  start_tile<R, DH>(dot, dout + head_offset(s, bh, s.lq, s.dv), i0, s.lq, s.dv, v_step, vec);
  start_keys(0, 0);
  commit_copies();
  const std::int64_t row0 = i0 + warp * kWarpRows;
  float row_lse[2], row_delta[2];
  std::int64_t seen[2];  // keys each row sees; none past Lq
  for (int i = 0; i < 2; ++i) {
    const std::int64_t row = row0 + g + 8 * i;
    row_lse[i] = row < s.lq ? lse[bh * s.lq + row] : 0.f;
    row_delta[i] = row < s.lq ? delta[bh * s.lq + row] : 0.f;
    seen[i] = row < s.lq ? keys_seen(s.causal, keys, row) : 0;
  }
  float dq_acc[DH / 8][4] = {};
  const AttentionDropout drop = kDropout ? dropout_rule(dropout) : AttentionDropout{};
  const std::int64_t key_end = s.causal ? std::min<std::int64_t>(keys, i0 + R) : keys;
  for (std::int64_t j0 = 0, stage = 0; j0 < key_end; j0 += R, stage ^= 1) {
    if (j0 + R < key_end) start_keys(j0 + R, stage ^ 1);
    commit_copies();
    wait_copies<1>();
    __syncthreads();
    const E *kt = kv_tiles + 2 * stage * R * ld, *vt = kv_tiles + (2 * stage + 1) * R * ld;
    float sc[R / 8][4], dp[R / 8][4];
    scores_of<R, DH>(sc, qt + warp * kWarpRows * ld, kt);
    scores_of<R, DH>(dp, dot + warp * kWarpRows * ld, vt);
    const int tile_seen[2] = {seen_in_tile(seen[0], j0), seen_in_tile(seen[1], j0)};
    if constexpr (kDropout) {
      for_each_keep<R>(drop, bh * s.lq + row0 + g, j0, [&](int nb, int e, float z) {
        dropped_score_grad(s, sc[nb][e], dp[nb][e], nb * 8 + 2 * t + e % 2 < tile_seen[e / 2], row_lse[e / 2],
                           row_delta[e / 2], z);
      });
    } else {
#pragma unroll
      for (int nb = 0; nb < R / 8; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          score_grad(s, sc[nb][e], dp[nb][e], nb * 8 + 2 * t + e % 2 < tile_seen[e / 2],
                     row_lse[e / 2], row_delta[e / 2]);
    }
    accumulate_product<R, DH>(dq_acc, dp, kt);
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  wait_copies<0>();
  const float one[2] = {1.f, 1.f};
  store_acc<DH, E>(dq + head_offset(s, bh, s.lq, s.d), dq_acc, row0, s.lq, s.d, qk_step, one);
}

}  // namespace kiln::cuda::flash
