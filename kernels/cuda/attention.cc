// CUDA kernels of kiln.scaled_dot_product_attention and its gradient, two
// paths:
//
// - fused (flash_attention.cu): bf16 and f16, and f32 whose scores outgrow
//   the materialized path's budget (attention_f32_kernels()), with D and Dv
//   up to 128.
//   Tiles of query rows against tiles of keys in shared memory with an
//   online softmax, so no [Lq, Lk] matrix exists; the gradient recomputes
//   the probabilities per tile from q, k and the saved log-sum-exp. Both
//   layouts are read in place through their row strides. bf16 and f16 have
//   no other kernel: dims the fused kernels do not take are a kiln::Error.
// - cuBLAS, materialized (below and attention.cu): f64, and f32 with a
//   head dim above 128 or scores within the budget. The CPU's algorithm over all heads at once — the scores of every
//   (batch, head) pair through one strided-batched GEMM into device scratch
//   ([B·H, Lq, Lk]: B·H·Lq·Lk values, 2× that for the gradient, freed to the
//   stream's cache after the op), the row passes of attention.cu, then GEMMs
//   by V (and, for the gradient, by dO, K and Q). Layout "BLHD" is staged:
//   q, k, v (and out, dout) are copied into [B, H, L, D] scratch, the BHLD
//   algorithm runs there, and the results are copied back. Under
//   key_lengths, k and v are copied with the rows past a batch's length
//   zeroed: P and dS are 0 there, but a GEMM's 0 · NaN is NaN, and the
//   fused kernels never read those rows either.
//
// Grouped-query attention (k and v with fewer heads than q): the fused
// kernels read each query head's k / v head in place and write each query
// head's share of dk and dv into scratch, summed per group afterwards
// (FlashAttention-2's way); the cuBLAS path runs on k and v repeated to
// q's heads.
//
// A mask operand is read by the fused shared-memory kernels (also in bf16
// and f16: the register tiles have no registers to spare for it), or by the
// cuBLAS path's row passes; the float mask's gradient (AttentionMaskGradOp)
// takes the cuBLAS path, dS summed into the mask's shape (bf16 and f16
// widened to f32 around its f32 kernel: half_via_f32.cc).
//
// Attention dropout (kiln/kernel/attention_dropout.h: dropout_p, unless
// is_test) is drawn by every fused kernel (the register tiles for bf16 and
// f16, the shared-memory ones for f32, a mask or KILN_CUDA_FLASH=wmma), or
// by the cuBLAS path's row passes, which drop out the
// softmax's probabilities before the product by V and, in the gradient,
// give dV = (P ∘ Z)ᵀ·dO and dS = P ∘ (Z ∘ dP - Δ). Every kernel reads the
// dropout_key where it lies, on the device, and draws the CPU's keep mask
// bit for bit.
#include <cuda_runtime_api.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <tuple>
#include <type_traits>

#include "cublas_util.h"
#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/attention_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/attention_dropout.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/attention_options.h"

namespace kiln::cuda {
namespace {

void zero(const KernelContext& ctx, Tensor& t) {
  if (t.bytes())
    check_cuda(cudaMemsetAsync(t.raw_data(), 0, t.bytes(), stream_of(ctx)), "zeroing an output");
}

// S = scale · Q·Kᵀ for every head into s ([bh, lq, lk]); zeros when d == 0.
template <typename T>
void scores(const KernelContext& ctx, const AttentionDims& a, T scale, const T* q, const T* k,
            T* s) {
  if (a.d == 0) {
    check_cuda(cudaMemsetAsync(s, 0, sizeof(T) * a.bh * a.lq * a.lk, stream_of(ctx)),
               "zeroing attention scores");
    return;
  }
  row_major_gemm<T>(ctx, false, true, a.lq, a.lk, a.d, scale, q, a.d, a.lq * a.d, k, a.d,
                    a.lk * a.d, T(0), s, a.lk, a.lq * a.lk, a.bh);
}

// Device copies in [B, H, L, ·] of an op's tensors: stage(x) copies a BLHD
// operand in, stage_keys(x) a k or v of either layout, place(n) is room for
// a result, and unstage copies one back to BLHD.
template <typename T>
class HeadsOuter {
 public:
  HeadsOuter(const KernelContext& ctx, const AttentionDims& a, std::int64_t elements)
      : ctx_(ctx), a_(a), buf_(scratch_buffer(ctx, sizeof(T) * elements)),
        next_(static_cast<T*>(buf_->data())) {}
  // An operand with `len` rows of `width` per head, [B, L, H, W] → [B, H, L, W].
  T* stage(const Tensor& x, std::int64_t len, std::int64_t width) {
    T* dst = place(x.numel());
    swap_axes_12(ctx_, x.raw_data(), dst, sizeof(T), {a_.b, len, a_.h, width});
    return dst;
  }
  // A k or v operand of `width` per head with its rows past `keys` zeroed,
  // so that the GEMMs over the keys never read what the padding holds.
  const T* stage_keys(const Tensor& x, std::int64_t width, const KeyLengths& keys) {
    T* dst = a_.heads_inner ? stage(x, a_.lk, width) : place(x.numel());
    if (!a_.heads_inner)
      check_cuda(cudaMemcpyAsync(dst, x.raw_data(), x.bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx_)),
                 "copying attention keys");
    launch_zero_past_key_lengths(dst, keys, a_.b, a_.h, a_.lk, width, stream_of(ctx_));
    return dst;
  }
  T* place(std::int64_t n) {
    T* p = next_;
    next_ += n;
    return p;
  }
  // [B, H, L, W] at src → the result tensor `to` ([B, L, H, W]).
  void unstage(const T* src, Tensor& to, std::int64_t len, std::int64_t width) {
    swap_axes_12(ctx_, src, to.raw_data(), sizeof(T), {a_.b, a_.h, len, width});
  }

 private:
  const KernelContext& ctx_;
  const AttentionDims& a_;
  BufferRef buf_;
  T* next_;
};

// Where the op's optional inputs are, past its `fixed` ones.
AttentionOptionals optionals(const KernelContext& ctx, std::size_t fixed) {
  std::vector<DataType> dt;
  for (std::uint32_t i = 0; i < ctx.num_inputs(); ++i) dt.push_back(ctx.input(i).dtype());
  return attention_optionals(ctx.op()->name(), dt, fixed);
}

// The op's key_lengths (input i, none when i < 0): int32 or int64 [B].
KeyLengths key_lengths_of(const KernelContext& ctx, int i, const AttentionDims& a) {
  if (i < 0) return {};
  const Tensor& t = ctx.input(static_cast<std::uint32_t>(i));
  check_key_lengths_tensor(ctx.op()->name(), t.dtype(), t.dims(), a.b);
  return {.lengths = t.raw_data(), .wide = t.dtype() == DataType::Int64};
}

// The op's mask (input i, none when i < 0): bool or dt, broadcasting to the scores.
ScoreMaskRef mask_of(const KernelContext& ctx, int i, const AttentionDims& a, DataType dt) {
  if (i < 0) return {};
  const Tensor& m = ctx.input(static_cast<std::uint32_t>(i));
  const AttentionMaskStrides st = attention_mask_strides(ctx.op()->name(), m.dtype(), m.dims(), dt, a);
  return {.data = m.raw_data(), .boolean = m.dtype() == DataType::Bool, .sb = st.sb, .sh = st.sh, .si = st.si,
          .sj = st.sj};
}

// The op's dropout (none when dropout_p is 0 or is_test): its rule for
// Lk keys and the address of its dropout_key (input i, u64 [1], checked),
// which stays on the device.
template <typename Attrs>
DropoutRef dropout_of(const KernelContext& ctx, const Attrs& attrs, int i, const AttentionDims& a) {
  const double p = attention_dropout_p(ctx.op()->name(), attrs.dropout_p, attrs.is_test, i >= 0);
  if (p == 0) return {};
  const Tensor& t = ctx.input(static_cast<std::uint32_t>(i));
  check_dropout_key_tensor(ctx.op()->name(), t.dtype(), t.dims());
  const AttentionDropout rule = attention_dropout(p, 0, a.lk);
  if (!rule.active()) return {};  // a p too small for the rule's 16 bits drops nothing
  return {.key = static_cast<const std::uint64_t*>(t.raw_data()), .threshold = rule.threshold,
          .row_words = rule.row_words, .scale = rule.scale};
}

// What masks the scores' rows (causal, key_lengths and the mask operand)
// and drops their probabilities.
struct RowMasks {
  bool causal = false;
  KeyLengths keys;
  ScoreMaskRef mask;
  DropoutRef dropout;
};

// The op's RowMasks from its attributes and optional inputs (dt: its dtype).
template <typename Attrs>
RowMasks row_masks(const KernelContext& ctx, const Attrs& attrs, const AttentionOptionals& opt,
                   const AttentionDims& a, DataType dt) {
  return {attrs.causal, key_lengths_of(ctx, opt.key_lengths, a), mask_of(ctx, opt.mask, a, dt),
          dropout_of(ctx, attrs, opt.dropout_key, a)};
}

AttentionRows attention_rows(const AttentionDims& a, const RowMasks& m) {
  return {.rows = a.bh * a.lq, .lq = a.lq, .lk = a.lk, .h = a.h, .causal = m.causal, .keys = m.keys,
          .mask = m.mask, .dropout = m.dropout};
}

// A k / v tensor of `width` per head seen as [outer, Hk, inner] (and its
// q-head-shaped twin as [outer, H, inner]): outer B and inner Lk·W in
// layout BHLD, outer B·Lk and inner W in BLHD.
struct HeadGroups {
  std::int64_t outer = 0, inner = 0;
};
HeadGroups head_groups(const AttentionDims& a, std::int64_t width) {
  return a.heads_inner ? HeadGroups{a.b * a.lk, width} : HeadGroups{a.b, a.lk * width};
}

// dk and dv of grouped-query attention (dims a) from each query head's
// share (q-head-shaped, at sk and sv), summed per group.
void sum_group_shares(const KernelContext& ctx, const AttentionDims& a, const void* sk, const void* sv, Tensor& dk,
                      Tensor& dv) {
  const std::tuple<const void*, Tensor*, std::int64_t> pairs[] = {{sk, &dk, a.d}, {sv, &dv, a.dv}};
  for (const auto& [from, to, width] : pairs) {
    const HeadGroups hg = head_groups(a, width);
    launch_sum_head_groups(to->dtype(), from, to->raw_data(), hg.outer, a.hk, a.group(), hg.inner, stream_of(ctx));
  }
  check_launch(ctx);
}

// Grouped-query attention on the cuBLAS path: k and v copied to every
// query head of their group (PyTorch's math path repeats them too), so
// that the path runs as plain multi-head attention on dims `a` (hk = h);
// the gradient's dk and dv come back per query head (dk(), dv()) and
// sum_groups adds them per group.
class RepeatedKv {
 public:
  // with_grads: room for dk() and dv() too.
  RepeatedKv(const KernelContext& ctx, const AttentionDims& grouped, const Tensor& k, const Tensor& v,
             bool with_grads)
      : ctx_(ctx), grouped_(grouped), a_(grouped) {
    a_.hk = a_.h;
    const std::size_t es = size_of(k.dtype());
    const std::int64_t nk = a_.bh * a_.lk * a_.d, nv = a_.bh * a_.lk * a_.dv;
    buf_ = scratch_buffer(ctx, es * static_cast<std::size_t>((with_grads ? 2 : 1) * (nk + nv)));
    auto* p = static_cast<unsigned char*>(buf_->data());
    k_ = view(p, k, a_.d);
    v_ = view(p + es * nk, v, a_.dv);
    if (with_grads) {
      dk_ = view(p + es * (nk + nv), k, a_.d);
      dv_ = view(p + es * (2 * nk + nv), v, a_.dv);
    }
    repeat(k, k_, a_.d);
    repeat(v, v_, a_.dv);
  }
  const AttentionDims& dims() const { return a_; }  // the dims the path runs on: hk = h
  const Tensor& k() const { return k_; }
  const Tensor& v() const { return v_; }
  Tensor& dk() { return dk_; }  // room for the per-query-head gradients
  Tensor& dv() { return dv_; }
  // dk() and dv() summed per group into the op's dk and dv.
  void sum_groups(Tensor& dk, Tensor& dv) const {
    sum_group_shares(ctx_, grouped_, dk_.raw_data(), dv_.raw_data(), dk, dv);
  }

 private:
  // x's dims with q's head count, over device memory at p.
  Tensor view(unsigned char* p, const Tensor& x, std::int64_t width) const {
    const std::int64_t hd[] = {a_.b, a_.h, a_.lk, width}, ld[] = {a_.b, a_.lk, a_.h, width};
    const Dims dims(std::span<const std::int64_t>(a_.heads_inner ? ld : hd, 4));
    return Tensor::from_external(p, size_of(x.dtype()) * static_cast<std::size_t>(dims.numel()), dims,
                                 x.dtype(), x.place());
  }
  void repeat(const Tensor& from, Tensor& to, std::int64_t width) const {
    const HeadGroups hg = head_groups(a_, width);
    repeat_heads(ctx_, from.raw_data(), to.raw_data(), static_cast<std::int64_t>(size_of(from.dtype())),
                 hg.outer, grouped_.hk, grouped_.group(), hg.inner);
  }

  const KernelContext& ctx_;
  AttentionDims grouped_, a_;
  BufferRef buf_;
  Tensor k_, v_, dk_, dv_;
};

// The cuBLAS path's forward on checked dims (lq, lk and bh > 0): the
// scores of every head into scratch, their softmax (dropped out under
// dropout; lse the softmax's), the product by V.
template <typename T>
void cublas_attention(const KernelContext& ctx, const AttentionDims& a, const RowMasks& masks, T scale,
                      const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      Tensor& lse) {
  const std::int64_t rows = a.bh * a.lq;
  BufferRef scratch = scratch_buffer(ctx, sizeof(T) * rows * a.lk);
  T* s = static_cast<T*>(scratch->data());
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
  T* po = out.data<T>();
  std::optional<HeadsOuter<T>> staged;
  if (a.heads_inner || masks.keys.lengths) {
    staged.emplace(ctx, a, q.numel() + k.numel() + v.numel() + out.numel());
    pk = staged->stage_keys(k, a.d, masks.keys);
    pv = staged->stage_keys(v, a.dv, masks.keys);
  }
  if (a.heads_inner) {
    pq = staged->stage(q, a.lq, a.d);
    po = staged->place(out.numel());
  }
  scores(ctx, a, scale, pq, pk, s);
  launch_attention_softmax(s, lse.data<T>(), attention_rows(a, masks), stream_of(ctx));
  check_launch(ctx);
  if (a.dv > 0)
    row_major_gemm<T>(ctx, false, false, a.lq, a.dv, a.lk, T(1), s, a.lk, a.lq * a.lk, pv, a.dv,
                      a.lk * a.dv, T(0), po, a.dv, a.lq * a.dv, a.bh);
  if (a.heads_inner) staged->unstage(po, out, a.lq, a.dv);
}

// What the cuBLAS path's gradient writes: dq, dk and dv, or (the mask's
// gradient op) dmask only.
struct AttentionGrads {
  Tensor *dq = nullptr, *dk = nullptr, *dv = nullptr, *dmask = nullptr;
};

// The cuBLAS path's gradient (lq, lk and bh > 0; d or dv > 0 unless dmask).
template <typename T>
void cublas_attention_grad(const KernelContext& ctx, const AttentionDims& a, const RowMasks& masks, T scale,
                           const Tensor (&in)[6], const AttentionGrads& g) {
  const Tensor &q = in[0], &k = in[1], &v = in[2], &o = in[3], &lse = in[4], &dout = in[5];
  const cudaStream_t st = stream_of(ctx);
  const std::int64_t rows = a.bh * a.lq, plane = a.lq * a.lk;
  BufferRef scratch = scratch_buffer(ctx, sizeof(T) * (2 * rows * a.lk + rows));
  T* p = static_cast<T*>(scratch->data());
  T* dp = p + rows * a.lk;
  T* delta = dp + rows * a.lk;
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>(), *po = o.data<T>(),
          *pdo = dout.data<T>();
  T *pdq = g.dq ? g.dq->data<T>() : nullptr, *pdk = g.dk ? g.dk->data<T>() : nullptr,
    *pdv = g.dv ? g.dv->data<T>() : nullptr;
  std::optional<HeadsOuter<T>> staged;
  if (a.heads_inner || masks.keys.lengths) {
    staged.emplace(ctx, a, 2 * (q.numel() + k.numel() + v.numel()) + o.numel() + dout.numel());
    pk = staged->stage_keys(k, a.d, masks.keys);
    pv = staged->stage_keys(v, a.dv, masks.keys);
  }
  if (a.heads_inner) {
    pq = staged->stage(q, a.lq, a.d);
    po = staged->stage(o, a.lq, a.dv);
    pdo = staged->stage(dout, a.lq, a.dv);
    if (!g.dmask) {
      pdq = staged->place(q.numel());
      pdk = staged->place(k.numel());
      pdv = staged->place(v.numel());
    }
  }
  // P = exp(scale · Q·Kᵀ - lse), 0 where masked; Δ = rowsum(dO ∘ O).
  scores(ctx, a, scale, pq, pk, p);
  launch_attention_probabilities(p, lse.data<T>(), pdo, po, delta, attention_rows(a, masks), a.dv, st);
  check_launch(ctx);
  // dP = dO·Vᵀ
  if (a.dv > 0)
    row_major_gemm<T>(ctx, false, true, a.lq, a.lk, a.dv, T(1), pdo, a.dv, a.lq * a.dv, pv,
                      a.dv, a.lk * a.dv, T(0), dp, a.lk, plane, a.bh);
  else
    check_cuda(cudaMemsetAsync(dp, 0, sizeof(T) * rows * a.lk, st), "zeroing attention dP");
  // dS = P ∘ (Z ∘ dP - Δ) in place of dP; under dropout P ∘ Z in place of P.
  launch_attention_score_grad(p, dp, static_cast<const T*>(delta), attention_rows(a, masks), st);
  check_launch(ctx);
  if (g.dmask) {
    launch_attention_mask_grad(static_cast<const T*>(dp), g.dmask->data<T>(), attention_rows(a, masks), a.b, st);
    check_launch(ctx);
    return;
  }
  // dV = (P ∘ Z)ᵀ·dO
  if (a.dv > 0)
    row_major_gemm<T>(ctx, true, false, a.lk, a.dv, a.lq, T(1), p, a.lk, plane, pdo, a.dv, a.lq * a.dv, T(0),
                      pdv, a.dv, a.lk * a.dv, a.bh);
  if (a.d > 0) {
    // dQ = scale · dS·K; dK = scale · dSᵀ·Q
    row_major_gemm<T>(ctx, false, false, a.lq, a.d, a.lk, scale, dp, a.lk, plane, pk, a.d,
                      a.lk * a.d, T(0), pdq, a.d, a.lq * a.d, a.bh);
    row_major_gemm<T>(ctx, true, false, a.lk, a.d, a.lq, scale, dp, a.lk, plane, pq, a.d,
                      a.lq * a.d, T(0), pdk, a.d, a.lk * a.d, a.bh);
  }
  if (a.heads_inner) {
    staged->unstage(pdq, *g.dq, a.lq, a.d);
    staged->unstage(pdk, *g.dk, a.lk, a.d);
    staged->unstage(pdv, *g.dv, a.lk, a.dv);
  }
}

// Input i, which must be of dtype D (the 16-bit floats are held as raw bits).
const Tensor& input_of(const KernelContext& ctx, std::uint32_t i, DataType dtype) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != dtype) throw_input_dtype(ctx, i, dtype);
  return t;
}

FlashAttentionShape flash_shape(const AttentionDims& a, const RowMasks& m, double scale) {
  return {.bh = a.bh, .h = a.h, .lq = a.lq, .lk = a.lk, .d = a.d, .dv = a.dv, .hk = a.hk,
          .heads_inner = a.heads_inner, .causal = m.causal,
          .scale = static_cast<float>(attention_scale(scale, a.d)), .keys = m.keys, .mask = m.mask};
}

// Whether f32 attention of dims `a` takes the materialized (cuBLAS) path
// under attention_f32_kernels(): Auto while the gradient's two score
// matrices fit kAttentionScoresBudget.
bool f32_materialized(const AttentionDims& a) {
  switch (attention_f32_kernels()) {
    case AttentionF32Kernels::Fused: return false;
    case AttentionF32Kernels::Materialized: return true;
    case AttentionF32Kernels::Auto: break;
  }
  const double scores = 2.0 * sizeof(float) * double(a.bh) * double(a.lq) * double(a.lk);
  return scores <= double(kAttentionScoresBudget);
}

// The fused kernels take f32 within their dims (unless f32_materialized),
// bf16 and f16 always (a kiln::Error naming the op and the dims otherwise:
// they have no other kernel); cuBLAS takes the rest of f32 and f64.
template <typename T, DataType D>
bool use_fused(const KernelContext& ctx, const AttentionDims& a, const FlashAttentionShape& fs) {
  if constexpr (D == DataType::Float32)
    if (f32_materialized(a)) return false;
  const char* refusal = flash_attention_refusal(D, fs);
  if (!refusal) return true;
  if constexpr (std::is_same_v<T, std::uint16_t>)
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no CUDA kernel for ",
                to_string(D), " with D ", a.d, " and Dv ", a.dv,
                ": its fused kernel does not take ", refusal);
  return false;
}

// The -inf of dtype dt as a word of its width: an empty sum's log.
std::uint64_t minus_infinity_bits(DataType dt) {
  switch (dt) {
    case DataType::BFloat16: return 0xFF80u;
    case DataType::Float16: return 0xFC00u;
    case DataType::Float32: return std::bit_cast<std::uint32_t>(-std::numeric_limits<float>::infinity());
    default: return std::bit_cast<std::uint64_t>(-std::numeric_limits<double>::infinity());
  }
}

// T: float or double (D their dtype), or std::uint16_t with D bf16 or f16.
template <typename T, DataType D>
void attention_kernel(KernelContext& ctx) {
  const auto& attrs = ctx.attrs<ScaledDotProductAttentionOp>();
  const Tensor q = input_of(ctx, 0, D), k = input_of(ctx, 1, D), v = input_of(ctx, 2, D);
  const std::string_view op = ctx.op()->name();
  const AttentionDims a = attention_dims(op, q.dims(), k.dims(), v.dims(),
                                         attention_heads_inner(op, attrs.layout));
  const RowMasks masks = row_masks(ctx, attrs, optionals(ctx, 3), a, D);
  const std::int64_t lse_shape[] = {a.b, a.h, a.lq};
  Tensor& out = ctx.alloc_output(0, a.out_dims(), D);
  const DataType lse_dt = attention_lse_dtype(D);
  Tensor& lse = ctx.alloc_output(1, Dims(std::span<const std::int64_t>(lse_shape, 3)), lse_dt);
  if (a.bh == 0 || a.lq == 0) return;
  const cudaStream_t st = stream_of(ctx);
  if (a.lk == 0) {  // no keys: an empty sum, lse = -inf
    zero(ctx, out);
    launch_fill(lse.raw_data(), lse.numel(), static_cast<int>(size_of(lse_dt)), minus_infinity_bits(lse_dt),
                st);
    check_launch(ctx);
    return;
  }
  const FlashAttentionShape fs = flash_shape(a, masks, attrs.scale);
  if (use_fused<T, D>(ctx, a, fs)) {
    launch_flash_attention_forward(D, fs, masks.dropout, q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(),
                                   lse.raw_data(), st);
    check_launch(ctx);
  } else if constexpr (!std::is_same_v<T, std::uint16_t>) {
    const T scale = static_cast<T>(attention_scale(attrs.scale, a.d));
    if (a.hk == a.h) {
      cublas_attention<T>(ctx, a, masks, scale, q, k, v, out, lse);
    } else {
      const RepeatedKv kv(ctx, a, k, v, false);
      cublas_attention<T>(ctx, kv.dims(), masks, scale, q, kv.k(), kv.v(), out, lse);
    }
  }
}

// The gradient ops' six fixed inputs, checked, and their dims.
template <DataType D>
struct GradInputs {
  Tensor in[6];
  AttentionDims a;
  explicit GradInputs(const KernelContext& ctx)
      : in{input_of(ctx, 0, D), input_of(ctx, 1, D), input_of(ctx, 2, D),
           input_of(ctx, 3, D), input_of(ctx, 4, attention_lse_dtype(D)), input_of(ctx, 5, D)} {
    const std::string_view op = ctx.op()->name();
    a = attention_dims(op, in[0].dims(), in[1].dims(), in[2].dims(),
                       attention_heads_inner(op, ctx.attrs<GradOf<ScaledDotProductAttentionOp>>().layout));
    check_attention_grad_operands(op, a, in[3].dims(), in[4].dims(), in[5].dims());
  }
};

template <typename T, DataType D>
void attention_grad_kernel(KernelContext& ctx) {
  const auto& attrs = ctx.attrs<GradOf<ScaledDotProductAttentionOp>>();
  const AttentionOptionals opt = optionals(ctx, 6);
  const GradInputs<D> g(ctx);
  const AttentionDims& a = g.a;
  const Tensor(&in)[6] = g.in;
  const RowMasks masks = row_masks(ctx, attrs, opt, a, D);
  Tensor& dq = ctx.alloc_output(0, in[0].dims(), D);
  Tensor& dk = ctx.alloc_output(1, in[1].dims(), D);
  Tensor& dv = ctx.alloc_output(2, in[2].dims(), D);
  if (a.bh == 0 || a.lq == 0 || a.lk == 0 || (a.d == 0 && a.dv == 0)) {
    zero(ctx, dq);
    zero(ctx, dk);
    zero(ctx, dv);
    return;
  }
  const FlashAttentionShape fs = flash_shape(a, masks, attrs.scale);
  if (use_fused<T, D>(ctx, a, fs)) {
    BufferRef delta = scratch_buffer(ctx, sizeof(float) * a.bh * a.lq);
    const bool atomic = attention_grad_sum() == AttentionGradSum::Atomic && flash_attention_sums_dq(D, fs, masks.dropout);
    BufferRef dq_sum = atomic ? scratch_buffer(ctx, sizeof(float) * dq.numel()) : BufferRef();
    // Grouped-query attention: the kernels write each query head's share.
    const std::int64_t nk = a.bh * a.lk * a.d, nv = a.bh * a.lk * a.dv;
    BufferRef shares = a.hk != a.h ? scratch_buffer(ctx, size_of(D) * static_cast<std::size_t>(nk + nv)) : BufferRef();
    void* pdk = shares ? shares->data() : dk.raw_data();
    void* pdv = shares ? static_cast<unsigned char*>(shares->data()) + size_of(D) * nk : dv.raw_data();
    launch_flash_attention_backward(D, fs, masks.dropout, in[0].raw_data(), in[1].raw_data(), in[2].raw_data(),
                                    in[3].raw_data(), in[4].raw_data(), in[5].raw_data(), dq.raw_data(), pdk, pdv,
                                    static_cast<float*>(delta->data()),
                                    atomic ? static_cast<float*>(dq_sum->data()) : nullptr, stream_of(ctx));
    check_launch(ctx);
    if (shares) sum_group_shares(ctx, a, pdk, pdv, dk, dv);
  } else if constexpr (!std::is_same_v<T, std::uint16_t>) {
    const T scale = static_cast<T>(attention_scale(attrs.scale, a.d));
    if (a.hk == a.h) {
      cublas_attention_grad<T>(ctx, a, masks, scale, in, {.dq = &dq, .dk = &dk, .dv = &dv});
    } else {
      RepeatedKv kv(ctx, a, in[1], in[2], true);
      const Tensor repeated[6] = {in[0], kv.k(), kv.v(), in[3], in[4], in[5]};
      cublas_attention_grad<T>(ctx, kv.dims(), masks, scale, repeated, {.dq = &dq, .dk = &kv.dk(), .dv = &kv.dv()});
      kv.sum_groups(dk, dv);
    }
  }
}

// A float mask's gradient, f32 or f64 (bf16 and f16 through f32:
// half_via_f32.cc): the cuBLAS path's dS summed into the mask's shape.
template <typename T, DataType D>
void attention_mask_grad_kernel(KernelContext& ctx) {
  const auto& attrs = ctx.attrs<AttentionMaskGradOp>();
  const AttentionOptionals opt = optionals(ctx, 6);
  const GradInputs<D> g(ctx);
  const AttentionDims& a = g.a;
  const RowMasks masks = row_masks(ctx, attrs, opt, a, D);
  if (!masks.mask.data || masks.mask.boolean)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' needs a float mask");
  const Tensor& m = ctx.input(static_cast<std::uint32_t>(opt.mask));
  Tensor& dmask = ctx.alloc_output(0, m.dims(), D);
  if (a.bh == 0 || a.lq == 0 || a.lk == 0) {
    zero(ctx, dmask);
    return;
  }
  const T scale = static_cast<T>(attention_scale(attrs.scale, a.d));
  if (a.hk == a.h) {
    cublas_attention_grad<T>(ctx, a, masks, scale, g.in, {.dmask = &dmask});
  } else {
    const RepeatedKv kv(ctx, a, g.in[1], g.in[2], false);
    const Tensor repeated[6] = {g.in[0], kv.k(), kv.v(), g.in[3], g.in[4], g.in[5]};
    cublas_attention_grad<T>(ctx, kv.dims(), masks, scale, repeated, {.dmask = &dmask});
  }
}

}  // namespace

KILN_REGISTER_KERNEL(ScaledDotProductAttentionOp, Cuda, Float32, attention_kernel<float, DataType::Float32>);
KILN_REGISTER_KERNEL(ScaledDotProductAttentionOp, Cuda, Float64, attention_kernel<double, DataType::Float64>);
KILN_REGISTER_KERNEL(ScaledDotProductAttentionOp, Cuda, BFloat16,
                     attention_kernel<std::uint16_t, DataType::BFloat16>);
KILN_REGISTER_KERNEL(ScaledDotProductAttentionOp, Cuda, Float16,
                     attention_kernel<std::uint16_t, DataType::Float16>);
KILN_REGISTER_KERNEL(GradOf<ScaledDotProductAttentionOp>, Cuda, Float32,
                     attention_grad_kernel<float, DataType::Float32>);
KILN_REGISTER_KERNEL(GradOf<ScaledDotProductAttentionOp>, Cuda, Float64,
                     attention_grad_kernel<double, DataType::Float64>);
KILN_REGISTER_KERNEL(GradOf<ScaledDotProductAttentionOp>, Cuda, BFloat16,
                     attention_grad_kernel<std::uint16_t, DataType::BFloat16>);
KILN_REGISTER_KERNEL(GradOf<ScaledDotProductAttentionOp>, Cuda, Float16,
                     attention_grad_kernel<std::uint16_t, DataType::Float16>);
KILN_REGISTER_KERNEL(AttentionMaskGradOp, Cuda, Float32, attention_mask_grad_kernel<float, DataType::Float32>);
KILN_REGISTER_KERNEL(AttentionMaskGradOp, Cuda, Float64, attention_mask_grad_kernel<double, DataType::Float64>);

}  // namespace kiln::cuda
