// The warp-level tensor-core and copy instructions kiln's register-tile
// kernels use, as inline PTX (sm_80 and later; kiln builds for sm_90):
// mma.sync m16n8k16 with f32 accumulators, ldmatrix (.x4, plain and .trans), and cp.async with its
// groups. Device code private to kernels/cuda; a CPU emulation of the same
// functions (test/kernel/warp_emulation.h) stands in for it in tests.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kiln::cuda {

// d += a · b for one warp: a 16×16 (row-major fragments), b 16×8
// (column-major fragments), E __nv_bfloat16 or __half.
template <typename E>
__device__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  if constexpr (std::is_same_v<E, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Four 8×8 matrices of 16-bit elements in shared memory, transposed: lanes
// 8m–8m+7 give the rows of matrix m (16-byte aligned); lane l gets (row
// 2(l % 4), column l / 4) and the row after it of each, the lower row in
// the low half.
__device__ inline void load_matrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  const auto at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// Four 8×8 matrices of 16-bit elements in shared memory: lanes 8m–8m+7
// give the rows of matrix m (16-byte aligned); lane l gets (row l / 4,
// columns 2(l % 4) and the one after it) of each, the lower column in the
// low half.
__device__ inline void load_matrix_x4(std::uint32_t (&r)[4], const void* row) {
  const auto at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// Asynchronous copies from global to shared memory: 16 bytes past L1, or 4
// through it; zeros where !valid (src is then not read).
__device__ inline void copy_async16(void* dst, const void* src, bool valid) {
  const auto at = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ inline void copy_async4(void* dst, const void* src, bool valid) {
  const auto at = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(at), "l"(src),
               "r"(valid ? 4 : 0));
}
// The copies this thread started since its last commit form one group.
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` of this thread's groups are in flight; no
// plain shared-memory access moves across it.
template <int pending>
__device__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

}  // namespace kiln::cuda
