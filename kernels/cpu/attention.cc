// CPU kernels of kiln.scaled_dot_product_attention and its gradient. Each
// (batch, head) pair is processed in tiles of kTileRows query rows: the
// tile's scores against the keys it sees (all keys, or keys up to the tile's
// last row when causal, and within the batch's key_lengths: later key
// blocks are skipped) go through one GEMM
// into a per-thread scratch, the softmax runs on those rows in place, and a
// second GEMM multiplies by V. The gradient recomputes the tile's
// probabilities from q, k and the saved log-sum-exp instead of storing them.
// A mask operand is applied to a tile's scores between the GEMM and the
// softmax; its float form's gradient (AttentionMaskGradOp) recomputes the
// gradient's tiles and sums their dS into the mask's shape. Under
// grouped-query attention a query head reads its group's k / v head in
// place, and the gradient writes each query head's share of dK and dV into
// scratch, summed per group after in head order (the same bits at any
// thread count). Attention dropout (kiln/kernel/attention_dropout.h)
// zeroes and scales a tile's probabilities after the softmax; the
// gradient draws the same keep mask from the same key.

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "cpu_blas.h"
#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/attention_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/attention_dropout.h"

namespace kiln::cpu {
namespace {

constexpr std::int64_t kTileRows = 64;
// Multiply-adds that make one range of heads or tiles worth waking a thread
// for (parallel_for's ~10 µs).
constexpr std::int64_t kRangeWork = std::int64_t{1} << 18;

// c = alpha · op(a) · op(b) + beta · c, row-major.
template <typename T>
void gemm(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
          T beta, T* c, int ldc) {
  cpu::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// attention_dims (attention_ops.h) in the op's layout, and every dim and
// row step small enough for the BLAS's ints.
AttentionDims attn_dims(const KernelContext& ctx, const std::string& layout, const Tensor& q,
                        const Tensor& k, const Tensor& v) {
  const std::string_view op = ctx.op()->name();
  const AttentionDims a =
      attention_dims(op, q.dims(), k.dims(), v.dims(), attention_heads_inner(op, layout));
  // (kv_row_step's are at most row_step's)
  for (std::int64_t x : {a.lq, a.lk, a.d, a.dv, a.row_step(a.d), a.row_step(a.dv)})
    if (x * kTileRows > INT_MAX)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has a dim of ", x,
                  ", beyond what the BLAS takes");
  return a;
}

// Where the op's optional inputs are, past its `fixed` ones.
AttentionOptionals optionals(const KernelContext& ctx, std::size_t fixed) {
  std::vector<DataType> dt;
  for (std::uint32_t i = 0; i < ctx.num_inputs(); ++i) dt.push_back(ctx.input(i).dtype());
  return attention_optionals(ctx.op()->name(), dt, fixed);
}

// Each batch's key count from input i (key_lengths, int32 or int64 [B]),
// checked; empty when i < 0 (the op has no such input).
std::vector<std::int64_t> key_lengths(const KernelContext& ctx, int i, const AttentionDims& a) {
  std::vector<std::int64_t> n;
  if (i < 0) return n;
  const Tensor& t = ctx.input(i);
  check_key_lengths_tensor(ctx.op()->name(), t.dtype(), t.dims(), a.b);
  for (std::int64_t b = 0; b < a.b; ++b)
    n.push_back(checked_key_length(ctx.op()->name(), b,
                                   t.dtype() == DataType::Int32 ? t.data<std::int32_t>()[b] : t.data<std::int64_t>()[b],
                                   a.lk));
  return n;
}

// The keys the query rows [i0, i0 + rows) of head bh see between them: the
// first kend (causal: up to the last row; key_lengths: the batch's count).
std::int64_t tile_keys(const AttentionDims& a, const std::vector<std::int64_t>& lens, bool causal,
                       std::int64_t bh, std::int64_t i0, std::int64_t rows) {
  const std::int64_t kend = causal ? std::min(a.lk, i0 + rows) : a.lk;
  return lens.empty() ? kend : std::min(kend, lens[static_cast<std::size_t>(bh / a.h)]);
}

// The op's mask, when it has one (data null when not): bool (false: the
// score becomes -inf) or T (added to the score), read through its broadcast
// strides.
template <typename T>
struct ScoreMask {
  const void* data = nullptr;
  bool boolean = false;
  AttentionMaskStrides st;
  std::int64_t heads = 1;  // H

  // Input i (or none when i < 0), checked against a.
  static ScoreMask of(const KernelContext& ctx, int i, const AttentionDims& a) {
    if (i < 0) return {};
    const Tensor& m = ctx.input(static_cast<std::uint32_t>(i));
    return {m.raw_data(), m.dtype() == DataType::Bool,
            attention_mask_strides(ctx.op()->name(), m.dtype(), m.dims(), DataTypeOf<T>::value, a), a.h};
  }
  explicit operator bool() const { return data != nullptr; }
  // Where row i of head bh begins.
  std::int64_t row(std::int64_t bh, std::int64_t i) const { return st.head(bh / heads, bh % heads) + i * st.si; }
  // s (rows × kend: head bh's query rows from i0 against its first kend keys), masked.
  void apply(T* s, std::int64_t rows, std::int64_t kend, std::int64_t bh, std::int64_t i0) const {
    constexpr T kNone = -std::numeric_limits<T>::infinity();
    for (std::int64_t r = 0; r < rows; ++r) {
      T* __restrict x = s + r * kend;
      const std::int64_t o = row(bh, i0 + r), sj = st.sj;
      if (boolean) {
        const std::uint8_t* m = static_cast<const std::uint8_t*>(data) + o;  // a bool tensor's bytes
        for (std::int64_t j = 0; j < kend; ++j) x[j] = m[j * sj] != 0 ? x[j] : kNone;
      } else {
        const T* m = static_cast<const T*>(data) + o;
        for (std::int64_t j = 0; j < kend; ++j) x[j] += m[j * sj];
      }
    }
  }
};

// The op's dropout rule: inactive without dropout (dropout_p 0 or
// is_test), else drawn from its dropout_key input (u64 [1], checked).
template <typename Attrs>
AttentionDropout dropout_of(const KernelContext& ctx, const Attrs& attrs, int key, const AttentionDims& a) {
  const double p = attention_dropout_p(ctx.op()->name(), attrs.dropout_p, attrs.is_test, key >= 0);
  if (p == 0) return {};
  const Tensor& t = ctx.input(static_cast<std::uint32_t>(key));
  check_dropout_key_tensor(ctx.op()->name(), t.dtype(), t.dims());
  return attention_dropout(p, t.data<std::uint64_t>()[0], a.lk);
}

// Attention dropout over a tile's rows (rows × kend, its first row
// `row0` = head · Lq + query row), compiled for the CPU's widest SIMD level:
// a row's draws go into `bits` (4 · ⌈kend / 4⌉ 16-bit shares: a draw's
// little-endian halves are AttentionDropout::keeps' shifts), then each
// score is kept (scaled) or zeroed. Without dp: P ∘ Z in place of P (the
// forward). With dp (the gradient): dS = P ∘ (Z ∘ dP - Δ) in place of dP
// and P ∘ Z in place of P, Z being the keep mask times the scale.
static_assert(std::endian::native == std::endian::little, "attention dropout reads a draw's 16-bit shares in place");
template <typename T>
struct DropoutTile {
  KILN_SIMD_INLINE static void run(const AttentionDropout* drop, T* p, T* dp, std::int64_t rows, std::int64_t kend,
                                   std::int64_t row0, const T* delta, std::uint16_t* bits) {
    const T scale = static_cast<T>(drop->scale);
    const std::uint16_t t = static_cast<std::uint16_t>(drop->threshold);
    const std::int64_t words = (kend + 3) / 4;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint64_t first = static_cast<std::uint64_t>((row0 + r) * drop->row_words);
      for (std::int64_t w = 0; w < words; ++w) {
        const std::uint64_t b = random_bits(drop->key, first + static_cast<std::uint64_t>(w));
        std::memcpy(bits + 4 * w, &b, sizeof b);
      }
      T* __restrict x = p + r * kend;
      const std::uint16_t* __restrict u = bits;
      if (!dp) {
        for (std::int64_t j = 0; j < kend; ++j) x[j] = u[j] >= t ? x[j] * scale : T(0);
        continue;
      }
      T* __restrict g = dp + r * kend;
      const T dl = delta[r];
      for (std::int64_t j = 0; j < kend; ++j) {
        const T z = u[j] >= t ? scale : T(0);
        g[j] = x[j] * (z * g[j] - dl);
        x[j] *= z;
      }
    }
  }
};
// DropoutTile on the calling thread's scratch for a row's draws.
template <typename T>
void drop_tile(const AttentionDropout& drop, T* p, T* dp, std::int64_t rows, std::int64_t kend, std::int64_t row0,
               const T* delta = nullptr) {
  thread_local std::vector<std::uint16_t> bits;
  bits.resize(static_cast<std::size_t>(4 * ((kend + 3) / 4)));
  simd_dispatch<DropoutTile<T>>(&drop, p, dp, rows, kend, row0, delta, bits.data());
}

// exp for the softmax rows (vector_math.h: a polynomial for f32). Below
// -87 it gives exp(-87) ~ 1.6e-38, nothing next to a row's largest term, 1.
template <typename T> KILN_SIMD_INLINE T exp_row(T x) { return fast_exp(x); }

// The largest of x[0..n), n >= 1, in kLanes independent lanes (a reduction
// the compiler vectorizes without reassociating a single chain).
constexpr std::int64_t kLanes = 8;
template <typename T>
KILN_SIMD_INLINE T row_max(const T* __restrict x, std::int64_t n) {
  T lane[kLanes];
  for (std::int64_t l = 0; l < kLanes; ++l) lane[l] = x[0];
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  T m = x[0];
  for (std::int64_t l = 0; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}
// x[j] = exp(x[j] - sub) for j < n (kMasked: 0 for a -inf x[j]); returns
// their sum (in kLanes lanes).
template <typename T, bool kMasked = false>
KILN_SIMD_INLINE T exp_sub_sum(T* __restrict x, std::int64_t n, T sub) {
  if constexpr (kMasked) {
    constexpr T kNone = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = 0; j < n; ++j) x[j] = x[j] == kNone ? T(0) : exp_row(x[j] - sub);
  } else {
    for (std::int64_t j = 0; j < n; ++j) x[j] = exp_row(x[j] - sub);
  }
  T lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) lane[l] += x[j + l];
  T s = 0;
  for (std::int64_t l = 0; l < kLanes; ++l) s += lane[l];
  for (; j < n; ++j) s += x[j];
  return s;
}

// x[j] = exp(x[j] - sub) for j < n, summed as they are made: one pass
// over the row instead of exp_sub_sum's two, in kWideLanes lanes (one
// AVX-512 vector of f32). For rows of kFusedRow keys or more: on short
// rows (a small model's causal rows) the second pass is in cache and the
// longer scalar tail costs more (measured on model_bench's GPT).
constexpr std::int64_t kWideLanes = 16, kFusedRow = 128;
template <typename T>
KILN_SIMD_INLINE T exp_sum_one_pass(T* __restrict x, std::int64_t n, T sub) {
  T lane[kWideLanes] = {};
  std::int64_t j = 0;
  for (; j + kWideLanes <= n; j += kWideLanes)
    for (std::int64_t l = 0; l < kWideLanes; ++l) {
      const T e = exp_row(x[j + l] - sub);
      x[j + l] = e;
      lane[l] += e;
    }
  T s = 0;
  for (std::int64_t l = 0; l < kWideLanes; ++l) s += lane[l];
  for (; j < n; ++j) s += x[j] = exp_row(x[j] - sub);
  return s;
}

// How many keys row i sees among the first kend.
KILN_SIMD_INLINE std::int64_t visible(bool causal, std::int64_t i, std::int64_t kend) {
  return causal ? std::min(kend, i + 1) : kend;
}

// The row work of one tile, compiled for the CPU's widest SIMD level
// (vector_math.h's simd_dispatch).
// Forward: each of s's rows × kend scores → its softmax (0 where masked);
// lse[r] = the row's log-sum-exp.
template <typename T>
struct SoftmaxTile {
  KILN_SIMD_INLINE static void run(T* s, std::int64_t rows, std::int64_t kend, std::int64_t i0,
                                   bool causal, T* lse) {
    for (std::int64_t r = 0; r < rows; ++r) {
      T* __restrict row = s + r * kend;
      const std::int64_t n = visible(causal, i0 + r, kend);
      const T m = row_max(row, n);
      const T sum = n >= kFusedRow ? exp_sum_one_pass(row, n, m) : exp_sub_sum(row, n, m);
      const T inv = T(1) / sum;
      for (std::int64_t j = 0; j < n; ++j) row[j] *= inv;
      for (std::int64_t j = n; j < kend; ++j) row[j] = 0;
      lse[r] = m + std::log(sum);
    }
  }
};
// The same for masked scores: a -inf score gives exactly 0, and a row
// whose scores are all -inf is an empty sum (zeros, lse -inf).
template <typename T>
struct MaskedSoftmaxTile {
  KILN_SIMD_INLINE static void run(T* s, std::int64_t rows, std::int64_t kend, std::int64_t i0,
                                   bool causal, T* lse) {
    constexpr T kNone = -std::numeric_limits<T>::infinity();
    for (std::int64_t r = 0; r < rows; ++r) {
      T* __restrict row = s + r * kend;
      const std::int64_t n = visible(causal, i0 + r, kend);
      const T m = row_max(row, n);
      if (m == kNone) {
        std::fill(row, row + kend, T(0));
        lse[r] = kNone;
        continue;
      }
      const T sum = exp_sub_sum<T, true>(row, n, m);
      const T inv = T(1) / sum;
      for (std::int64_t j = 0; j < n; ++j) row[j] *= inv;
      for (std::int64_t j = n; j < kend; ++j) row[j] = 0;
      lse[r] = m + std::log(sum);
    }
  }
};
// Gradient: scores → probabilities exp(s - lse) (0 where masked), and
// delta[r] = Σ dout ∘ out over row r (rows ld apart in dout and out).
template <typename T, bool kMasked>
struct ProbabilityTile {
  KILN_SIMD_INLINE static void run(T* p, std::int64_t rows, std::int64_t kend, std::int64_t i0,
                                   bool causal, const T* lse, const T* dout, const T* out,
                                   std::int64_t dv, std::int64_t ld, T* delta) {
    for (std::int64_t r = 0; r < rows; ++r) {
      T* __restrict row = p + r * kend;
      const std::int64_t n = visible(causal, i0 + r, kend);
      const T l = lse[r];
      if constexpr (kMasked) {  // a -inf score, or a row without keys (lse -inf): 0
        constexpr T kNone = -std::numeric_limits<T>::infinity();
        for (std::int64_t j = 0; j < n; ++j) row[j] = row[j] == kNone || l == kNone ? T(0) : exp_row(row[j] - l);
      } else {
        for (std::int64_t j = 0; j < n; ++j) row[j] = exp_row(row[j] - l);
      }
      for (std::int64_t j = n; j < kend; ++j) row[j] = 0;
      const T* __restrict dor = dout + r * ld;
      const T* __restrict orow = out + r * ld;
      T acc = 0;
      for (std::int64_t c = 0; c < dv; ++c) acc += dor[c] * orow[c];
      delta[r] = acc;
    }
  }
};
// Gradient: dS = P ∘ (dP - Δ), in place of dP.
template <typename T>
struct ScoreGradTile {
  KILN_SIMD_INLINE static void run(const T* p, T* dp, std::int64_t rows, std::int64_t kend,
                                   const T* delta) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* __restrict row = p + r * kend;
      T* __restrict dpr = dp + r * kend;
      const T dl = delta[r];
      for (std::int64_t j = 0; j < kend; ++j) dpr[j] = row[j] * (dpr[j] - dl);
    }
  }
};

// The BLAS's row steps (at least 1) of q (row_step of D), k (kv_row_step
// of D), v (of Dv) and out (row_step of Dv): a head's width, or all heads'
// in BLHD. The gradients are q-head-shaped: dq and dk step as q, dout and
// dv as out.
struct RowSteps {
  int q, k, v, o;
  explicit RowSteps(const AttentionDims& a)
      : q(step(a.row_step(a.d))), k(step(a.kv_row_step(a.d))), v(step(a.kv_row_step(a.dv))),
        o(step(a.row_step(a.dv))) {}
  static int step(std::int64_t x) { return static_cast<int>(std::max<std::int64_t>(x, 1)); }
};

// One item of the forward: query rows [i0, i0 + kTileRows) of head bh,
// their scores in s (kTileRows × lk scratch), out and lse rows written.
template <typename T>
struct ForwardTile {
  const AttentionDims& a;
  const T *q, *k, *v;
  T *out, *lse;
  T scale;
  bool causal;
  const std::vector<std::int64_t>& lens;  // key_lengths per batch, or empty
  const ScoreMask<T>& mask;
  const AttentionDropout& drop;

  void operator()(std::int64_t bh, std::int64_t i0, T* s) const {
    const int d = static_cast<int>(a.d), dv = static_cast<int>(a.dv);
    const RowSteps ld(a);
    const T* qb = q + a.head_offset(bh, a.lq, a.d) + i0 * ld.q;
    const T* kb = k + a.kv_offset(bh, a.lk, a.d);
    const T* vb = v + a.kv_offset(bh, a.lk, a.dv);
    T* ob = out + a.head_offset(bh, a.lq, a.dv) + i0 * ld.o;
    const std::int64_t rows = std::min(kTileRows, a.lq - i0);
    const std::int64_t kend = tile_keys(a, lens, causal, bh, i0, rows);
    const int ik = static_cast<int>(kend);
    if (kend == 0) {  // a batch without keys: empty sums
      for (std::int64_t r = 0; r < rows; ++r) std::fill(ob + r * ld.o, ob + r * ld.o + dv, T(0));
      std::fill(lse + bh * a.lq + i0, lse + bh * a.lq + i0 + rows, -std::numeric_limits<T>::infinity());
      return;
    }
    if (d == 0) std::fill(s, s + rows * kend, T(0));
    else gemm(false, true, static_cast<int>(rows), ik, d, scale, qb, ld.q, kb, ld.k, T(0), s, ik);
    if (mask) {
      mask.apply(s, rows, kend, bh, i0);
      simd_dispatch<MaskedSoftmaxTile<T>>(s, rows, kend, i0, causal, lse + bh * a.lq + i0);
    } else {
      simd_dispatch<SoftmaxTile<T>>(s, rows, kend, i0, causal, lse + bh * a.lq + i0);
    }
    if (drop.active()) drop_tile<T>(drop, s, nullptr, rows, kend, bh * a.lq + i0);
    if (dv > 0) gemm(false, false, static_cast<int>(rows), dv, ik, T(1), s, ik, vb, ld.v, T(0), ob, ld.o);
  }
};

template <typename T>
struct AttentionK {
  static void run(KernelContext& ctx) {
    const auto& attrs = ctx.attrs<ScaledDotProductAttentionOp>();
    const Tensor q = typed_input<T>(ctx, 0), k = typed_input<T>(ctx, 1), v = typed_input<T>(ctx, 2);
    const AttentionDims a = attn_dims(ctx, attrs.layout, q, k, v);
    const AttentionOptionals opt = optionals(ctx, 3);
    const std::vector<std::int64_t> lens = key_lengths(ctx, opt.key_lengths, a);
    const ScoreMask<T> mask = ScoreMask<T>::of(ctx, opt.mask, a);
    const AttentionDropout drop = dropout_of(ctx, attrs, opt.dropout_key, a);
    const std::int64_t lse_shape[] = {a.b, a.h, a.lq};
    Tensor& out = ctx.alloc_output(0, a.out_dims(), q.dtype());
    Tensor& lse = ctx.alloc_output(1, Dims(std::span<const std::int64_t>(lse_shape, 3)), q.dtype());
    if (a.bh == 0 || a.lq == 0) return;
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    if (a.lk == 0) {  // no keys: an empty sum
      std::memset(po, 0, out.bytes());
      std::fill(pl, pl + a.bh * a.lq, -std::numeric_limits<T>::infinity());
      return;
    }
    const ForwardTile<T> tile{a,  q.data<T>(), k.data<T>(), v.data<T>(), po, pl,
                              static_cast<T>(attention_scale(attrs.scale, a.d)), attrs.causal, lens, mask, drop};
    // Items: (head, tile of kTileRows query rows), each written by one call
    // of the same GEMMs on any thread.
    const std::int64_t tiles = (a.lq + kTileRows - 1) / kTileRows;
    const std::int64_t tile_work = std::max<std::int64_t>(kTileRows * a.lk * (a.d + a.dv), 1);
    parallel_for(a.bh * tiles, std::max<std::int64_t>(1, kRangeWork / tile_work),
                 [&](std::int64_t t0, std::int64_t t1) {
                   T* s = scratch<T>(kTileRows * a.lk);
                   for (std::int64_t t = t0; t < t1; ++t) tile(t / tiles, (t % tiles) * kTileRows, s);
                 });
  }
};

// The gradient's operands and its per-tile work: P, dP and dS of query
// rows [i0, i0 + rows) of head bh against the keys they see, in scratch of
// 2 · kTileRows · lk + kTileRows (p, dp, delta).
template <typename T>
struct BackwardTiles {
  const AttentionDims& a;
  const T *q, *k, *v, *o, *lse, *dout;
  T scale;
  bool causal;
  const std::vector<std::int64_t>& lens;  // key_lengths per batch, or empty
  const ScoreMask<T>& mask;
  const AttentionDropout& drop;

  std::int64_t keys(std::int64_t bh, std::int64_t i0) const {
    return tile_keys(a, lens, causal, bh, i0, std::min(kTileRows, a.lq - i0));
  }
  // P = exp(scale · Q Kᵀ [+ mask] - lse) (0 where masked) into p, and Δ.
  void probabilities(std::int64_t bh, std::int64_t i0, std::int64_t kend, T* p, T* delta) const {
    const std::int64_t rows = std::min(kTileRows, a.lq - i0);
    const RowSteps ld(a);
    const T* qb = q + a.head_offset(bh, a.lq, a.d) + i0 * ld.q;
    const T* kb = k + a.kv_offset(bh, a.lk, a.d);
    const std::int64_t out_rows = a.head_offset(bh, a.lq, a.dv) + i0 * ld.o;
    const int ik = static_cast<int>(kend);
    if (a.d == 0) std::fill(p, p + rows * kend, T(0));
    else gemm(false, true, static_cast<int>(rows), ik, static_cast<int>(a.d), scale, qb, ld.q, kb, ld.k, T(0), p, ik);
    const T* lb = lse + bh * a.lq + i0;
    if (mask) {
      mask.apply(p, rows, kend, bh, i0);
      simd_dispatch<ProbabilityTile<T, true>>(p, rows, kend, i0, causal, lb, dout + out_rows, o + out_rows, a.dv,
                                              std::int64_t{ld.o}, delta);
    } else {
      simd_dispatch<ProbabilityTile<T, false>>(p, rows, kend, i0, causal, lb, dout + out_rows, o + out_rows, a.dv,
                                               std::int64_t{ld.o}, delta);
    }
  }
  // dP = dO · Vᵀ into dp, then dS = P ∘ (dP - Δ) in place of dP (under
  // dropout P ∘ (Z ∘ dP - Δ), and P ∘ Z in place of P).
  void score_grads(std::int64_t bh, std::int64_t i0, std::int64_t kend, T* p, T* dp, const T* delta) const {
    const std::int64_t rows = std::min(kTileRows, a.lq - i0);
    const int ik = static_cast<int>(kend);
    const RowSteps ld(a);
    if (a.dv > 0)
      gemm(false, true, static_cast<int>(rows), ik, static_cast<int>(a.dv), T(1),
           dout + a.head_offset(bh, a.lq, a.dv) + i0 * ld.o, ld.o, v + a.kv_offset(bh, a.lk, a.dv), ld.v, T(0), dp,
           ik);
    else
      std::fill(dp, dp + rows * kend, T(0));
    if (drop.active()) drop_tile<T>(drop, p, dp, rows, kend, bh * a.lq + i0, delta);
    else simd_dispatch<ScoreGradTile<T>>(static_cast<const T*>(p), dp, rows, kend, delta);
  }
};

// One item of the backward: head bh's dQ, and its dK and dV added into
// dk and dv, q-head-shaped (grouped-query attention: the head's share of
// its k / v head's), tile after tile of kTileRows query rows.
template <typename T>
void backward_head(const BackwardTiles<T>& t, std::int64_t bh, T* p, T* dq, T* dk, T* dv) {
  const AttentionDims& a = t.a;
  T* dp = p + kTileRows * a.lk;
  T* delta = dp + kTileRows * a.lk;
  const int d = static_cast<int>(a.d), ndv = static_cast<int>(a.dv);
  const RowSteps ld(a);
  const T* qb = t.q + a.head_offset(bh, a.lq, a.d);
  const T* kb = t.k + a.kv_offset(bh, a.lk, a.d);
  const T* dob = t.dout + a.head_offset(bh, a.lq, a.dv);
  T* dqb = dq + a.head_offset(bh, a.lq, a.d);
  T* dkb = dk + a.head_offset(bh, a.lk, a.d);
  T* dvb = dv + a.head_offset(bh, a.lk, a.dv);
  for (std::int64_t i0 = 0; i0 < a.lq; i0 += kTileRows) {
    const int ir = static_cast<int>(std::min(kTileRows, a.lq - i0));
    const std::int64_t kend = t.keys(bh, i0);
    const int ik = static_cast<int>(kend);
    if (kend == 0) continue;  // rows without keys: no gradient
    t.probabilities(bh, i0, kend, p, delta);
    t.score_grads(bh, i0, kend, p, dp, delta);
    // dV[:kend] += (P ∘ Z)ᵀ · dO
    if (ndv > 0) gemm(true, false, ik, ndv, ir, T(1), p, ik, dob + i0 * ld.o, ld.o, T(1), dvb, ld.o);
    if (d > 0) {
      // dQ = scale · dS · K; dK[:kend] += scale · dSᵀ · Q
      gemm(false, false, ir, d, ik, t.scale, dp, ik, kb, ld.k, T(0), dqb + i0 * ld.q, ld.q);
      gemm(true, false, ik, d, ir, t.scale, dp, ik, qb + i0 * ld.q, ld.q, T(1), dkb, ld.q);
    }
  }
}

// out [outer, hk, inner] = x [outer, hk, group, inner] summed over group
// in order: a k / v head's gradient from its query heads' shares (outer B
// and inner Lk · W in layout BHLD, outer B · Lk and inner W in BLHD).
template <typename T>
void sum_head_groups(const T* x, T* out, std::int64_t outer, std::int64_t hk, std::int64_t group,
                     std::int64_t inner) {
  const std::int64_t item_work = std::max<std::int64_t>(group * inner, 1);
  parallel_for(outer * hk, std::max<std::int64_t>(1, kRangeWork / item_work), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      T* __restrict o = out + i * inner;
      const T* src = x + i * group * inner;
      std::copy(src, src + inner, o);
      for (std::int64_t r = 1; r < group; ++r)
        for (std::int64_t c = 0; c < inner; ++c) o[c] += src[r * inner + c];
    }
  });
}

// The gradient ops' operands, checked, and their BackwardTiles.
template <typename T>
struct GradInputs {
  Tensor q, k, v, o, lse, dout;
  AttentionDims a;
  std::vector<std::int64_t> lens;
  ScoreMask<T> mask;
  AttentionDropout drop;
  int mask_input = -1;

  explicit GradInputs(const KernelContext& ctx)
      : q(typed_input<T>(ctx, 0)), k(typed_input<T>(ctx, 1)), v(typed_input<T>(ctx, 2)),
        o(typed_input<T>(ctx, 3)), lse(typed_input<T>(ctx, 4)), dout(typed_input<T>(ctx, 5)),
        a(attn_dims(ctx, ctx.attrs<GradOf<ScaledDotProductAttentionOp>>().layout, q, k, v)) {
    check_attention_grad_operands(ctx.op()->name(), a, o.dims(), lse.dims(), dout.dims());
    const AttentionOptionals opt = optionals(ctx, 6);
    lens = key_lengths(ctx, opt.key_lengths, a);
    mask = ScoreMask<T>::of(ctx, opt.mask, a);
    drop = dropout_of(ctx, ctx.attrs<GradOf<ScaledDotProductAttentionOp>>(), opt.dropout_key, a);
    mask_input = opt.mask;
  }
  BackwardTiles<T> tiles(const KernelContext& ctx) const {
    const auto& attrs = ctx.attrs<GradOf<ScaledDotProductAttentionOp>>();
    return {a, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse.data<T>(), dout.data<T>(),
            static_cast<T>(attention_scale(attrs.scale, a.d)), attrs.causal, lens, mask, drop};
  }
  bool empty() const { return a.bh == 0 || a.lq == 0 || a.lk == 0; }
};

template <typename T>
struct AttentionGradK {
  static void run(KernelContext& ctx) {
    const GradInputs<T> in(ctx);
    Tensor& dq = ctx.alloc_output(0, in.q.dims(), in.q.dtype());
    Tensor& dk = ctx.alloc_output(1, in.k.dims(), in.k.dtype());
    Tensor& dvt = ctx.alloc_output(2, in.v.dims(), in.v.dtype());
    for (Tensor* t : {&dq, &dk, &dvt})
      if (t->numel() > 0) std::memset(t->raw_data(), 0, t->bytes());
    const AttentionDims& a = in.a;
    if (in.empty() || (a.d == 0 && a.dv == 0)) return;
    const BackwardTiles<T> tiles = in.tiles(ctx);
    // Grouped-query attention: each query head's dK and dV go into shares
    // (q-head-shaped), summed per group below.
    const std::int64_t g = a.group(), nk = a.bh * a.lk * a.d;
    std::vector<T> shares(static_cast<std::size_t>(g > 1 ? nk + a.bh * a.lk * a.dv : 0));
    T* pdk = g > 1 ? shares.data() : dk.data<T>();
    T* pdv = g > 1 ? shares.data() + nk : dvt.data<T>();
    // Items: heads, each accumulating its dK and dV over its tiles in order.
    const std::int64_t head_work = std::max<std::int64_t>(a.lq * a.lk * (2 * a.d + 2 * a.dv), 1);
    parallel_for(a.bh, std::max<std::int64_t>(1, kRangeWork / head_work), [&](std::int64_t h0, std::int64_t h1) {
      T* p = scratch<T>(2 * kTileRows * a.lk + kTileRows);
      for (std::int64_t bh = h0; bh < h1; ++bh) backward_head(tiles, bh, p, dq.data<T>(), pdk, pdv);
    });
    if (g == 1) return;
    for (auto [from, to, width] : {std::tuple{pdk, dk.data<T>(), a.d}, std::tuple{pdv, dvt.data<T>(), a.dv}}) {
      const std::int64_t outer = a.heads_inner ? a.b * a.lk : a.b, inner = a.heads_inner ? width : a.lk * width;
      sum_head_groups<T>(from, to, outer, a.hk, g, inner);
    }
  }
};

// Adds head bh's dS (tile after tile) into dmask through the mask's strides.
template <typename T>
void mask_grad_head(const BackwardTiles<T>& t, std::int64_t bh, T* p, T* dmask) {
  const AttentionDims& a = t.a;
  T* dp = p + kTileRows * a.lk;
  T* delta = dp + kTileRows * a.lk;
  for (std::int64_t i0 = 0; i0 < a.lq; i0 += kTileRows) {
    const std::int64_t rows = std::min(kTileRows, a.lq - i0), kend = t.keys(bh, i0);
    if (kend == 0) continue;
    t.probabilities(bh, i0, kend, p, delta);
    t.score_grads(bh, i0, kend, p, dp, delta);
    for (std::int64_t r = 0; r < rows; ++r) {
      T* __restrict m = dmask + t.mask.row(bh, i0 + r);
      const T* __restrict ds = dp + r * kend;
      for (std::int64_t j = 0; j < kend; ++j) m[j * t.mask.st.sj] += ds[j];
    }
  }
}

// dmask: the heads that add into one slice of the mask (the same offset
// through its batch and head strides) run in order on one thread.
template <typename T>
struct AttentionMaskGradK {
  static void run(KernelContext& ctx) {
    const GradInputs<T> in(ctx);
    if (!in.mask || in.mask.boolean)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' needs a float mask");
    const Tensor& m = ctx.input(static_cast<std::uint32_t>(in.mask_input));
    Tensor& dmask = ctx.alloc_output(0, m.dims(), m.dtype());
    if (dmask.numel() > 0) std::memset(dmask.raw_data(), 0, dmask.bytes());
    const AttentionDims& a = in.a;
    if (in.empty()) return;
    const BackwardTiles<T> tiles = in.tiles(ctx);
    const std::int64_t nb = in.mask.st.sb ? a.b : 1, nh = in.mask.st.sh ? a.h : 1;
    const std::int64_t slice_work = std::max<std::int64_t>(a.bh / (nb * nh) * a.lq * a.lk * (a.d + a.dv), 1);
    parallel_for(nb * nh, std::max<std::int64_t>(1, kRangeWork / slice_work), [&](std::int64_t s0, std::int64_t s1) {
      T* p = scratch<T>(2 * kTileRows * a.lk + kTileRows);
      for (std::int64_t s = s0; s < s1; ++s)
        for (std::int64_t bh = 0; bh < a.bh; ++bh)
          if ((nb == 1 || bh / a.h == s / nh) && (nh == 1 || bh % a.h == s % nh))
            mask_grad_head(tiles, bh, p, dmask.data<T>());
    });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(ScaledDotProductAttentionOp, Cpu, AttentionK, float, double);
KILN_REGISTER_KERNELS(GradOf<ScaledDotProductAttentionOp>, Cpu, AttentionGradK, float, double);
KILN_REGISTER_KERNELS(AttentionMaskGradOp, Cpu, AttentionMaskGradK, float, double);

}  // namespace kiln::cpu
