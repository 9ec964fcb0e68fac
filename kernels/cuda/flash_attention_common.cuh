// Device helpers the fused attention kernels share (flash_attention.cu's
// shared-memory tiles, flash_attention_mma.cu's register tiles): element
// access in either 16-bit dtype, warp reductions, where a head's rows lie in
// either layout, which keys a query row sees, the host's dispatch over dtype
// and head dim, and the shared-memory opt-in. Device code private to kernels/cuda; reads
// launch.h and no runtime header but cuda_stream.h's check_cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "key_lengths.cuh"
#include "kiln/runtime/cuda_stream.h"
#include "launch.h"

namespace kiln::cuda::flash {

constexpr int kFlashThreads = 128, kFlashWarps = kFlashThreads / 32;

// An operand's element type in shared memory (E: float, __half,
// __nv_bfloat16) and in global memory (f32, or the 16-bit dtypes' bits).
template <typename E>
using Global = std::conditional_t<std::is_same_v<E, float>, float, std::uint16_t>;

template <typename E>
inline __device__ E load_elem(const Global<E>* p) {
  if constexpr (std::is_same_v<E, float>) return *p;
  else if constexpr (std::is_same_v<E, __half>) return __ushort_as_half(*p);
  else return __ushort_as_bfloat16(*p);
}
template <typename E>
inline __device__ E narrow(float x) {
  if constexpr (std::is_same_v<E, float>) return x;
  else if constexpr (std::is_same_v<E, __half>) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}
inline __device__ float widen(float x) { return x; }
inline __device__ float widen(__half x) { return __half2float(x); }
inline __device__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename E>
inline __device__ void store_elem(Global<E>* p, float x) {
  if constexpr (std::is_same_v<E, float>) *p = x;
  else if constexpr (std::is_same_v<E, __half>) *p = __half_as_ushort(__float2half_rn(x));
  else *p = __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

inline __device__ float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// A butterfly: every lane ends with the same bits (a + b == b + a).
inline __device__ float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Where head i (= batch·H + head) of a tensor with `len` rows of `width`
// begins, and the step from one of its rows to the next (AttentionDims').
inline __device__ std::int64_t head_offset(const FlashAttentionShape& s, std::int64_t i, std::int64_t len,
                                    std::int64_t width) {
  return s.heads_inner ? ((i / s.h) * len * s.h + i % s.h) * width : i * len * width;
}
inline __device__ std::int64_t row_step(const FlashAttentionShape& s, std::int64_t width) {
  return s.heads_inner ? s.h * width : width;
}
// The same for k, v (and the kernels' reads of them) seen from query head
// bh: its group's k / v head (AttentionDims::kv_offset).
inline __device__ std::int64_t kv_head_offset(const FlashAttentionShape& s, std::int64_t bh, std::int64_t len,
                                              std::int64_t width) {
  const std::int64_t j = bh / (s.h / s.hk);  // batch · Hk + its k / v head (H = group · Hk)
  return s.heads_inner ? ((j / s.hk) * len * s.hk + j % s.hk) * width : j * len * width;
}
inline __device__ std::int64_t kv_row_step(const FlashAttentionShape& s, std::int64_t width) {
  return s.heads_inner ? s.hk * width : width;
}
// Head bh's key count: its batch's key_lengths entry (clamped), or Lk.
inline __device__ std::int64_t head_keys(const FlashAttentionShape& s, std::int64_t bh) {
  return key_count(s.keys, bh / s.h, s.lk);
}

// Scaled score x of query row i and key j of head bh under the op's mask,
// if it has one: x plus the mask's element (of the operands' dtype E), or
// -inf where a bool mask is false. i < Lq and j < Lk.
template <typename E>
inline __device__ float masked_score(const FlashAttentionShape& s, std::int64_t bh, std::int64_t i, std::int64_t j,
                                     float x) {
  const ScoreMaskRef& m = s.mask;
  if (!m.data) return x;
  const std::int64_t at = bh / s.h * m.sb + bh % s.h * m.sh + i * m.si + j * m.sj;
  if (m.boolean) return static_cast<const std::uint8_t*>(m.data)[at] != 0 ? x : -INFINITY;
  return x + widen(load_elem<E>(static_cast<const Global<E>*>(m.data) + at));
}

inline std::int64_t tiles(std::int64_t n, int rows) { return (n + rows - 1) / rows; }

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current
// device: set once per device (not a stream operation, so after the first
// run none happens while a CUDA graph records).
template <auto kernel>
void allow_shared_memory(std::size_t bytes) {
  constexpr int kDevices = 64;
  static std::atomic<bool> done[kDevices] = {};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "finding the current CUDA device");
  if (device < kDevices && done[device].load(std::memory_order_acquire)) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)),
             "setting the fused attention kernel's shared memory");
  if (device < kDevices) done[device].store(true, std::memory_order_release);
}

// The tiles' head dim for D and Dv: 32, 64 or 128 (0: neither fits).
inline int tile_dim(const FlashAttentionShape& s) {
  const std::int64_t w = std::max(s.d, s.dv);
  return w <= 32 ? 32 : w <= 64 ? 64 : w <= 128 ? 128 : 0;
}

// f.template operator()<E, DH>() for dtype dt and head dim dh (32, 64, 128).
template <typename E, typename F>
void with_dim(int dh, F&& f) {
  if (dh == 32) f.template operator()<E, 32>();
  else if (dh == 64) f.template operator()<E, 64>();
  else f.template operator()<E, 128>();
}
template <typename F>
void with_types(DataType dt, int dh, F&& f) {
  if (dt == DataType::BFloat16) with_dim<__nv_bfloat16>(dh, f);
  else if (dt == DataType::Float16) with_dim<__half>(dh, f);
  else with_dim<float>(dh, f);
}


// The register-tile kernels for bf16 and f16 (flash_attention_mma.cu).
// Their largest dynamic shared memory at tile head dim dh (32, 64, 128).
std::size_t mma_shared_bytes(int dh);
// As launch_flash_attention_forward, dt bf16 or f16.
void launch_mma_forward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout, const void* q,
                        const void* k, const void* v, void* out, void* lse, cudaStream_t st);
// dq, dk and dv as launch_flash_attention_backward, from Δ already in delta;
// dq_sum non-null (never with dropout): dQ summed there by atomics
// (zeroed here), dq not written.
void launch_mma_backward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout, const void* q, const void* k,
                         const void* v, const void* lse, const void* dout, void* dq, void* dk,
                         void* dv, const float* delta, float* dq_sum, cudaStream_t st);

}  // namespace kiln::cuda::flash
