// How CUDA's fused attention gradient sums dQ: process-wide, read at each
// launch of kiln.scaled_dot_product_attention_grad. The CPU ignores it.
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

}  // namespace kiln
