// CPU kernels of sum_grad / mean_grad / max_grad: each element of x maps to
// the element of the reduced output it went into (an odometer over x with
// stride 0 along the reduced axes); sum copies dout there, mean divides by
// the count reduced, max routes dout to the maxima (split among ties).
// f32 and f64.
#include <algorithm>
#include <vector>

#include "cpu_kernel_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/reduce_ops.h"

namespace kiln::cpu {
namespace {

enum class Kind { Sum, Mean, Max };

// Calls f(i, o) for every flat index i of x in order, o being the flat index
// of the reduced element it belongs to.
template <typename F>
void for_each_reduced(const Dims& xd, const std::vector<int>& axes, F&& f) {
  const int r = xd.rank();
  const std::int64_t n = xd.numel();
  if (n == 0) return;
  std::int64_t os[Dims::kMaxRank] = {};
  std::int64_t s = 1;
  for (int i = r - 1; i >= 0; --i) {
    if (std::binary_search(axes.begin(), axes.end(), i)) continue;
    os[i] = s;
    s *= xd[i];
  }
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t o = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, o);
    for (int d = r - 1; d >= 0; --d) {
      o += os[d];
      if (++idx[d] < xd[d]) break;
      o -= os[d] * xd[d];
      idx[d] = 0;
    }
  }
}

template <Kind kind, typename OpT, typename T>
void reduce_grad(KernelContext& ctx) {
  const auto& a = ctx.attrs<OpT>();
  const std::string_view op = ctx.op()->name();
  const Tensor x = typed_input<T>(ctx, 0);
  const std::uint32_t nd = ctx.num_inputs() - 1;
  const Tensor dout = typed_input<T>(ctx, nd);
  const Dims& xd = x.dims();
  auto axes = normalize_reduce_axes(op, a.axis, xd.rank());
  std::int64_t count = 1, on = 1;
  for (int i = 0; i < xd.rank(); ++i)
    (std::binary_search(axes.begin(), axes.end(), i) ? count : on) *= xd[i];
  // dout must hold one element per reduced element, laid out as the forward
  // op's output (keepdim or not: the same order).
  {
    std::int64_t buf[Dims::kMaxRank];
    int r = 0;
    for (int i = 0; i < xd.rank(); ++i) {
      bool red = std::binary_search(axes.begin(), axes.end(), i);
      if (!red) buf[r++] = xd[i];
      else if (a.keepdim) buf[r++] = 1;
    }
    const Dims want(std::span<const std::int64_t>(buf, r));
    for (std::uint32_t k = 1; k <= nd; ++k)
      if (ctx.input(k).dims() != want)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' input #", k, " [",
                    ctx.input(k).dims().to_string(), "] must have x's reduced shape [",
                    want.to_string(), "]");
  }
  Tensor& dx = ctx.alloc_output(0, xd, x.dtype());
  T* pdx = dx.data<T>();
  const T* pd = dout.data<T>();
  if constexpr (kind == Kind::Sum) {
    for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) { pdx[i] = pd[o]; });
  } else if constexpr (kind == Kind::Mean) {
    const T inv = T(1) / static_cast<T>(count);
    for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) { pdx[i] = pd[o] * inv; });
  } else {
    const Tensor out = typed_input<T>(ctx, 1);
    const T* px = x.data<T>();
    const T* pm = out.data<T>();
    thread_local std::vector<std::int64_t> ties;  // grown once per thread, then reused
    if (static_cast<std::int64_t>(ties.size()) < on) ties.resize(static_cast<std::size_t>(on));
    std::fill(ties.begin(), ties.begin() + on, 0);
    for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) {
      if (px[i] == pm[o]) ++ties[static_cast<std::size_t>(o)];
    });
    for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) {
      pdx[i] = px[i] == pm[o] ? pd[o] / static_cast<T>(ties[static_cast<std::size_t>(o)]) : T(0);
    });
  }
}

template <typename T>
struct SumGradK {
  static void run(KernelContext& ctx) { reduce_grad<Kind::Sum, GradOf<SumOp>, T>(ctx); }
};
template <typename T>
struct MeanGradK {
  static void run(KernelContext& ctx) { reduce_grad<Kind::Mean, GradOf<MeanOp>, T>(ctx); }
};
template <typename T>
struct MaxGradK {
  static void run(KernelContext& ctx) { reduce_grad<Kind::Max, GradOf<MaxOp>, T>(ctx); }
};

}  // namespace

KILN_REGISTER_KERNELS(GradOf<SumOp>, Cpu, SumGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MeanOp>, Cpu, MeanGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MaxOp>, Cpu, MaxGradK, float, double);

}  // namespace kiln::cpu
