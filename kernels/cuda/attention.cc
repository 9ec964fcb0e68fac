// CUDA kernels of kiln.scaled_dot_product_attention and its gradient: the
// CPU's algorithm (attention.cc there) over all heads at once — the scores
// of every (batch, head) pair through one strided-batched cuBLAS GEMM into
// device scratch ([B·H, Lq, Lk]), the row passes of attention.cu, then GEMMs
// by V (and, for the gradient, by dO, K and Q). The gradient recomputes the
// probabilities from q, k and the saved log-sum-exp, as the CPU does.
//
// Layout "BLHD" ([B, L, H, D]) is staged: q, k, v (and out, dout) are
// copied into [B, H, L, D] scratch, the BHLD algorithm runs there, and the
// results are copied back — the transposes the fused program no longer has,
// done inside the op (the CPU reads the rows in place instead).
//
// Unlike the CPU's tiles this holds each head's whole score matrix (2× that
// for the gradient) for the duration of the op: B·H·Lq·Lk values, freed to
// the stream's cache after it. Sequences long enough for that to matter want
// a fused tile kernel (FlashAttention's), which this is not.
#include <cuda_runtime_api.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>

#include "cublas_util.h"
#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/attention_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cuda {
namespace {

template <typename T>
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

// Device copies in [B, H, L, ·] of a BLHD op's tensors: stage(x) copies an
// operand in, place(n) is room for a result, and unstage copies one back.
template <typename T>
class HeadsOuter {
 public:
  HeadsOuter(const KernelContext& ctx, const AttentionDims& a, std::int64_t elements)
      : ctx_(ctx), a_(a), buf_(scratch_buffer(ctx, sizeof(T) * elements)),
        next_(static_cast<T*>(buf_->data())) {}
  // An operand with `len` rows of `width` per head, [B, L, H, W] → [B, H, L, W].
  const T* stage(const Tensor& x, std::int64_t len, std::int64_t width) {
    T* dst = place(x.numel());
    swap_axes_12(ctx_, x.raw_data(), dst, sizeof(T), {a_.b, len, a_.h, width});
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

template <typename T>
struct AttentionK {
  static void run(KernelContext& ctx) {
    const auto& attrs = ctx.attrs<ScaledDotProductAttentionOp>();
    const Tensor q = typed_input<T>(ctx, 0), k = typed_input<T>(ctx, 1), v = typed_input<T>(ctx, 2);
    const std::string_view op = ctx.op()->name();
    const AttentionDims a = attention_dims(op, q.dims(), k.dims(), v.dims(),
                                           attention_heads_inner(op, attrs.layout));
    const std::int64_t lse_shape[] = {a.b, a.h, a.lq};
    Tensor& out = ctx.alloc_output(0, a.out_dims(), q.dtype());
    Tensor& lse = ctx.alloc_output(1, Dims(std::span<const std::int64_t>(lse_shape, 3)), q.dtype());
    if (a.bh == 0 || a.lq == 0) return;
    const cudaStream_t st = stream_of(ctx);
    if (a.lk == 0) {  // no keys: an empty sum, lse = -inf
      zero<T>(ctx, out);
      launch_fill(lse.raw_data(), lse.numel(), sizeof(T),
                  std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(
                      -std::numeric_limits<T>::infinity()),
                  st);
      check_launch(ctx);
      return;
    }
    const T scale = static_cast<T>(attention_scale(attrs.scale, a.d));
    const std::int64_t rows = a.bh * a.lq;
    BufferRef scratch = scratch_buffer(ctx, sizeof(T) * rows * a.lk);
    T* s = static_cast<T*>(scratch->data());
    const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
    T* po = out.data<T>();
    std::optional<HeadsOuter<T>> staged;
    if (a.heads_inner) {
      staged.emplace(ctx, a, q.numel() + k.numel() + v.numel() + out.numel());
      pq = staged->stage(q, a.lq, a.d);
      pk = staged->stage(k, a.lk, a.d);
      pv = staged->stage(v, a.lk, a.dv);
      po = staged->place(out.numel());
    }
    scores(ctx, a, scale, pq, pk, s);
    launch_attention_softmax(s, lse.data<T>(), rows, a.lq, a.lk, attrs.causal, st);
    check_launch(ctx);
    if (a.dv > 0)
      row_major_gemm<T>(ctx, false, false, a.lq, a.dv, a.lk, T(1), s, a.lk, a.lq * a.lk, pv, a.dv,
                        a.lk * a.dv, T(0), po, a.dv, a.lq * a.dv, a.bh);
    if (staged) staged->unstage(po, out, a.lq, a.dv);
  }
};

template <typename T>
struct AttentionGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const auto& attrs = ctx.attrs<GradOf<ScaledDotProductAttentionOp>>();
    const Tensor q = typed_input<T>(ctx, 0), k = typed_input<T>(ctx, 1), v = typed_input<T>(ctx, 2);
    const Tensor o = typed_input<T>(ctx, 3), lse = typed_input<T>(ctx, 4),
                 dout = typed_input<T>(ctx, 5);
    const AttentionDims a = attention_dims(op, q.dims(), k.dims(), v.dims(),
                                           attention_heads_inner(op, attrs.layout));
    check_attention_grad_operands(op, a, o.dims(), lse.dims(), dout.dims());
    Tensor& dq = ctx.alloc_output(0, q.dims(), q.dtype());
    Tensor& dk = ctx.alloc_output(1, k.dims(), k.dtype());
    Tensor& dv = ctx.alloc_output(2, v.dims(), v.dtype());
    if (a.bh == 0 || a.lq == 0 || a.lk == 0 || (a.d == 0 && a.dv == 0)) {
      zero<T>(ctx, dq);
      zero<T>(ctx, dk);
      zero<T>(ctx, dv);
      return;
    }
    const cudaStream_t st = stream_of(ctx);
    const T scale = static_cast<T>(attention_scale(attrs.scale, a.d));
    const std::int64_t rows = a.bh * a.lq, plane = a.lq * a.lk;
    BufferRef scratch = scratch_buffer(ctx, sizeof(T) * (2 * rows * a.lk + rows));
    T* p = static_cast<T*>(scratch->data());
    T* dp = p + rows * a.lk;
    T* delta = dp + rows * a.lk;
    const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>(), *po = o.data<T>(),
            *pdo = dout.data<T>();
    T *pdq = dq.data<T>(), *pdk = dk.data<T>(), *pdv = dv.data<T>();
    std::optional<HeadsOuter<T>> staged;
    if (a.heads_inner) {
      staged.emplace(ctx, a, 2 * (q.numel() + k.numel() + v.numel()) + o.numel() + dout.numel());
      pq = staged->stage(q, a.lq, a.d);
      pk = staged->stage(k, a.lk, a.d);
      pv = staged->stage(v, a.lk, a.dv);
      po = staged->stage(o, a.lq, a.dv);
      pdo = staged->stage(dout, a.lq, a.dv);
      pdq = staged->place(q.numel());
      pdk = staged->place(k.numel());
      pdv = staged->place(v.numel());
    }
    // P = exp(scale · Q·Kᵀ - lse), 0 where masked; Δ = rowsum(dO ∘ O).
    scores(ctx, a, scale, pq, pk, p);
    launch_attention_probabilities(p, lse.data<T>(), pdo, po, delta, rows, a.lq, a.lk, a.dv,
                                   attrs.causal, st);
    check_launch(ctx);
    if (a.dv > 0) {
      // dV = Pᵀ·dO; dP = dO·Vᵀ
      row_major_gemm<T>(ctx, true, false, a.lk, a.dv, a.lq, T(1), p, a.lk, plane, pdo, a.dv,
                        a.lq * a.dv, T(0), pdv, a.dv, a.lk * a.dv, a.bh);
      row_major_gemm<T>(ctx, false, true, a.lq, a.lk, a.dv, T(1), pdo, a.dv, a.lq * a.dv, pv,
                        a.dv, a.lk * a.dv, T(0), dp, a.lk, plane, a.bh);
    } else {
      check_cuda(cudaMemsetAsync(dp, 0, sizeof(T) * rows * a.lk, st), "zeroing attention dP");
    }
    // dS = P ∘ (dP - Δ), in place of P.
    launch_attention_score_grad(p, static_cast<const T*>(dp), static_cast<const T*>(delta), rows,
                                a.lk, st);
    check_launch(ctx);
    if (a.d > 0) {
      // dQ = scale · dS·K; dK = scale · dSᵀ·Q
      row_major_gemm<T>(ctx, false, false, a.lq, a.d, a.lk, scale, p, a.lk, plane, pk, a.d,
                        a.lk * a.d, T(0), pdq, a.d, a.lq * a.d, a.bh);
      row_major_gemm<T>(ctx, true, false, a.lk, a.d, a.lq, scale, p, a.lk, plane, pq, a.d,
                        a.lq * a.d, T(0), pdk, a.d, a.lk * a.d, a.bh);
    }
    if (staged) {
      staged->unstage(pdq, dq, a.lq, a.d);
      staged->unstage(pdk, dk, a.lk, a.d);
      staged->unstage(pdv, dv, a.lk, a.dv);
    }
  }
};

}  // namespace

KILN_REGISTER_KERNELS(ScaledDotProductAttentionOp, Cuda, AttentionK, float, double);
KILN_REGISTER_KERNELS(GradOf<ScaledDotProductAttentionOp>, Cuda, AttentionGradK, float, double);

}  // namespace kiln::cuda
