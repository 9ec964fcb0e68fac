// CPU kernels of softmax, log_softmax (along any axis) and
// softmax_with_cross_entropy (classes on the last axis). The input is seen
// as [outer, C, inner]: inner == 1 (the last axis, the common case) runs
// contiguous rows; otherwise columns are processed a row of `inner` at a
// time with per-column max / sum kept in a per-thread scratch buffer.
// -O2 (debugoptimized) uses GCC's "very-cheap" vectorizer cost model, which
// leaves loops of unknown trip count scalar; kernels want them vectorized.
// no-trapping-math: kiln never traps on floating-point exceptions, and
// without it GCC keeps a float comparison (a clamp, a choice) as a branch,
// which stops the loop from vectorizing.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/nn_ops.h"
#include <algorithm>
#include <cstring>
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::cpu {
namespace {

// One contiguous row of C: out = softmax(x) or log_softmax(x).
template <typename T, bool Log>
void softmax_row(const T* __restrict x, T* __restrict out, std::int64_t c) {
  T m = x[0];
  for (std::int64_t j = 1; j < c; ++j) m = x[j] > m ? x[j] : m;
  if (std::isinf(m) && m < 0) m = 0;  // a row of -inf: avoid (-inf) - (-inf)
  T s = 0;
  if constexpr (Log) {
    for (std::int64_t j = 0; j < c; ++j) s += fast_exp(x[j] - m);
    const T lse = m + std::log(s);
    for (std::int64_t j = 0; j < c; ++j) out[j] = x[j] - lse;
  } else {
    for (std::int64_t j = 0; j < c; ++j) {
      out[j] = fast_exp(x[j] - m);
      s += out[j];
    }
    const T inv = T(1) / s;
    for (std::int64_t j = 0; j < c; ++j) out[j] *= inv;
  }
}

// A [C, inner] block (stride `inner` between classes): softmax along C for
// each of the inner columns.
template <typename T, bool Log>
void softmax_block(const T* x, T* out, std::int64_t c, std::int64_t inner, T* m, T* s) {
  for (std::int64_t k = 0; k < inner; ++k) m[k] = x[k];
  for (std::int64_t j = 1; j < c; ++j) {
    const T* __restrict xr = x + j * inner;
    for (std::int64_t k = 0; k < inner; ++k) m[k] = xr[k] > m[k] ? xr[k] : m[k];
  }
  for (std::int64_t k = 0; k < inner; ++k) {
    if (std::isinf(m[k]) && m[k] < 0) m[k] = 0;
    s[k] = 0;
  }
  for (std::int64_t j = 0; j < c; ++j) {
    const T* __restrict xr = x + j * inner;
    T* __restrict orow = out + j * inner;
    for (std::int64_t k = 0; k < inner; ++k) {
      T e = fast_exp(xr[k] - m[k]);
      if constexpr (!Log) orow[k] = e;
      s[k] += e;
    }
  }
  if constexpr (Log) {
    for (std::int64_t k = 0; k < inner; ++k) s[k] = m[k] + std::log(s[k]);  // log-sum-exp
    for (std::int64_t j = 0; j < c; ++j) {
      const T* __restrict xr = x + j * inner;
      T* __restrict orow = out + j * inner;
      for (std::int64_t k = 0; k < inner; ++k) orow[k] = xr[k] - s[k];
    }
  } else {
    for (std::int64_t k = 0; k < inner; ++k) s[k] = T(1) / s[k];
    for (std::int64_t j = 0; j < c; ++j) {
      T* __restrict orow = out + j * inner;
      for (std::int64_t k = 0; k < inner; ++k) orow[k] *= s[k];
    }
  }
}


template <typename OpT, typename T, bool Log>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& x = typed_input<T>(ctx, 0);
  const Dims& d = x.dims();
  const std::int64_t rank = d.rank();
  std::int64_t axis = ctx.attrs<OpT>().axis;
  if (rank == 0 || axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axis ", axis,
                " is out of range for an input of dims [", d.to_string(), "]");
  if (axis < 0) axis += rank;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < axis; ++i) outer *= d[static_cast<int>(i)];
  for (std::int64_t i = axis + 1; i < rank; ++i) inner *= d[static_cast<int>(i)];
  const std::int64_t c = d[static_cast<int>(axis)];
  const Tensor src = x;  // keeps the input alive while the output is (re)allocated
  Tensor& out = ctx.alloc_output(0, d, src.dtype());
  if (c == 0 || outer == 0 || inner == 0) return;
  const T* px = src.data<T>();
  T* po = out.data<T>();
  if (inner == 1) {
    for (std::int64_t r = 0; r < outer; ++r) softmax_row<T, Log>(px + r * c, po + r * c, c);
  } else {
    T* m = scratch<T>(2 * inner);
    for (std::int64_t r = 0; r < outer; ++r)
      softmax_block<T, Log>(px + r * c * inner, po + r * c * inner, c, inner, m, m + inner);
  }
}

template <typename T>
struct SoftmaxK {
  static void run(KernelContext& ctx) { softmax_kernel<SoftmaxOp, T, false>(ctx); }
};
template <typename T>
struct LogSoftmaxK {
  static void run(KernelContext& ctx) { softmax_kernel<LogSoftmaxOp, T, true>(ctx); }
};

template <typename T, typename L>
void cross_entropy_rows(KernelContext& ctx, const T* x, const L* label, T* sm, T* loss,
                        std::int64_t n, std::int64_t c, std::int64_t ignore_index) {
  // Validate every label first, so a bad one leaves no half-written output.
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    if (l != ignore_index && (l < 0 || l >= c))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' row ", i,
                  " has label ", l, ", outside [0, ", c, ") (ignore_index = ", ignore_index, ")");
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c;
    T* sr = sm + i * c;
    T m = xr[0];
    for (std::int64_t j = 1; j < c; ++j) m = xr[j] > m ? xr[j] : m;
    if (std::isinf(m) && m < 0) m = 0;
    T s = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      sr[j] = std::exp(xr[j] - m);
      s += sr[j];
    }
    const T inv = T(1) / s;
    for (std::int64_t j = 0; j < c; ++j) sr[j] *= inv;
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    // -log softmax[l] = log Σ exp(x - m) - (x[l] - m), computed without
    // taking the log of a rounded probability.
    loss[i] = l == ignore_index ? T(0) : std::log(s) - (xr[l] - m);
  }
}

template <typename T>
struct SoftmaxCrossEntropyK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor& logits = typed_input<T>(ctx, 0);
    const Tensor& label = ctx.input(1);
    const Dims& ld = logits.dims();
    if (ld.rank() < 2)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' logits must have rank >= 2, got [",
                  ld.to_string(), "]");
    const std::int64_t c = ld[ld.rank() - 1];
    const std::int64_t n = ld.numel() / (c == 0 ? 1 : c);
    std::int64_t lead[Dims::kMaxRank];
    for (int i = 0; i + 1 < ld.rank(); ++i) lead[i] = ld[i];
    lead[ld.rank() - 1] = 1;
    const Dims loss_dims(std::span<const std::int64_t>(lead, ld.rank()));
    const Dims label_dims(std::span<const std::int64_t>(lead, ld.rank() - 1));
    if (label.dims() != loss_dims && label.dims() != label_dims)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' label dims [", label.dims().to_string(),
                  "] do not fit logits [", ld.to_string(), "] (expected [", label_dims.to_string(),
                  "] or [", loss_dims.to_string(), "])");
    if (label.dtype() != DataType::Int64 && label.dtype() != DataType::Int32)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' label must be i64 or i32, got ",
                  to_string(label.dtype()));
    const std::int64_t ignore = ctx.attrs<SoftmaxWithCrossEntropyOp>().ignore_index;
    const Tensor x = logits, y = label;  // alive while the outputs are (re)allocated
    Tensor& sm = ctx.alloc_output(0, ld, x.dtype());
    Tensor& loss = ctx.alloc_output(1, loss_dims, x.dtype());
    if (n == 0) return;
    if (c == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' logits have no classes (C = 0)");
    if (y.dtype() == DataType::Int64)
      cross_entropy_rows(ctx, x.data<T>(), y.data<std::int64_t>(), sm.data<T>(), loss.data<T>(),
                         n, c, ignore);
    else
      cross_entropy_rows(ctx, x.data<T>(), y.data<std::int32_t>(), sm.data<T>(), loss.data<T>(),
                         n, c, ignore);
  }
};

}  // namespace

KILN_REGISTER_KERNELS(SoftmaxOp, Cpu, SoftmaxK, float, double);
KILN_REGISTER_KERNELS(LogSoftmaxOp, Cpu, LogSoftmaxK, float, double);
KILN_REGISTER_KERNELS(SoftmaxWithCrossEntropyOp, Cpu, SoftmaxCrossEntropyK, float, double);

}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {


template <typename OpT, typename T, bool Log>
void softmax_grad_kernel(KernelContext& ctx) {
  const std::string_view op = ctx.op()->name();
  const Tensor y = typed_input<T>(ctx, 0), dy = typed_input<T>(ctx, 1);
  const Dims& d = y.dims();
  if (dy.dims() != d)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' out [", d.to_string(), "] and dout [",
                dy.dims().to_string(), "] must have one shape");
  const std::int64_t rank = d.rank();
  std::int64_t axis = ctx.attrs<OpT>().axis;
  if (rank == 0 || axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", axis,
                " is out of range for an input of dims [", d.to_string(), "]");
  if (axis < 0) axis += rank;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < axis; ++i) outer *= d[static_cast<int>(i)];
  for (std::int64_t i = axis + 1; i < rank; ++i) inner *= d[static_cast<int>(i)];
  const std::int64_t c = d[static_cast<int>(axis)];
  Tensor& dx = ctx.alloc_output(0, d, y.dtype());
  if (d.numel() == 0) return;
  const T* py = y.data<T>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  T* acc = scratch<T>(inner);
  for (std::int64_t r = 0; r < outer; ++r) {
    const std::int64_t base = r * c * inner;
    std::fill(acc, acc + inner, T(0));
    for (std::int64_t j = 0; j < c; ++j)
      for (std::int64_t k = 0; k < inner; ++k) {
        const std::int64_t i = base + j * inner + k;
        if constexpr (Log) acc[k] += pdy[i];             // Σ dout
        else acc[k] += pdy[i] * py[i];                   // Σ dout · out
      }
    for (std::int64_t j = 0; j < c; ++j)
      for (std::int64_t k = 0; k < inner; ++k) {
        const std::int64_t i = base + j * inner + k;
        if constexpr (Log) pdx[i] = pdy[i] - std::exp(py[i]) * acc[k];
        else pdx[i] = py[i] * (pdy[i] - acc[k]);
      }
  }
}

template <typename T>
struct SoftmaxGradK {
  static void run(KernelContext& ctx) { softmax_grad_kernel<GradOf<SoftmaxOp>, T, false>(ctx); }
};
template <typename T>
struct LogSoftmaxGradK {
  static void run(KernelContext& ctx) { softmax_grad_kernel<GradOf<LogSoftmaxOp>, T, true>(ctx); }
};

template <typename T, typename L>
void cross_entropy_grad_rows(KernelContext& ctx, const T* sm, const L* label, const T* dloss,
                             T* dx, std::int64_t n, std::int64_t c, std::int64_t ignore) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    if (l != ignore && (l < 0 || l >= c))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' row ", i,
                  " has label ", l, ", outside [0, ", c, ") (ignore_index = ", ignore, ")");
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    T* __restrict row = dx + i * c;
    if (l == ignore) {
      std::memset(row, 0, static_cast<std::size_t>(c) * sizeof(T));
      continue;
    }
    const T g = dloss[i];
    const T* __restrict s = sm + i * c;
    for (std::int64_t j = 0; j < c; ++j) row[j] = g * s[j];
    row[l] -= g;
  }
}

template <typename T>
struct SoftmaxCrossEntropyGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor sm = typed_input<T>(ctx, 0), label = ctx.input(1), dloss = typed_input<T>(ctx, 2);
    const Dims& sd = sm.dims();
    if (sd.rank() < 2)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' softmax must have rank >= 2, got [",
                  sd.to_string(), "]");
    const std::int64_t c = sd[sd.rank() - 1];
    std::int64_t lead[Dims::kMaxRank];
    for (int i = 0; i + 1 < sd.rank(); ++i) lead[i] = sd[i];
    lead[sd.rank() - 1] = 1;
    const Dims loss_dims(std::span<const std::int64_t>(lead, sd.rank()));
    const Dims label_dims(std::span<const std::int64_t>(lead, sd.rank() - 1));
    if (label.dims() != loss_dims && label.dims() != label_dims)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' label dims [",
                  label.dims().to_string(), "] do not fit softmax [", sd.to_string(),
                  "] (expected [", label_dims.to_string(), "] or [", loss_dims.to_string(), "])");
    if (dloss.dims() != loss_dims)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dloss dims [",
                  dloss.dims().to_string(), "] must be the loss's [", loss_dims.to_string(), "]");
    if (label.dtype() != DataType::Int64 && label.dtype() != DataType::Int32)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' label must be i64 or i32, got ",
                  to_string(label.dtype()));
    const std::int64_t ignore = ctx.attrs<GradOf<SoftmaxWithCrossEntropyOp>>().ignore_index;
    Tensor& dx = ctx.alloc_output(0, sd, sm.dtype());
    const std::int64_t n = loss_dims.numel();
    if (n == 0 || c == 0) return;
    if (label.dtype() == DataType::Int64)
      cross_entropy_grad_rows(ctx, sm.data<T>(), label.data<std::int64_t>(), dloss.data<T>(),
                              dx.data<T>(), n, c, ignore);
    else
      cross_entropy_grad_rows(ctx, sm.data<T>(), label.data<std::int32_t>(), dloss.data<T>(),
                              dx.data<T>(), n, c, ignore);
  }
};

}  // namespace

KILN_REGISTER_KERNELS(GradOf<SoftmaxOp>, Cpu, SoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<LogSoftmaxOp>, Cpu, LogSoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<SoftmaxWithCrossEntropyOp>, Cpu, SoftmaxCrossEntropyGradK, float, double);

}  // namespace kiln::cpu
