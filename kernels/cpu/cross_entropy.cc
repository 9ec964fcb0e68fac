// CPU kernels of kiln.cross_entropy, its gradient and the gradient's
// in-place twin: each row's log-sum-exp and loss from one row of logits
// (its max, then Σ exp in 16 lanes that vectorize), the gradient
// recomputing the softmax from the logits and lse. f32 and f64 compute in
// their own dtype; bf16 and f16 logits are widened as they are read,
// computed in f32 (loss and lse f32), and the gradient rounded once. Rows
// are split across the kernel's threads, a row to one thread: the same
// bits at any thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "class_rows.h"
#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "intra_op.h"
#include "vector_math.h"
#include "kiln/dialect/nn_ops.h"
#include "kiln/support/half.h"

namespace kiln::cpu {
namespace {

// How the kernels read logits and write their gradient: f32 / f64 as they
// are; bf16 / f16 (Store: their bits) widened to f32, the gradient rounded.
template <typename T>
struct PlainLogits {
  using Store = T;
  using Acc = T;
  static constexpr DataType dtype = data_type_of<T>;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
template <DataType D>
struct HalfLogits {
  using Store = std::uint16_t;
  using Acc = float;
  static constexpr DataType dtype = D;
  static float load(std::uint16_t b) { return half_value<D>(b); }
  static std::uint16_t store(float v) { return rounded_half<D>(v); }
};

// Lanes of the row reductions: 16 partial maxima / sums, combined in a
// fixed order.
constexpr std::int64_t kRowLanes = 16;

template <typename LT>
KILN_SIMD_INLINE typename LT::Acc row_max(const typename LT::Store* __restrict x, std::int64_t c) {
  using Acc = typename LT::Acc;
  Acc m[kRowLanes];
  for (std::int64_t k = 0; k < kRowLanes; ++k) m[k] = -std::numeric_limits<Acc>::infinity();
  std::int64_t j = 0;
  for (; j + kRowLanes <= c; j += kRowLanes)
    for (std::int64_t k = 0; k < kRowLanes; ++k) {
      const Acc v = LT::load(x[j + k]);
      m[k] = v > m[k] ? v : m[k];
    }
  for (; j < c; ++j) m[0] = LT::load(x[j]) > m[0] ? LT::load(x[j]) : m[0];
  Acc r = m[0];
  for (std::int64_t k = 1; k < kRowLanes; ++k) r = m[k] > r ? m[k] : r;
  return r;
}

template <typename LT>
KILN_SIMD_INLINE typename LT::Acc row_sum_exp(const typename LT::Store* __restrict x, std::int64_t c,
                                              typename LT::Acc shift) {
  using Acc = typename LT::Acc;
  Acc s[kRowLanes] = {};
  std::int64_t j = 0;
  for (; j + kRowLanes <= c; j += kRowLanes)
    for (std::int64_t k = 0; k < kRowLanes; ++k) s[k] += fast_exp(LT::load(x[j + k]) - shift);
  for (; j < c; ++j) s[0] += fast_exp(LT::load(x[j]) - shift);
  Acc r = 0;
  for (std::int64_t k = 0; k < kRowLanes; ++k) r += s[k];
  return r;
}

// Rows [r0, r1): each one's lse and loss, compiled for each SIMD level
// (simd_dispatch; the baseline's 4 lanes ran the 50257-class rows of a
// GPT's logits at a quarter of AVX-512's width).
template <typename LT, typename L>
struct LseRows {
  using Store = typename LT::Store;
  using Acc = typename LT::Acc;
  KILN_SIMD_INLINE static void run(const Store* x, const L* label, Acc* loss, Acc* lse, std::int64_t c,
                                   std::int64_t ignore, std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const Store* xr = x + i * c;
      Acc m = row_max<LT>(xr, c);
      if (std::isinf(m) && m < 0) m = 0;  // a row of -inf: avoid (-inf) - (-inf)
      const Acc log_s = std::log(row_sum_exp<LT>(xr, c, m));
      lse[i] = m + log_s;
      const std::int64_t l = static_cast<std::int64_t>(label[i]);
      // As softmax_with_cross_entropy: not the log of a rounded probability.
      loss[i] = l == ignore ? Acc(0) : log_s - (LT::load(xr[l]) - m);
    }
  }
};

// bf16 / f16 rows [r0, r1): widened a block of rows at a time into the
// thread's f32 scratch, then the f32 rows' loop over them (its bits: the
// widening is exact). Read in place, the 16-bit loads kept the row maxima
// scalar (integer selects): bf16 logits took 1.7x f32's time.
template <DataType D, typename L>
void half_lse_rows(const std::uint16_t* x, const L* label, float* loss, float* lse, std::int64_t c,
                   std::int64_t ignore, std::int64_t r0, std::int64_t r1) {
  const std::int64_t block = std::max<std::int64_t>(1, 4 * kHalfChunk / c);
  float* buf = scratch<float>(block * c);
  for (std::int64_t r = r0; r < r1; r += block) {
    const std::int64_t rows = std::min(block, r1 - r);
    widen_half_row<D>(x + r * c, buf, rows * c);
    simd_dispatch<LseRows<PlainLogits<float>, L>>(buf, label + r, loss + r, lse + r, c, ignore, std::int64_t{0},
                                                  rows);
  }
}

template <typename LT, typename L>
void lse_rows(const typename LT::Store* x, const L* label, typename LT::Acc* loss,
              typename LT::Acc* lse, std::int64_t n, std::int64_t c, std::int64_t ignore) {
  const std::int64_t per_range = items_per_range(c * std::int64_t(sizeof(typename LT::Store)));
  parallel_for(n, per_range, [&](std::int64_t r0, std::int64_t r1) {
    if constexpr (std::is_same_v<typename LT::Store, std::uint16_t>)
      half_lse_rows<LT::dtype>(x, label, loss, lse, c, ignore, r0, r1);
    else
      simd_dispatch<LseRows<LT, L>>(x, label, loss, lse, c, ignore, r0, r1);
  });
}

// The logits (input 0) as LT reads them; kiln::Error naming the op when
// their dtype is another.
template <typename LT>
const Tensor& logits_input(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != LT::dtype)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' logits are ",
                to_string(x.dtype()), ", the kernel reads ", to_string(LT::dtype));
  return x;
}

template <typename LT>
void cross_entropy_kernel(KernelContext& ctx) {
  using Acc = typename LT::Acc;
  const Tensor x = logits_input<LT>(ctx), y = ctx.input(1);  // alive while outputs are made
  const ClassRows r = class_rows(ctx, x.dims(), y, "logits");
  const std::int64_t ignore = ctx.attrs<CrossEntropyOp>().ignore_index;
  Tensor& loss = ctx.alloc_output(0, r.loss_dims, data_type_of<Acc>);
  Tensor& lse = ctx.alloc_output(1, r.loss_dims, data_type_of<Acc>);
  if (r.n == 0) return;
  if (r.c == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' logits have no classes (C = 0)");
  const auto* px = static_cast<const typename LT::Store*>(x.raw_data());
  with_labels(y, [&](const auto* labels) {
    check_labels(ctx, labels, r.n, r.c, ignore);
    lse_rows<LT>(px, labels, loss.data<Acc>(), lse.data<Acc>(), r.n, r.c, ignore);
  });
}

// dx = dloss · (exp(x - lse) - onehot(label)) for rows [r0, r1), in Acc,
// each element stored once, compiled for each SIMD level. dx may be x
// (cross_entropy_grad_): every element is read before it is written (the
// label's first), and by nothing after.
template <typename LT, typename L>
struct LseGradRows {
  using Store = typename LT::Store;
  using Acc = typename LT::Acc;
  KILN_SIMD_INLINE static void run(const Store* x, const Acc* lse, const L* label, const Acc* dloss, Store* dx,
                                   std::int64_t c, std::int64_t ignore, std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const std::int64_t l = static_cast<std::int64_t>(label[i]);
      Store* row = dx + i * c;
      if (l == ignore) {
        std::memset(row, 0, static_cast<std::size_t>(c) * sizeof(*row));
        continue;
      }
      const Acc g = dloss[i], a = lse[i];
      const Store* xr = x + i * c;
      const Acc at_label = g * fast_exp(LT::load(xr[l]) - a) - g;
#pragma GCC ivdep
      for (std::int64_t j = 0; j < c; ++j) row[j] = LT::store(g * fast_exp(LT::load(xr[j]) - a));
      row[l] = LT::store(at_label);
    }
  }
};

template <typename LT, typename L>
void lse_grad_rows(const typename LT::Store* x, const typename LT::Acc* lse, const L* label,
                   const typename LT::Acc* dloss, typename LT::Store* dx, std::int64_t n, std::int64_t c,
                   std::int64_t ignore) {
  const std::int64_t per_range = items_per_range(2 * c * std::int64_t(sizeof(typename LT::Store)));
  parallel_for(n, per_range, [&](std::int64_t r0, std::int64_t r1) {
    simd_dispatch<LseGradRows<LT, L>>(x, lse, label, dloss, dx, c, ignore, r0, r1);
  });
}

// The gradient of the logits x into dx: cross_entropy_grad's (dx a new
// buffer) and cross_entropy_grad_'s (dx = x).
template <typename OpT, typename LT>
void lse_grad(KernelContext& ctx, const Tensor& x, typename LT::Store* dx) {
  using Acc = typename LT::Acc;
  const Tensor& lse = typed_input<Acc>(ctx, 1);
  const Tensor& label = ctx.input(2);
  const Tensor& dloss = typed_input<Acc>(ctx, 3);
  const ClassRows r = class_rows(ctx, x.dims(), label, "logits");
  check_dloss(ctx, lse, r, "lse");
  check_dloss(ctx, dloss, r);
  if (r.n == 0 || r.c == 0) return;
  const std::int64_t ignore = ctx.attrs<OpT>().ignore_index;
  const auto* px = static_cast<const typename LT::Store*>(x.raw_data());
  with_labels(label, [&](const auto* labels) {
    check_labels(ctx, labels, r.n, r.c, ignore);
    lse_grad_rows<LT>(px, lse.data<Acc>(), labels, dloss.data<Acc>(), dx, r.n, r.c, ignore);
  });
}

template <typename LT>
void cross_entropy_grad_kernel(KernelContext& ctx) {
  const Tensor x = logits_input<LT>(ctx);  // alive while the output is made
  Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
  lse_grad<GradOf<CrossEntropyOp>, LT>(ctx, x, static_cast<typename LT::Store*>(dx.raw_data()));
}

template <typename LT>
void cross_entropy_grad_inplace_kernel(KernelContext& ctx) {
  (void)logits_input<LT>(ctx);  // checks the dtype
  Tensor& x = ctx.output(0);    // the logits' variable: overwritten by their gradient
  lse_grad<CrossEntropyGradInplaceOp, LT>(ctx, x, static_cast<typename LT::Store*>(x.raw_data()));
}

// The three kernels for the logits' dtype LT reads.
template <typename LT>
void register_cross_entropy() {
  constexpr DataType dt = LT::dtype;
  KernelRegistrar<CrossEntropyOp>(PlaceKind::Cpu, dt, &cross_entropy_kernel<LT>, "cross_entropy");
  KernelRegistrar<GradOf<CrossEntropyOp>>(PlaceKind::Cpu, dt, &cross_entropy_grad_kernel<LT>,
                                          "cross_entropy_grad");
  KernelRegistrar<CrossEntropyGradInplaceOp>(PlaceKind::Cpu, dt, &cross_entropy_grad_inplace_kernel<LT>,
                                             "cross_entropy_grad_");
}

[[maybe_unused]] const bool registered = [] {
  register_cross_entropy<PlainLogits<float>>();
  register_cross_entropy<PlainLogits<double>>();
  register_cross_entropy<HalfLogits<DataType::BFloat16>>();
  register_cross_entropy<HalfLogits<DataType::Float16>>();
  return true;
}();

}  // namespace
}  // namespace kiln::cpu
