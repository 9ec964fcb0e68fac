// CPU kernel of kiln.matmul through OpenBLAS GEMM: x [..., M, K] (or
// [..., K, M] with transpose_x) times y [..., K, N] (or [..., N, K] with
// transpose_y), batch dims broadcast numpy-style. One GEMM call when y has no
// batch (x's batch rows fold into M), otherwise one call per output matrix.
// The OpenBLAS thread count is left alone (kiln/kernel/blas.h). Also
// kiln.det.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/matmul_shape.h"
#include "unary_kernel_math.h"
#include "vector_math.h"

namespace kiln {
namespace {

// One output column (n == 1) of a small matrix: plain loops. A BLAS call
// costs ~100-200 ns before any arithmetic (argument checks, a work buffer
// from OpenBLAS's pool under a mutex), several times a 16x16 matrix-vector
// product (~40 ns) — the seed model's Linear(16, 1) makes two per step.
// Each output is summed over k in order, like a textbook loop.
constexpr std::int64_t kSmallGemvElements = 1024;  // m * k; measured: 32x32 still wins

template <typename T>
bool small_gemv(bool ta, bool tb, int m, int n, int k, const T* a, int lda, const T* b, int ldb,
                T* c, int ldc) {
  if (n != 1 || std::int64_t(m) * k > kSmallGemvElements) return false;
  const std::size_t bs = tb ? 1 : static_cast<std::size_t>(ldb);  // b's step along k
  if (!ta) {
    // Eight rows at a time: eight independent sums instead of one chain of
    // dependent adds (a row alone waits on the add latency at every k).
    constexpr int kRows = 8;
    int i = 0;
    for (; i + kRows <= m; i += kRows) {
      T s[kRows] = {};
      for (int p = 0; p < k; ++p) {
        const T bp = b[p * bs];
        // Unrolled, so that the sums live in registers, not on the stack.
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) s[r] += a[std::size_t(i + r) * lda + p] * bp;
      }
      for (int r = 0; r < kRows; ++r) c[std::size_t(i + r) * ldc] = s[r];
    }
    for (; i < m; ++i) {
      const T* row = a + std::size_t(i) * lda;
      T s = 0;
      for (int p = 0; p < k; ++p) s += row[p] * b[p * bs];
      c[std::size_t(i) * ldc] = s;
    }
  } else if (ldc == 1) {  // a is [k, m]: walk its rows, all outputs at once
    // A unit stride the compiler sees: the adds over i vectorize.
    T* __restrict out = c;
    for (int i = 0; i < m; ++i) out[i] = 0;
    for (int p = 0; p < k; ++p) {
      const T bp = b[p * bs];
      const T* __restrict row = a + std::size_t(p) * lda;
      // Blocks of eight, unrolled: straight-line code the compiler's
      // block vectorizer turns into vector adds at -O2.
      int i = 0;
      for (; i + 8 <= m; i += 8) {
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) out[i + r] += row[i + r] * bp;
      }
      for (; i < m; ++i) out[i] += row[i] * bp;
    }
  } else {
    for (int i = 0; i < m; ++i) c[std::size_t(i) * ldc] = 0;
    for (int p = 0; p < k; ++p) {
      const T bp = b[p * bs];
      const T* row = a + std::size_t(p) * lda;
      for (int i = 0; i < m; ++i) c[std::size_t(i) * ldc] += row[i] * bp;
    }
  }
  return true;
}

void gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float* c, int ldc) {
  if (small_gemv(ta, tb, m, n, k, a, lda, b, ldb, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
void gemm(bool ta, bool tb, int m, int n, int k, const double* a, int lda, const double* b, int ldb,
          double* c, int ldc) {
  if (small_gemv(ta, tb, m, n, k, a, lda, b, ldb, c, ldc)) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

int to_blas_int(const KernelContext& ctx, std::int64_t v) {
  if (v > INT_MAX)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has a matrix dim of ", v,
                ", beyond what the BLAS takes (", INT_MAX, ")");
  return static_cast<int>(v);
}

// Output 0 = x · y (inputs 0 and 1) with these transposes.
template <typename T>
void matmul_product(KernelContext& ctx, const MatmulOp::Attributes& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  if (x.dtype() != y.dtype())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' operands must have one dtype, got ", to_string(x.dtype()), " and ",
                to_string(y.dtype()));
  const MatmulShape s =
      matmul_shape(ctx.op()->name(), x.dims(), y.dims(), a.transpose_x, a.transpose_y);
  const std::int64_t m = s.m, n = s.n, k = s.k, batch = s.batch, y_count = s.y_count;
  const int br = s.batch_rank;
  const std::int64_t* out_d = s.out_batch;
  const std::int64_t* x_step = s.x_step;
  const std::int64_t* y_step = s.y_step;
  Tensor& out = ctx.alloc_output(0, s.out_dims, x.dtype());
  T* o = out.data<T>();
  const T* xp = x.data<T>();
  const T* yp = y.data<T>();
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {  // empty sum: zeros (and no BLAS call with a zero leading dim)
    std::memset(o, 0, out.bytes());
    return;
  }
  const int ik = to_blas_int(ctx, k), in = to_blas_int(ctx, n);
  const int lda = a.transpose_x ? to_blas_int(ctx, m) : ik;
  const int ldb = a.transpose_y ? ik : in;
  if (y_count == 1 && !a.transpose_x) {
    // y is one matrix and x's matrices are consecutive rows: one GEMM.
    gemm(false, a.transpose_y, to_blas_int(ctx, batch * m), in, ik, xp, lda, yp, ldb, o, in);
    return;
  }
  const int im = to_blas_int(ctx, m);
  const std::int64_t x_mat = m * k, y_mat = k * n, o_mat = m * n;
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t xo = 0, yo = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    gemm(a.transpose_x, a.transpose_y, im, in, ik, xp + xo * x_mat, lda, yp + yo * y_mat, ldb,
         o + b * o_mat, in);
    // Odometer over the output batch index, moving x's and y's matrix index along.
    for (int i = br - 1; i >= 0; --i) {
      xo += x_step[i];
      yo += y_step[i];
      if (++idx[i] < out_d[i]) break;
      xo -= x_step[i] * out_d[i];
      yo -= y_step[i] * out_d[i];
      idx[i] = 0;
    }
  }
}

template <typename T>
void matmul_kernel(KernelContext& ctx) {
  matmul_product<T>(ctx, ctx.attrs<MatmulOp>());
}

template <typename T>
using ActivationFn = void (*)(const T* x, T* out, std::int64_t n);
template <typename T, typename... Maths>
std::vector<ActivationFn<T>> activation_table(MathList<Maths...>) {
  return {&cpu::map_elementwise<cpu::KernelMath<Maths>, T>...};
}

// kiln.fused_matmul: the product, then out[…, j] = out[…, j] + bias[j] (as
// kiln.add's broadcast loop computes it), then the activation through the
// unary kernels' loop, a tile at a time from a copy (the loop reads and
// writes distinct memory).
template <typename T>
void fused_matmul_kernel(KernelContext& ctx) {
  static const std::vector<ActivationFn<T>> activations = activation_table<T>(UnaryFamily{});
  const auto& a = ctx.attrs<FusedMatmulOp>();
  // Read the bias before the product's output is allocated (it may reuse
  // a buffer only the inputs held).
  const Tensor* bias = ctx.num_inputs() > 2 ? &ctx.input(2) : nullptr;
  const Tensor bias_ref = bias ? *bias : Tensor();
  matmul_product<T>(ctx, MatmulOp::Attributes{a.transpose_x, a.transpose_y});
  Tensor& out = ctx.output(0);
  const std::int64_t total = out.numel();
  if (total == 0) return;
  T* o = out.data<T>();
  if (bias) {
    if (bias_ref.dtype() != out.dtype())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' bias is ",
                  to_string(bias_ref.dtype()), ", the product ", to_string(out.dtype()));
    const std::int64_t n = out.dims().rank() ? out.dims()[out.dims().rank() - 1] : 1;
    const std::int64_t bn = bias_ref.numel();
    if (bn != n && bn != 1)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' bias has ", bn,
                  " elements: it must have the product's last dim (", n, ") or one");
    const T* b = bias_ref.data<T>();
    if (bn == 1) {
      const T b0 = b[0];
      for (std::int64_t i = 0; i < total; ++i) o[i] = AddMath::forward(o[i], b0);
    } else {
      for (std::int64_t r = 0; r < total; r += n) {
        T* __restrict row = o + r;
        for (std::int64_t j = 0; j < n; ++j) row[j] = AddMath::forward(row[j], b[j]);
      }
    }
  }
  if (a.activation.index >= 0) {
    const ActivationFn<T> act = activations[static_cast<std::size_t>(a.activation.index)];
    constexpr std::int64_t kTile = 512;
    T tile[kTile];
    for (std::int64_t t0 = 0; t0 < total; t0 += kTile) {
      const std::int64_t len = std::min(kTile, total - t0);
      std::copy(o + t0, o + t0 + len, tile);
      act(tile, o + t0, len);
    }
  }
}

// kiln.det: per matrix, LU with partial pivoting in double.
template <typename T>
void det_kernel(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Dims& d = x.dims();
  const std::string_view op = ctx.op()->name();
  if (d.rank() < 2 || d[d.rank() - 1] != d[d.rank() - 2])
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' needs square matrices [..., n, n], got [", d.to_string(), "]");
  const std::int64_t n = d[d.rank() - 1];
  std::vector<std::int64_t> od(d.begin(), d.end() - 2);
  Tensor& out =
      ctx.alloc_output(0, Dims(std::span<const std::int64_t>(od.data(), od.size())), x.dtype());
  const std::int64_t batch = out.numel();
  const T* px = x.data<T>();
  T* po = out.data<T>();
  std::vector<double> a(static_cast<std::size_t>(n * n));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < n * n; ++i) a[static_cast<std::size_t>(i)] = px[b * n * n + i];
    double det = 1;
    for (std::int64_t c = 0; c < n && det != 0; ++c) {
      std::int64_t p = c;
      for (std::int64_t r = c + 1; r < n; ++r)
        if (std::abs(a[static_cast<std::size_t>(r * n + c)]) >
            std::abs(a[static_cast<std::size_t>(p * n + c)]))
          p = r;
      if (a[static_cast<std::size_t>(p * n + c)] == 0) {
        det = 0;
        break;
      }
      if (p != c) {
        for (std::int64_t k = 0; k < n; ++k)
          std::swap(a[static_cast<std::size_t>(p * n + k)], a[static_cast<std::size_t>(c * n + k)]);
        det = -det;
      }
      const double piv = a[static_cast<std::size_t>(c * n + c)];
      det *= piv;
      for (std::int64_t r = c + 1; r < n; ++r) {
        const double f = a[static_cast<std::size_t>(r * n + c)] / piv;
        for (std::int64_t k = c; k < n; ++k)
          a[static_cast<std::size_t>(r * n + k)] -= f * a[static_cast<std::size_t>(c * n + k)];
      }
    }
    po[b] = static_cast<T>(det);
  }
}

}  // namespace

KILN_REGISTER_KERNEL(MatmulOp, Cpu, Float32, matmul_kernel<float>);
KILN_REGISTER_KERNEL(MatmulOp, Cpu, Float64, matmul_kernel<double>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cpu, Float32, fused_matmul_kernel<float>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cpu, Float64, fused_matmul_kernel<double>);
KILN_REGISTER_KERNEL(DetOp, Cpu, Float32, det_kernel<float>);
KILN_REGISTER_KERNEL(DetOp, Cpu, Float64, det_kernel<double>);

}  // namespace kiln
