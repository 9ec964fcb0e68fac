// CUDA kernel of kiln.matmul through cuBLAS (full f32 / f64 precision, no
// TF32, as PyTorch's default; bf16 and f16 on tensor cores with f32
// accumulation, cublasGemmStridedBatchedEx). Row-major C = op(A)·op(B) is column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so cuBLAS gets the operands swapped. Batch dims
// broadcast as on the CPU (kiln/kernel/matmul_shape.h): one strided-batched
// call when each operand is either one matrix or one per output matrix,
// otherwise one call per output matrix.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "cublas_util.h"
#include "matmul_product.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/matmul_shape.h"

namespace kiln::cuda {
namespace {

// Column-major C = op(A) · op(B), `batch` times: f32 / f64 through their
// GEMMs, the 16-bit floats (T = std::uint16_t, dtype D) through GemmEx.
template <typename T, DataType D>
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const T* a, int lda, long long sa, const T* b, int ldb, long long sb, T* c, int ldc,
                    long long sc, int batch) {
  if constexpr (std::is_same_v<T, std::uint16_t>)
    return gemm_batched_half(h, D == DataType::BFloat16 ? CUDA_R_16BF : CUDA_R_16F, ta, tb, m, n, k, a, lda,
                             sa, b, ldb, sb, c, ldc, sc, batch);
  else
    return gemm_batched(h, ta, tb, m, n, k, T(1), a, lda, sa, b, ldb, sb, T(0), c, ldc, sc, batch);
}

// x · y (dtype D; copies: they keep their buffers should the output's
// variable be one of theirs) into ctx's output 0, allocated here.
template <typename T, DataType D>
Tensor& product(KernelContext& ctx, const Tensor x, const Tensor y, bool transpose_x, bool transpose_y) {
  if (x.dtype() != D) throw_input_dtype(ctx, 0, D);
  if (y.dtype() != D) throw_input_dtype(ctx, 1, D);
  const MatmulShape s = matmul_shape(ctx.op()->name(), x.dims(), y.dims(), transpose_x, transpose_y);
  Tensor& out = ctx.alloc_output(0, s.out_dims, x.dtype());
  const cudaStream_t stream = stream_of(ctx);
  if (s.batch == 0 || s.m == 0 || s.n == 0) return out;
  T* o = static_cast<T*>(out.raw_data());
  if (s.k == 0) {  // an empty sum: zeros
    check_cuda(cudaMemsetAsync(o, 0, out.bytes(), stream), "zeroing a matmul result");
    return out;
  }
  const cublasHandle_t h = cublas_of(ctx);
  const int m = to_int(ctx, s.m), n = to_int(ctx, s.n), k = to_int(ctx, s.k);
  const cublasOperation_t op_x = transpose_x ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_y = transpose_y ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldx = transpose_x ? m : k, ldy = transpose_y ? k : n;
  const long long x_mat = s.m * s.k, y_mat = s.k * s.n, o_mat = s.m * s.n;
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* yp = static_cast<const T*>(y.raw_data());
  const bool x_flat = s.x_count == 1 || s.x_count == s.batch;
  const bool y_flat = s.y_count == 1 || s.y_count == s.batch;
  if (x_flat && y_flat) {
    check_cublas(ctx, gemm<T, D>(h, op_y, op_x, n, m, k, yp, ldy, s.y_count == 1 ? 0 : y_mat, xp, ldx,
                                 s.x_count == 1 ? 0 : x_mat, o, n, o_mat, to_int(ctx, s.batch)));
    return out;
  }
  // Both operands broadcast along different batch dims: walk the output
  // batch index (an odometer), moving x's and y's matrix index along.
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t xo = 0, yo = 0;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    check_cublas(ctx, gemm<T, D>(h, op_y, op_x, n, m, k, yp + yo * y_mat, ldy, 0, xp + xo * x_mat, ldx, 0,
                                 o + b * o_mat, n, 0, 1));
    for (int i = s.batch_rank - 1; i >= 0; --i) {
      xo += s.x_step[i];
      yo += s.y_step[i];
      if (++idx[i] < s.out_batch[i]) break;
      xo -= s.x_step[i] * s.out_batch[i];
      yo -= s.y_step[i] * s.out_batch[i];
      idx[i] = 0;
    }
  }
  return out;
}

template <typename T, DataType D = data_type_of<T>>
void matmul_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<MatmulOp>();
  product<T, D>(ctx, ctx.input(0), ctx.input(1), a.transpose_x, a.transpose_y);
}

}  // namespace

Tensor& matmul_product(KernelContext& ctx, const Tensor& x, const Tensor& y, DataType dtype, bool transpose_x,
                       bool transpose_y) {
  switch (dtype) {
    case DataType::Float32: return product<float, DataType::Float32>(ctx, x, y, transpose_x, transpose_y);
    case DataType::Float64: return product<double, DataType::Float64>(ctx, x, y, transpose_x, transpose_y);
    case DataType::BFloat16:
      return product<std::uint16_t, DataType::BFloat16>(ctx, x, y, transpose_x, transpose_y);
    case DataType::Float16:
      return product<std::uint16_t, DataType::Float16>(ctx, x, y, transpose_x, transpose_y);
    default:
      throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no CUDA product for ",
                  to_string(dtype));
  }
}

KILN_REGISTER_KERNEL(MatmulOp, Cuda, Float32, matmul_kernel<float>);
KILN_REGISTER_KERNEL(MatmulOp, Cuda, Float64, matmul_kernel<double>);
KILN_REGISTER_KERNEL(MatmulOp, Cuda, BFloat16, matmul_kernel<std::uint16_t, DataType::BFloat16>);
KILN_REGISTER_KERNEL(MatmulOp, Cuda, Float16, matmul_kernel<std::uint16_t, DataType::Float16>);

}  // namespace kiln::cuda
