// CPU kernels of softmax, log_softmax (along any axis),
// softmax_with_cross_entropy and cross_entropy (classes on the last axis).
// The softmax's input is seen as [outer, C, inner]: inner == 1 (the last
// axis, the common case) runs contiguous rows; otherwise columns are
// processed a row of `inner` at a time with per-column max / sum kept in a
// per-thread scratch buffer.
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
#include "intra_op.h"
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

// A class-last tensor's shape `d` ([..., C]) seen as n rows of c classes,
// with the loss's dims [..., 1]; `label` must fit it ([...] or [..., 1],
// i64 or i32). Errors name the op and the tensor (`what`).
struct ClassRows {
  std::int64_t n = 0, c = 0;
  Dims loss_dims;
};

ClassRows class_rows(const KernelContext& ctx, const Dims& d, const Tensor& label,
                     std::string_view what) {
  const std::string_view op = ctx.op()->name();
  if (d.rank() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " must have rank >= 2, got [",
                d.to_string(), "]");
  std::int64_t lead[Dims::kMaxRank];
  for (int i = 0; i + 1 < d.rank(); ++i) lead[i] = d[i];
  lead[d.rank() - 1] = 1;
  ClassRows r{0, d[d.rank() - 1], Dims(std::span<const std::int64_t>(lead, d.rank()))};
  const Dims label_dims(std::span<const std::int64_t>(lead, d.rank() - 1));
  if (label.dims() != r.loss_dims && label.dims() != label_dims)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' label dims [", label.dims().to_string(),
                "] do not fit ", what, " [", d.to_string(), "] (expected [", label_dims.to_string(),
                "] or [", r.loss_dims.to_string(), "])");
  if (label.dtype() != DataType::Int64 && label.dtype() != DataType::Int32)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' label must be i64 or i32, got ",
                to_string(label.dtype()));
  r.n = r.loss_dims.numel();
  return r;
}

// Every label in [0, c) or ignore_index: checked before anything is
// written, so a bad one leaves no half-written output.
template <typename L>
void check_labels(const KernelContext& ctx, const L* label, std::int64_t n, std::int64_t c,
                  std::int64_t ignore) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    if (l != ignore && (l < 0 || l >= c))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' row ", i,
                  " has label ", l, ", outside [0, ", c, ") (ignore_index = ", ignore, ")");
  }
}

// f(labels) with the label tensor's data as const i64* or const i32*.
template <typename F>
void with_labels(const Tensor& label, F&& f) {
  if (label.dtype() == DataType::Int64) f(label.data<std::int64_t>());
  else f(label.data<std::int32_t>());
}

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

// Lanes of the row reductions below: 16 partial maxima / sums, combined in
// a fixed order (the loops vectorize; the bits do not depend on it).
constexpr std::int64_t kRowLanes = 16;

template <typename T>
T row_max(const T* __restrict x, std::int64_t c) {
  T m[kRowLanes];
  for (std::int64_t k = 0; k < kRowLanes; ++k) m[k] = -std::numeric_limits<T>::infinity();
  std::int64_t j = 0;
  for (; j + kRowLanes <= c; j += kRowLanes)
    for (std::int64_t k = 0; k < kRowLanes; ++k) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
  for (; j < c; ++j) m[0] = x[j] > m[0] ? x[j] : m[0];
  T r = m[0];
  for (std::int64_t k = 1; k < kRowLanes; ++k) r = m[k] > r ? m[k] : r;
  return r;
}

template <typename T>
T row_sum_exp(const T* __restrict x, std::int64_t c, T shift) {
  T s[kRowLanes] = {};
  std::int64_t j = 0;
  for (; j + kRowLanes <= c; j += kRowLanes)
    for (std::int64_t k = 0; k < kRowLanes; ++k) s[k] += fast_exp(x[j + k] - shift);
  for (; j < c; ++j) s[0] += fast_exp(x[j] - shift);
  T r = 0;
  for (std::int64_t k = 0; k < kRowLanes; ++k) r += s[k];
  return r;
}

// Each row's lse and loss, rows split across the kernel's threads (a row
// is one thread's: the same bits at any thread count).
template <typename T, typename L>
void cross_entropy_lse_rows(const T* x, const L* label, T* loss, T* lse, std::int64_t n,
                            std::int64_t c, std::int64_t ignore) {
  parallel_for(n, items_per_range(c * std::int64_t(sizeof(T))), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * c;
      T m = row_max(xr, c);
      if (std::isinf(m) && m < 0) m = 0;  // a row of -inf: avoid (-inf) - (-inf)
      const T log_s = std::log(row_sum_exp(xr, c, m));
      lse[i] = m + log_s;
      const std::int64_t l = static_cast<std::int64_t>(label[i]);
      loss[i] = l == ignore ? T(0) : log_s - (xr[l] - m);  // as softmax_with_cross_entropy
    }
  });
}

template <typename T>
struct CrossEntropyK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), y = ctx.input(1);  // alive while outputs are made
    const ClassRows r = class_rows(ctx, x.dims(), y, "logits");
    const std::int64_t ignore = ctx.attrs<CrossEntropyOp>().ignore_index;
    Tensor& loss = ctx.alloc_output(0, r.loss_dims, x.dtype());
    Tensor& lse = ctx.alloc_output(1, r.loss_dims, x.dtype());
    if (r.n == 0) return;
    if (r.c == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' logits have no classes (C = 0)");
    with_labels(y, [&](const auto* labels) {
      check_labels(ctx, labels, r.n, r.c, ignore);
      cross_entropy_lse_rows(x.data<T>(), labels, loss.data<T>(), lse.data<T>(), r.n, r.c, ignore);
    });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(SoftmaxOp, Cpu, SoftmaxK, float, double);
KILN_REGISTER_KERNELS(LogSoftmaxOp, Cpu, LogSoftmaxK, float, double);
KILN_REGISTER_KERNELS(SoftmaxWithCrossEntropyOp, Cpu, SoftmaxCrossEntropyK, float, double);
KILN_REGISTER_KERNELS(CrossEntropyOp, Cpu, CrossEntropyK, float, double);

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

// The gradients' dloss: the loss's dims. Error names the op.
void check_dloss(const KernelContext& ctx, const Tensor& dloss, const ClassRows& r,
                 std::string_view what = "dloss") {
  if (dloss.dims() != r.loss_dims)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " dims [",
                dloss.dims().to_string(), "] must be the loss's [", r.loss_dims.to_string(), "]");
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

// dx = dloss · (exp(x - lse) - onehot(label)) row by row, rows split across
// the kernel's threads. dx may be x (kiln.cross_entropy_grad_): each
// element is read before it is written, and by nothing after.
template <typename T, typename L>
void cross_entropy_lse_grad_rows(const T* x, const T* lse, const L* label, const T* dloss, T* dx,
                                 std::int64_t n, std::int64_t c, std::int64_t ignore) {
  parallel_for(n, items_per_range(2 * c * std::int64_t(sizeof(T))), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const std::int64_t l = static_cast<std::int64_t>(label[i]);
      T* row = dx + i * c;
      if (l == ignore) {
        std::memset(row, 0, static_cast<std::size_t>(c) * sizeof(T));
        continue;
      }
      const T g = dloss[i], a = lse[i];
      const T* xr = x + i * c;
#pragma GCC ivdep
      for (std::int64_t j = 0; j < c; ++j) row[j] = g * fast_exp(xr[j] - a);
      row[l] -= g;
    }
  });
}

// The gradient of logits x (dims `xd`) into dx: cross_entropy_grad's
// (dx a new buffer) and cross_entropy_grad_'s (dx = x).
template <typename OpT, typename T>
void cross_entropy_lse_grad(KernelContext& ctx, const T* x, const Dims& xd, T* dx) {
  const Tensor& lse = typed_input<T>(ctx, 1);
  const Tensor& label = ctx.input(2);
  const Tensor& dloss = typed_input<T>(ctx, 3);
  const ClassRows r = class_rows(ctx, xd, label, "logits");
  check_dloss(ctx, lse, r, "lse");
  check_dloss(ctx, dloss, r);
  if (r.n == 0 || r.c == 0) return;
  const std::int64_t ignore = ctx.attrs<OpT>().ignore_index;
  with_labels(label, [&](const auto* labels) {
    check_labels(ctx, labels, r.n, r.c, ignore);
    cross_entropy_lse_grad_rows(x, lse.data<T>(), labels, dloss.data<T>(), dx, r.n, r.c, ignore);
  });
}

template <typename T>
struct CrossEntropyGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);  // alive while the output is made
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    cross_entropy_lse_grad<GradOf<CrossEntropyOp>, T>(ctx, x.data<T>(), x.dims(), dx.data<T>());
  }
};

template <typename T>
struct CrossEntropyGradInplaceK {
  static void run(KernelContext& ctx) {
    (void)typed_input<T>(ctx, 0);  // checks the dtype
    Tensor& x = ctx.output(0);     // the logits' variable: overwritten by their gradient
    cross_entropy_lse_grad<CrossEntropyGradInplaceOp, T>(ctx, x.data<T>(), x.dims(), x.data<T>());
  }
};

}  // namespace

KILN_REGISTER_KERNELS(GradOf<SoftmaxOp>, Cpu, SoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<LogSoftmaxOp>, Cpu, LogSoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<SoftmaxWithCrossEntropyOp>, Cpu, SoftmaxCrossEntropyGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<CrossEntropyOp>, Cpu, CrossEntropyGradK, float, double);
KILN_REGISTER_KERNELS(CrossEntropyGradInplaceOp, Cpu, CrossEntropyGradInplaceK, float, double);

}  // namespace kiln::cpu
