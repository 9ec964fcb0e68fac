// CUDA kernels of kiln.scaled_dot_product_attention and its gradient: the
// CPU's algorithm (attention.cc there) over all heads at once — the scores
// of every (batch, head) pair through one strided-batched cuBLAS GEMM into
// device scratch ([B·H, Lq, Lk]), the row passes of attention.cu, then GEMMs
// by V (and, for the gradient, by dO, K and Q). The gradient recomputes the
// probabilities from q, k and the saved log-sum-exp, as the CPU does.
//
// Unlike the CPU's tiles this holds each head's whole score matrix (2× that
// for the gradient) for the duration of the op: B·H·Lq·Lk values, freed to
// the stream's cache after it. Sequences long enough for that to matter want
// a fused tile kernel (FlashAttention's), which this is not.
#include <cuda_runtime_api.h>

#include <bit>
#include <cstdint>
#include <limits>
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

template <typename T>
struct AttentionK {
  static void run(KernelContext& ctx) {
    const auto& attrs = ctx.attrs<ScaledDotProductAttentionOp>();
    const Tensor q = typed_input<T>(ctx, 0), k = typed_input<T>(ctx, 1), v = typed_input<T>(ctx, 2);
    const AttentionDims a = attention_dims(ctx.op()->name(), q.dims(), k.dims(), v.dims());
    const Dims& qd = q.dims();
    const std::int64_t out_shape[] = {qd[0], qd[1], a.lq, a.dv};
    Tensor& out = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(out_shape, 4)), q.dtype());
    Tensor& lse = ctx.alloc_output(1, Dims(std::span<const std::int64_t>(out_shape, 3)), q.dtype());
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
    scores(ctx, a, scale, q.data<T>(), k.data<T>(), s);
    launch_attention_softmax(s, lse.data<T>(), rows, a.lq, a.lk, attrs.causal, st);
    check_launch(ctx);
    if (a.dv > 0)
      row_major_gemm<T>(ctx, false, false, a.lq, a.dv, a.lk, T(1), s, a.lk, a.lq * a.lk,
                        v.data<T>(), a.dv, a.lk * a.dv, T(0), out.data<T>(), a.dv, a.lq * a.dv,
                        a.bh);
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
    const AttentionDims a = attention_dims(op, q.dims(), k.dims(), v.dims());
    check_attention_grad_operands(op, q.dims(), a, o.dims(), lse.dims(), dout.dims());
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
    // P = exp(scale · Q·Kᵀ - lse), 0 where masked; Δ = rowsum(dO ∘ O).
    scores(ctx, a, scale, q.data<T>(), k.data<T>(), p);
    launch_attention_probabilities(p, lse.data<T>(), dout.data<T>(), o.data<T>(), delta, rows,
                                   a.lq, a.lk, a.dv, attrs.causal, st);
    check_launch(ctx);
    if (a.dv > 0) {
      // dV = Pᵀ·dO; dP = dO·Vᵀ
      row_major_gemm<T>(ctx, true, false, a.lk, a.dv, a.lq, T(1), p, a.lk, plane, dout.data<T>(),
                        a.dv, a.lq * a.dv, T(0), dv.data<T>(), a.dv, a.lk * a.dv, a.bh);
      row_major_gemm<T>(ctx, false, true, a.lq, a.lk, a.dv, T(1), dout.data<T>(), a.dv,
                        a.lq * a.dv, v.data<T>(), a.dv, a.lk * a.dv, T(0), dp, a.lk, plane, a.bh);
    } else {
      check_cuda(cudaMemsetAsync(dp, 0, sizeof(T) * rows * a.lk, st), "zeroing attention dP");
    }
    // dS = P ∘ (dP - Δ), in place of P.
    launch_attention_score_grad(p, static_cast<const T*>(dp), static_cast<const T*>(delta), rows,
                                a.lk, st);
    check_launch(ctx);
    if (a.d > 0) {
      // dQ = scale · dS·K; dK = scale · dSᵀ·Q
      row_major_gemm<T>(ctx, false, false, a.lq, a.d, a.lk, scale, p, a.lk, plane, k.data<T>(),
                        a.d, a.lk * a.d, T(0), dq.data<T>(), a.d, a.lq * a.d, a.bh);
      row_major_gemm<T>(ctx, true, false, a.lk, a.d, a.lq, scale, p, a.lk, plane, q.data<T>(),
                        a.d, a.lq * a.d, T(0), dk.data<T>(), a.d, a.lk * a.d, a.bh);
    }
  }
};

}  // namespace

KILN_REGISTER_KERNELS(ScaledDotProductAttentionOp, Cuda, AttentionK, float, double);
KILN_REGISTER_KERNELS(GradOf<ScaledDotProductAttentionOp>, Cuda, AttentionGradK, float, double);

}  // namespace kiln::cuda
