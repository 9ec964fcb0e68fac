// CPU kernels of softmax, log_softmax (along any axis) and
// softmax_with_cross_entropy (classes on the last axis; kiln.cross_entropy
// is in cross_entropy.cc).
// The softmax's input is seen as [outer, C, inner]: inner == 1 (the last
// axis, the common case) runs contiguous rows (max and sum in 16 lanes);
// otherwise columns are processed a row of `inner` at a time with
// per-column max / sum kept in a per-thread scratch buffer. The forward's
// rows or blocks are split across the kernel's threads and compiled for
// each SIMD level.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernel_util.h"
#include "class_rows.h"
#include "vector_math.h"
#include "kiln/dialect/nn_ops.h"
#include <algorithm>
#include <cstring>
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::cpu {
namespace {

// Lanes of a row's max and sum: 16 partial results, combined in a fixed
// order, so the reductions vectorize (a single running sum cannot be
// reordered) and give the same bits at every thread count.
constexpr std::int64_t kRowLanes = 16;

// One contiguous row of C: out = softmax(x) or log_softmax(x).
template <typename T, bool Log>
KILN_SIMD_INLINE void softmax_row(const T* __restrict x, T* __restrict out, std::int64_t c) {
  T lane[kRowLanes];
  for (std::int64_t k = 0; k < kRowLanes; ++k) lane[k] = x[0];
  std::int64_t j = 0;
  for (; j + kRowLanes <= c; j += kRowLanes)
    for (std::int64_t k = 0; k < kRowLanes; ++k) lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
  for (; j < c; ++j) lane[0] = x[j] > lane[0] ? x[j] : lane[0];
  T m = lane[0];
  for (std::int64_t k = 1; k < kRowLanes; ++k) m = lane[k] > m ? lane[k] : m;
  if (std::isinf(m) && m < 0) m = 0;  // a row of -inf: avoid (-inf) - (-inf)
  for (std::int64_t k = 0; k < kRowLanes; ++k) lane[k] = 0;
  for (j = 0; j + kRowLanes <= c; j += kRowLanes)
    for (std::int64_t k = 0; k < kRowLanes; ++k) {
      const T e = fast_exp(x[j + k] - m);
      if constexpr (!Log) out[j + k] = e;
      lane[k] += e;
    }
  for (; j < c; ++j) {
    const T e = fast_exp(x[j] - m);
    if constexpr (!Log) out[j] = e;
    lane[0] += e;
  }
  T s = 0;
  for (std::int64_t k = 0; k < kRowLanes; ++k) s += lane[k];
  if constexpr (Log) {
    const T lse = m + std::log(s);
    for (j = 0; j < c; ++j) out[j] = x[j] - lse;
  } else {
    const T inv = T(1) / s;
    for (j = 0; j < c; ++j) out[j] *= inv;
  }
}

// A [C, inner] block (stride `inner` between classes): softmax along C for
// each of the inner columns.
template <typename T, bool Log>
KILN_SIMD_INLINE void softmax_block(const T* x, T* out, std::int64_t c, std::int64_t inner, T* m, T* s) {
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


// Rows [r0, r1) of a softmax seen as [outer, C, inner], compiled for each
// SIMD level (simd_dispatch).
template <typename T, bool Log>
struct SoftmaxRows {
  KILN_SIMD_INLINE static void run(const T* x, T* out, std::int64_t c, std::int64_t inner, std::int64_t r0,
                                   std::int64_t r1) {
    if (inner == 1) {
      for (std::int64_t r = r0; r < r1; ++r) softmax_row<T, Log>(x + r * c, out + r * c, c);
      return;
    }
    T* m = scratch<T>(2 * inner);
    for (std::int64_t r = r0; r < r1; ++r)
      softmax_block<T, Log>(x + r * c * inner, out + r * c * inner, c, inner, m, m + inner);
  }
};

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
  // Rows (inner == 1) or [C, inner] blocks split across the kernel's
  // threads, each one's by one thread.
  const std::int64_t row_bytes = c * inner * std::int64_t(sizeof(T));
  parallel_for(outer, items_per_range(row_bytes), [&](std::int64_t r0, std::int64_t r1) {
    simd_dispatch<SoftmaxRows<T, Log>>(px, po, c, inner, r0, r1);
  });
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
  check_labels(ctx, label, n, c, ignore_index);
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
    const Tensor x = typed_input<T>(ctx, 0), y = ctx.input(1);  // alive while outputs are made
    const ClassRows r = class_rows(ctx, x.dims(), y, "logits");
    const std::int64_t ignore = ctx.attrs<SoftmaxWithCrossEntropyOp>().ignore_index;
    Tensor& sm = ctx.alloc_output(0, x.dims(), x.dtype());
    Tensor& loss = ctx.alloc_output(1, r.loss_dims, x.dtype());
    if (r.n == 0) return;
    if (r.c == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' logits have no classes (C = 0)");
    with_labels(y, [&](const auto* labels) {
      cross_entropy_rows(ctx, x.data<T>(), labels, sm.data<T>(), loss.data<T>(), r.n, r.c, ignore);
    });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(SoftmaxOp, Cpu, SoftmaxK, float, double);
KILN_REGISTER_KERNELS(LogSoftmaxOp, Cpu, LogSoftmaxK, float, double);
KILN_REGISTER_KERNELS(SoftmaxWithCrossEntropyOp, Cpu, SoftmaxCrossEntropyK, float, double);

}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {


// Rows [r0, r1) of softmax's (dx = out · (dout - Σ dout · out)) or
// log_softmax's (dx = dout - exp(out) · Σ dout) gradient, seen as [outer,
// C, inner], compiled for each SIMD level; a contiguous row's sum in 16
// lanes.
template <typename T, bool Log>
struct SoftmaxGradRows {
  KILN_SIMD_INLINE static void run(const T* py, const T* pdy, T* pdx, std::int64_t c, std::int64_t inner,
                                   std::int64_t r0, std::int64_t r1) {
    if (inner == 1) {
      for (std::int64_t r = r0; r < r1; ++r) row(py + r * c, pdy + r * c, pdx + r * c, c);
      return;
    }
    T* acc = scratch<T>(inner);
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t base = r * c * inner;
      std::fill(acc, acc + inner, T(0));
      for (std::int64_t j = 0; j < c; ++j)
        for (std::int64_t k = 0; k < inner; ++k) {
          const std::int64_t i = base + j * inner + k;
          if constexpr (Log) acc[k] += pdy[i];  // Σ dout
          else acc[k] += pdy[i] * py[i];        // Σ dout · out
        }
      for (std::int64_t j = 0; j < c; ++j)
        for (std::int64_t k = 0; k < inner; ++k) {
          const std::int64_t i = base + j * inner + k;
          if constexpr (Log) pdx[i] = pdy[i] - std::exp(py[i]) * acc[k];
          else pdx[i] = py[i] * (pdy[i] - acc[k]);
        }
    }
  }

  KILN_SIMD_INLINE static void row(const T* __restrict y, const T* __restrict dy, T* __restrict dx, std::int64_t c) {
    T lane[kRowLanes] = {};
    std::int64_t j = 0;
    for (; j + kRowLanes <= c; j += kRowLanes)
      for (std::int64_t k = 0; k < kRowLanes; ++k) lane[k] += Log ? dy[j + k] : dy[j + k] * y[j + k];
    for (; j < c; ++j) lane[0] += Log ? dy[j] : dy[j] * y[j];
    T acc = 0;
    for (std::int64_t k = 0; k < kRowLanes; ++k) acc += lane[k];
    for (j = 0; j < c; ++j) {
      if constexpr (Log) dx[j] = dy[j] - std::exp(y[j]) * acc;
      else dx[j] = y[j] * (dy[j] - acc);
    }
  }
};

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
  const std::int64_t row_bytes = 3 * c * inner * std::int64_t(sizeof(T));
  parallel_for(outer, items_per_range(row_bytes), [&](std::int64_t r0, std::int64_t r1) {
    simd_dispatch<SoftmaxGradRows<T, Log>>(py, pdy, pdx, c, inner, r0, r1);
  });
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
void cross_entropy_grad_rows(const T* sm, const L* label, const T* dloss, T* dx, std::int64_t n,
                             std::int64_t c, std::int64_t ignore) {
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
    const Tensor sm = typed_input<T>(ctx, 0), label = ctx.input(1), dloss = typed_input<T>(ctx, 2);
    const ClassRows r = class_rows(ctx, sm.dims(), label, "softmax");
    check_dloss(ctx, dloss, r);
    const std::int64_t ignore = ctx.attrs<GradOf<SoftmaxWithCrossEntropyOp>>().ignore_index;
    Tensor& dx = ctx.alloc_output(0, sm.dims(), sm.dtype());
    if (r.n == 0 || r.c == 0) return;
    with_labels(label, [&](const auto* labels) {
      check_labels(ctx, labels, r.n, r.c, ignore);
      cross_entropy_grad_rows(sm.data<T>(), labels, dloss.data<T>(), dx.data<T>(), r.n, r.c,
                              ignore);
    });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(GradOf<SoftmaxOp>, Cpu, SoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<LogSoftmaxOp>, Cpu, LogSoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<SoftmaxWithCrossEntropyOp>, Cpu, SoftmaxCrossEntropyGradK, float, double);

}  // namespace kiln::cpu
