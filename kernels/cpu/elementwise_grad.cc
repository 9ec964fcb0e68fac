// CPU kernels of the elementwise gradient ops: reduce_as (a broadcast
// gradient summed back to an operand's shape), reshape_as (a view),
// zeros_like, maximum_grad / minimum_grad, the activation grads (relu, tanh,
// sigmoid, abs, gelu) and dropout_grad. Float kernels: f32 and f64.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_kernel_util.h"
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::cpu {
namespace {

// A per-thread buffer of n elements, grown once and then reused: the run
// path allocates nothing but tensor buffers.
template <typename T>
T* scratch(std::int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<std::int64_t>(buf.size()) < n) buf.resize(static_cast<std::size_t>(n));
  return buf.data();
}

// ---- reduce_as ----

template <typename T>
struct ReduceAsK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);  // alive while the output is (re)allocated
    const Dims td = ctx.input(1).dims();
    const Dims& xd = x.dims();
    const int rx = xd.rank(), rt = td.rank(), lead = rx - rt;
    bool ok = rt <= rx;
    for (int i = 0; ok && i < rt; ++i) ok = td[i] == xd[lead + i] || td[i] == 1;
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot sum [",
                  xd.to_string(), "] down to [", td.to_string(),
                  "] (the target's dims must equal x's trailing dims or be 1)");
    Tensor& out = ctx.alloc_output(0, td, x.dtype());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const std::int64_t on = td.numel(), xn = x.numel();
    if (on == xn) {  // nothing summed (only size-1 dims differ)
      if (xn) std::memcpy(po, px, static_cast<std::size_t>(xn) * sizeof(T));
      return;
    }
    using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
    Acc* acc = scratch<Acc>(on);  // f32 sums accumulate in f64, as kiln.sum does
    std::fill(acc, acc + on, Acc(0));
    // Output strides per dim of x: 0 where summed.
    std::int64_t os[Dims::kMaxRank] = {};
    std::int64_t s = 1;
    for (int i = rx - 1; i >= lead; --i) {
      const std::int64_t t = td[i - lead];
      os[i] = (t == 1) ? 0 : s;
      s *= t;
    }
    if (xn > 0) {
      bool rows = true;  // x = [rows..., target] with target's dims equal x's trailing dims
      for (int i = lead; i < rx; ++i) rows = rows && td[i - lead] == xd[i];
      if (rows) {
        const std::int64_t n = on, r = xn / on;
        Acc* __restrict a = acc;
        for (std::int64_t k = 0; k < r; ++k) {
          const T* __restrict row = px + k * n;
          for (std::int64_t j = 0; j < n; ++j) a[j] += static_cast<Acc>(row[j]);
        }
      } else {
        std::int64_t idx[Dims::kMaxRank] = {};
        std::int64_t o = 0;
        for (std::int64_t i = 0; i < xn; ++i) {
          acc[o] += static_cast<Acc>(px[i]);
          for (int d = rx - 1; d >= 0; --d) {  // odometer
            o += os[d];
            if (++idx[d] < xd[d]) break;
            o -= os[d] * xd[d];
            idx[d] = 0;
          }
        }
      }
    }
    for (std::int64_t j = 0; j < on; ++j) po[j] = static_cast<T>(acc[j]);
  }
};

// ---- reshape_as: a view (ViewLike {0, 0}), any dtype ----

void reshape_as_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Dims td = ctx.input(1).dims();
  if (td.numel() != x.numel())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot view [",
                x.dims().to_string(), "] (", x.numel(), " elements) as [", td.to_string(), "] (",
                td.numel(), " elements)");
  ctx.output(0) = x.reshape(td);
}

// ---- zeros_like: any dtype ----

void zeros_like_kernel(KernelContext& ctx) {
  const Dims d = ctx.input(0).dims();
  const DataType dt = ctx.input(0).dtype();
  Tensor& out = ctx.alloc_output(0, d, dt);
  if (out.bytes()) std::memset(out.raw_data(), 0, out.bytes());
}

// ---- maximum_grad / minimum_grad ----

struct MaxWeight {  // share of dout going to x
  template <typename T> static T apply(T a, T b) { return a > b ? T(1) : (a == b ? T(0.5) : T(0)); }
};
struct MinWeight {
  template <typename T> static T apply(T a, T b) { return a < b ? T(1) : (a == b ? T(0.5) : T(0)); }
};

template <typename W>
struct MinMaxGrad {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      const Tensor x = typed_input<T>(ctx, 0), y = typed_input<T>(ctx, 1),
                   dout = typed_input<T>(ctx, 2);
      const Dims od = broadcast_dims(ctx.op()->name(), x.dims(), y.dims());
      if (od != dout.dims())
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' dout [",
                    dout.dims().to_string(), "] must have the broadcast shape of x and y, [",
                    od.to_string(), "]");
      Tensor& dx = ctx.alloc_output(0, od, x.dtype());
      Tensor& dy = ctx.alloc_output(1, od, x.dtype());
      T* px = dx.data<T>();
      T* py = dy.data<T>();
      const T* pd = dout.data<T>();
      const std::int64_t n = od.numel();
      if (n == 0) return;
      run_broadcast<W>(make_broadcast_plan(x.dims(), y.dims(), od), x.data<T>(), y.data<T>(), px);
      for (std::int64_t i = 0; i < n; ++i) {
        const T g = pd[i] * px[i];
        py[i] = pd[i] - g;
        px[i] = g;
      }
    }
  };
};
template <typename T> using MaximumGradK = MinMaxGrad<MaxWeight>::K<T>;
template <typename T> using MinimumGradK = MinMaxGrad<MinWeight>::K<T>;

// ---- dropout_grad ----

template <typename T>
struct DropoutGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<DropoutOp>>();
    if (!(a.p >= 0.0 && a.p < 1.0))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' needs a drop probability p in [0, 1), got ", a.p);
    const Tensor d = typed_input<T>(ctx, 0), mask = ctx.input(1);
    if (mask.dtype() != DataType::Bool)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' mask (input #1) must be bool, got ", to_string(mask.dtype()));
    require_same_dims(ctx, d, mask, 0, 1);
    Tensor& out = ctx.alloc_output(0, d.dims(), d.dtype());
    const T* __restrict pd = d.data<T>();
    const bool* __restrict pm = mask.data<bool>();
    T* __restrict po = out.data<T>();
    const std::int64_t n = d.numel();
    if (a.is_test || a.p == 0.0) {
      if (n) std::memcpy(po, pd, static_cast<std::size_t>(n) * sizeof(T));
      return;
    }
    const T scale = static_cast<T>(1.0 / (1.0 - a.p));
    for (std::int64_t i = 0; i < n; ++i) po[i] = pm[i] ? pd[i] * scale : T(0);
  }
};

}  // namespace

KILN_REGISTER_KERNELS(ReduceAsOp, Cpu, ReduceAsK, float, double);
KILN_REGISTER_KERNELS(GradOf<MaximumOp>, Cpu, MaximumGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MinimumOp>, Cpu, MinimumGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<DropoutOp>, Cpu, DropoutGradK, float, double);
KILN_REGISTER_KERNEL(ReshapeAsOp, Cpu, Undefined, reshape_as_kernel);
KILN_REGISTER_KERNEL(ZerosLikeOp, Cpu, Undefined, zeros_like_kernel);

}  // namespace kiln::cpu
