// cuBLAS pieces shared by the host halves that multiply matrices (matmul.cc,
// attention.cc; host compiler): status checks naming the op, the int range
// cuBLAS takes, and a row-major strided-batched GEMM for f32 / f64 (full
// precision, no TF32, as PyTorch's default).
#pragma once

#include <cublas_v2.h>

#include <climits>
#include <cstdint>

#include "context_stream.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/matmul_precision.h"

namespace kiln::cuda {

inline void check_cublas(const KernelContext& ctx, cublasStatus_t status) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_error(ErrorKind::Internal, "op '", ctx.op()->name(), "': cuBLAS error ",
                cublasGetStatusName(status));
}

// v as cuBLAS's int; kiln::Error naming the op beyond INT_MAX.
inline int to_int(const KernelContext& ctx, std::int64_t v) {
  if (v > INT_MAX)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has a matrix dim of ", v,
                ", beyond what cuBLAS takes (", INT_MAX, ")");
  return static_cast<int>(v);
}

// The cuBLAS handle of ctx's device, bound to ctx's stream.
inline cublasHandle_t cublas_of(const KernelContext& ctx) {
  auto* stream = dynamic_cast<CudaStream*>(ctx.stream());
  if (!stream)
    throw_error(ErrorKind::PreconditionNotMet, "op '", ctx.op()->name(),
                "' runs a CUDA kernel but was given no CUDA stream");
  return static_cast<cublasHandle_t>(cuda_context(stream->device()).cublas(*stream));
}

// Column-major C = alpha · op(A) · op(B) + beta · C, `batch` times with the
// given element strides between matrices.
// f32: full precision, or TF32 on tensor cores when the process allows it
// (kiln/runtime/matmul_precision.h).
inline cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, float alpha, const float* a, int lda,
                                   long long sa, const float* b, int ldb, long long sb, float beta,
                                   float* c, int ldc, long long sc, int batch) {
  if (float32_matmul_precision() == MatmulPrecision::High)
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, sa, b, CUDA_R_32F, ldb,
                                      sb, &beta, c, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F_FAST_TF32,
                                      CUBLAS_GEMM_DEFAULT);
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c,
                                   ldc, sc, batch);
}
inline cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, double alpha, const double* a, int lda,
                                   long long sa, const double* b, int ldb, long long sb,
                                   double beta, double* c, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c,
                                   ldc, sc, batch);
}

// The same for 16-bit floats (`dt`: CUDA_R_16BF or CUDA_R_16F, raw bits):
// C = op(A) · op(B) on tensor cores, accumulated in f32, rounded once.
inline cublasStatus_t gemm_batched_half(cublasHandle_t h, cudaDataType dt, cublasOperation_t ta,
                                        cublasOperation_t tb, int m, int n, int k,
                                        const std::uint16_t* a, int lda, long long sa,
                                        const std::uint16_t* b, int ldb, long long sb,
                                        std::uint16_t* c, int ldc, long long sc, int batch) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, a, dt, lda, sa, b, dt, ldb, sb, &beta, c,
                                    dt, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// Row-major C = alpha · op(A) · op(B) + beta · C (C is m × n), batched: the
// column-major Cᵀ = op(B)ᵀ · op(A)ᵀ, so cuBLAS gets the operands swapped.
template <typename T>
void row_major_gemm(const KernelContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n,
                    std::int64_t k, T alpha, const T* a, std::int64_t lda, long long sa,
                    const T* b, std::int64_t ldb, long long sb, T beta, T* c, std::int64_t ldc,
                    long long sc, std::int64_t batch) {
  check_cublas(ctx, gemm_batched(cublas_of(ctx), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(ctx, n), to_int(ctx, m),
                                 to_int(ctx, k), alpha, b, to_int(ctx, ldb), sb, a,
                                 to_int(ctx, lda), sa, beta, c, to_int(ctx, ldc), sc,
                                 to_int(ctx, batch)));
}

}  // namespace kiln::cuda
