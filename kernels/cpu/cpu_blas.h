// The GEMM every CPU kernel calls, and the intra-op thread count it and
// oneDNN's primitives run with. f32 GEMMs (but the smallest) go to oneDNN's
// sgemm where kiln has oneDNN (on x86 with AVX2), cut into blocks that give the same bits at
// any thread count (OpenBLAS's threading does not; and Debian's OpenBLAS
// picks its kernel by CPU model, which a virtual machine may hide: SSE3
// then, 5x slower on an AVX-512 CPU). f64 is OpenBLAS's.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// c = alpha · op(a) · op(b) + beta · c, row-major; every dim and leading
// dimension fits an int (callers check).
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc);
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta,
          double* c, std::int64_t ldc);

// Whether gemm_bf16 computes natively here (oneDNN's AVX512-BF16 or AMX
// kernels: 2-3x the f32 GEMM's speed); elsewhere bf16 products are widened
// to f32 by their callers.
bool native_bf16_gemm();

// c = op(a) · op(b) of bf16 matrices (bit patterns), row-major, each sum
// taken in f32 and rounded once to nearest even (oneDNN's matmul), split
// across the threads as the f32 GEMM is (the same bits at any thread
// count). False where !native_bf16_gemm() or oneDNN had no kernel for a
// part of c; c is then unspecified and the caller computes all of it.
bool gemm_bf16(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a,
               std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, std::uint16_t* c, std::int64_t ldc);

// Below this many multiply-adds OpenBLAS's lower call cost wins even on its
// fallback kernel (measured: 16x16x16 ties, 4x4x4 is 4x faster).
inline constexpr std::int64_t kOnednnMinFlops = 16 * 16 * 16;

}  // namespace kiln::cpu
