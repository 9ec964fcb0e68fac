// CPU kernels of the broadcasting binary ops (add, sub, mul, div, maximum,
// minimum, pow), maximum_grad / minimum_grad, and add_n. Same-shape and scalar operands take flat loops;
// everything else runs the collapsed broadcast plan (cpu_kernel_util.h).
// -O2 (debugoptimized) uses GCC's "very-cheap" vectorizer cost model, which
// leaves loops of unknown trip count scalar; kernels want them vectorized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu_kernel_util.h"
#include "kiln/dialect/binary_ops.h"
#include <algorithm>
#include <cstring>
#include <vector>
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::cpu {
namespace {

struct AddF {
  template <typename T> static T apply(T a, T b) { return a + b; }
};
struct SubF {
  template <typename T> static T apply(T a, T b) { return a - b; }
};
struct MulF {
  template <typename T> static T apply(T a, T b) { return a * b; }
};
struct DivF {
  template <typename T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // b == 0 is rejected before the loop; b == -1 negates (wrapping) so
      // that MIN / -1 does not trap.
      using U = std::make_unsigned_t<T>;
      return b == -1 ? static_cast<T>(U(0) - static_cast<U>(a)) : static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
};
struct MaximumF {  // NaN wins
  template <typename T> static T apply(T a, T b) { return (a > b || a != a) ? a : b; }
};
struct MinimumF {  // NaN wins
  template <typename T> static T apply(T a, T b) { return (a < b || a != a) ? a : b; }
};
struct PowF {
  template <typename T> static T apply(T a, T b) { return std::pow(a, b); }
};

template <typename T>
void check_no_zero_divisor(const KernelContext& ctx, const T* y, std::int64_t n) {
  bool zero = false;
  for (std::int64_t i = 0; i < n; ++i) zero |= (y[i] == 0);
  if (zero)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' divides integers by zero (operand #1 holds a 0)");
}

template <typename F>
struct Binary {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      const Tensor& x = typed_input<T>(ctx, 0);
      const Tensor& y = typed_input<T>(ctx, 1);
      const std::string_view op = ctx.op()->name();
      const T* px = x.data<T>();
      const T* py = y.data<T>();
      if constexpr (std::is_same_v<F, DivF> && std::is_integral_v<T>)
        check_no_zero_divisor(ctx, py, y.numel());
      if (x.dims() == y.dims()) {
        Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
        T* __restrict po = out.data<T>();
        const std::int64_t n = x.numel();
        for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(px[i], py[i]);
        return;
      }
      Dims od = broadcast_dims(op, x.dims(), y.dims());
      // (The output may be a buffer an input also uses only when it is not
      // shared; alloc_output never hands out a buffer still held elsewhere.)
      Tensor& out = ctx.alloc_output(0, od, x.dtype());
      T* po = out.data<T>();
      const std::int64_t n = od.numel();
      if (y.numel() == 1 && x.numel() == n) {
        const T b = py[0];
        for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(px[i], b);
      } else if (x.numel() == 1 && y.numel() == n) {
        const T a = px[0];
        for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(a, py[i]);
      } else {
        run_broadcast<F>(make_broadcast_plan(x.dims(), y.dims(), od), px, py, po);
      }
    }
  };
};

template <typename T>
using AddK = Binary<AddF>::K<T>;
template <typename T>
using SubK = Binary<SubF>::K<T>;
template <typename T>
using MulK = Binary<MulF>::K<T>;
template <typename T>
using DivK = Binary<DivF>::K<T>;
template <typename T>
using MaximumK = Binary<MaximumF>::K<T>;
template <typename T>
using MinimumK = Binary<MinimumF>::K<T>;
template <typename T>
using PowK = Binary<PowF>::K<T>;

// x0 + x1 + … (same shapes).
template <typename T>
struct AddNK {
  static void run(KernelContext& ctx) {
    const std::uint32_t k = ctx.num_inputs();
    if (k == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has no inputs");
    const Tensor& x0 = typed_input<T>(ctx, 0);
    for (std::uint32_t i = 1; i < k; ++i)
      if (typed_input<T>(ctx, i).dims() != x0.dims())
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                    "' inputs must have one shape, got [", x0.dims().to_string(),
                    "] (input #0) and [", ctx.input(i).dims().to_string(), "] (input #", i, ")");
    // Read every input before the output buffer is (re)allocated: an input
    // may hold the only other reference to a buffer.
    Tensor& out = ctx.alloc_output(0, x0.dims(), x0.dtype());
    T* __restrict po = out.data<T>();
    const std::int64_t n = x0.numel();
    const T* a = x0.data<T>();
    if (k == 1) {
      for (std::int64_t j = 0; j < n; ++j) po[j] = a[j];
      return;
    }
    const T* b = ctx.input(1).data<T>();
    for (std::int64_t j = 0; j < n; ++j) po[j] = a[j] + b[j];
    for (std::uint32_t i = 2; i < k; ++i) {
      const T* __restrict c = ctx.input(i).data<T>();
      for (std::int64_t j = 0; j < n; ++j) po[j] += c[j];
    }
  }
};

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

}  // namespace

KILN_REGISTER_KERNELS(AddOp, Cpu, AddK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(SubOp, Cpu, SubK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(MulOp, Cpu, MulK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(DivOp, Cpu, DivK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(MaximumOp, Cpu, MaximumK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(MinimumOp, Cpu, MinimumK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(PowOp, Cpu, PowK, float, double);
KILN_REGISTER_KERNELS(AddNOp, Cpu, AddNK, float, double, std::int32_t, std::int64_t);

KILN_REGISTER_KERNELS(GradOf<MaximumOp>, Cpu, MaximumGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MinimumOp>, Cpu, MinimumGradK, float, double);

}  // namespace kiln::cpu
