// How CUDA's attention runs: process-wide settings, read at each launch of
// kiln.scaled_dot_product_attention and its gradient. The CPU ignores them.
#pragma once

namespace kiln {

// Deterministic, the default: a pass over the key tiles per block of keys
// (dK, dV) and another over them per block of queries (dQ, recomputing the
// scores and dP): seven tensor-core products per tile pair, every sum in a
// fixed order, the same bits on every run. Atomic (bf16 and f16 on the
// register-tile kernels; f32, KILN_CUDA_FLASH=wmma, a mask operand and
// attention dropout stay deterministic):
// the key pass also adds each key tile's share of dQ to an f32 sum by
// atomic adds, as FlashAttention-2 and PyTorch's flash backward do — five
// products, no second pass, dQ's last bits may differ run to run.
enum class AttentionGradSum { Deterministic, Atomic };

// Thread-safe; takes effect for launches after the call.
void set_attention_grad_sum(AttentionGradSum sum) noexcept;
AttentionGradSum attention_grad_sum() noexcept;

// Which kernels f32 attention runs on (bf16 and f16 always take the fused
// ones; f64 and head dims above 128 the materialized ones), as PyTorch's
// SDPA backend switches choose. Auto, the default: materialized while the
// gradient's scores fit kAttentionScoresBudget, fused beyond. Fused: the
// shared-memory tiles with an online softmax, no [Lq, Lk] matrix in memory
// (FMA math, several times slower than the GEMMs on an H200). Materialized:
// every head's scores through strided-batched cuBLAS GEMMs into scratch
// (B·H·Lq·Lk floats, twice that in the gradient) and row passes, its GEMMs
// in TF32 under float32_matmul_precision() High.
enum class AttentionF32Kernels { Auto, Fused, Materialized };
inline constexpr unsigned long long kAttentionScoresBudget = 1ull << 30;  // bytes

// Thread-safe; takes effect for launches after the call.
void set_attention_f32_kernels(AttentionF32Kernels kernels) noexcept;
AttentionF32Kernels attention_f32_kernels() noexcept;

}  // namespace kiln
