// The launchers of flash_attention_mma.cuh's register-tile attention
// kernels (bf16, f16), on the hardware's warp-level instructions.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "warp_mma.cuh"
#include "flash_attention_mma.cuh"

namespace kiln::cuda::flash {
namespace {

// Whether every operand's rows can be read 16 bytes at a time.
bool vector_rows(const FlashAttentionShape& s, std::initializer_list<const void*> ptrs) {
  if (s.d % 8 != 0 || s.dv % 8 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// f.template operator()<E, DH>() for 16-bit dt and head dim dh.
template <typename F>
void with_half_types(DataType dt, int dh, F&& f) {
  if (dt == DataType::BFloat16) with_dim<__nv_bfloat16>(dh, f);
  else with_dim<__half>(dh, f);
}

}  // namespace

std::size_t mma_shared_bytes(int dh) {
  std::size_t bytes = 0;
  with_dim<__half>(dh, [&]<typename E, int DH>() {
    bytes = std::max({kForwardBytes<E, DH>, kKvAtomicBytes<E, DH>, kQBytes<E, DH>});
  });
  return bytes;
}

void launch_mma_forward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout, const void* q,
                        const void* k, const void* v, void* out, void* lse, cudaStream_t st) {
  const bool vec = vector_rows(s, {q, k, v});
  with_half_types(dt, tile_dim(s), [&]<typename E, int DH>() {
    using G = Global<E>;
    constexpr std::size_t bytes = kForwardBytes<E, DH>;
    const dim3 grid(static_cast<unsigned>(s.bh), static_cast<unsigned>(tiles(s.lq, kBlockRows)));
    const auto run = [&]<bool kDropout>() {
      allow_shared_memory<mma_forward<E, DH, kDropout>>(bytes);
      mma_forward<E, DH, kDropout><<<grid, kMmaThreads, bytes, st>>>(
          s, dropout, vec, static_cast<const G*>(q), static_cast<const G*>(k), static_cast<const G*>(v),
          static_cast<G*>(out), static_cast<float*>(lse));
    };
    if (dropout.key) run.template operator()<true>();
    else run.template operator()<false>();
  });
}

void launch_mma_backward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout, const void* q,
                         const void* k, const void* v, const void* lse, const void* dout, void* dq, void* dk,
                         void* dv, const float* delta, float* dq_sum, cudaStream_t st) {
  const bool vec = vector_rows(s, {q, k, v, dout});
  with_half_types(dt, tile_dim(s), [&]<typename E, int DH>() {
    using G = Global<E>;
    const auto *gq = static_cast<const G*>(q), *gk = static_cast<const G*>(k),
               *gv = static_cast<const G*>(v), *gdo = static_cast<const G*>(dout);
    const auto* gl = static_cast<const float*>(lse);
    const dim3 kv_grid(static_cast<unsigned>(s.bh), static_cast<unsigned>(tiles(s.lk, kBlockRows)));
    if (dq_sum) {
      check_cuda(cudaMemsetAsync(dq_sum, 0, sizeof(float) * s.bh * s.lq * s.d, st),
                 "zeroing the fused attention's dQ sums");
      allow_shared_memory<mma_backward_kv<E, DH, true>>(kKvAtomicBytes<E, DH>);
      mma_backward_kv<E, DH, true><<<kv_grid, kMmaThreads, kKvAtomicBytes<E, DH>, st>>>(
          s, DropoutRef{}, vec, gq, gk, gv, gl, gdo, delta, static_cast<G*>(dk), static_cast<G*>(dv), dq_sum);
      return;
    }
    const dim3 q_grid(static_cast<unsigned>(s.bh), static_cast<unsigned>(tiles(s.lq, kBlockRows)));
    const auto run = [&]<bool kDropout>() {
      allow_shared_memory<mma_backward_kv<E, DH, false, kDropout>>(kKvBytes<E, DH>);
      mma_backward_kv<E, DH, false, kDropout><<<kv_grid, kMmaThreads, kKvBytes<E, DH>, st>>>(
          s, dropout, vec, gq, gk, gv, gl, gdo, delta, static_cast<G*>(dk), static_cast<G*>(dv), nullptr);
      allow_shared_memory<mma_backward_q<E, DH, kDropout>>(kQBytes<E, DH>);
      mma_backward_q<E, DH, kDropout><<<q_grid, kMmaThreads, kQBytes<E, DH>, st>>>(
          s, dropout, vec, gq, gk, gv, gl, gdo, delta, static_cast<G*>(dq));
    };
    if (dropout.key) run.template operator()<true>();
    else run.template operator()<false>();
  });
}

}  // namespace kiln::cuda::flash
