// CPU kernels of the broadcasting binary ops — one kernel template expanded
// over BinaryFamily (kiln/dialect/binary_ops.h: add, sub, mul, div, maximum,
// minimum, pow, mod, fmod, shift_left, shift_right), each computing its
// Math::forward — plus maximum_grad /
// minimum_grad and add_n. Same-shape and scalar operands take flat loops;
// everything else runs the collapsed broadcast plan (cpu_kernel_util.h).
#include <algorithm>
#include <string_view>
#include <type_traits>

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/support/half.h"

namespace kiln::cpu {
namespace {

template <typename T>
void check_no_zero_divisor(const KernelContext& ctx, const T* y, std::int64_t n) {
  bool zero = false;
  for (std::int64_t i = 0; i < n; ++i) zero |= (y[i] == 0);
  if (zero)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' divides integers by zero (operand #1 holds a 0)");
}

// The kernel of BinaryOp<Math>: Math::forward elementwise, broadcast.
template <typename Math>
struct Binary {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      const Tensor& x = typed_input<T>(ctx, 0);
      const Tensor& y = typed_input<T>(ctx, 1);
      if constexpr ((std::is_same_v<Math, DivMath> || std::is_same_v<Math, ModMath> ||
                     std::is_same_v<Math, FmodMath>) &&
                    std::is_integral_v<T>)
        check_no_zero_divisor(ctx, y.data<T>(), y.numel());
      run_binary<MathForward<Math>, T, T>(ctx, x, y, x.dtype());
    }
  };
};

// ---- the 16-bit floats: Math::forward in f32 on the widened operands, each
// result rounded once (PyTorch's CPU half kernels' rule) ----

// How a 16-bit operand lines up with the flat output: element i of the
// output reads element i (Full), its one element (Scalar), or element
// i mod len (Row: its dims are the output's trailing dims, a bias).
struct HalfOperand {
  enum class Kind { Full, Scalar, Row, Other } kind;
  std::int64_t len;
};

HalfOperand half_operand(const Dims& d, const Dims& od) {
  const std::int64_t n = d.numel();
  if (n == od.numel()) return {HalfOperand::Kind::Full, n};
  if (n == 1) return {HalfOperand::Kind::Scalar, 1};
  int lead = 0;  // d without its leading 1s must be od's trailing dims
  while (lead < d.rank() && d[lead] == 1) ++lead;
  const int k = d.rank() - lead, shift = od.rank() - k;
  bool row = shift >= 0;
  for (int i = 0; row && i < k; ++i) row = d[lead + i] == od[shift + i];
  return {row ? HalfOperand::Kind::Row : HalfOperand::Kind::Other, n};
}

// Elements [i, i + m) of the output's view of operand p, widened into out.
template <DataType D>
void widen_operand(const std::uint16_t* p, const HalfOperand& o, std::int64_t i, std::int64_t m, float* out) {
  if (o.kind == HalfOperand::Kind::Full) return widen_half_row<D>(p + i, out, m);
  if (o.kind == HalfOperand::Kind::Scalar) {
    widen_half_row<D>(p, out, 1);
    return std::fill(out + 1, out + m, out[0]);
  }
  for (std::int64_t done = 0, j = i % o.len; done < m; j = 0) {
    const std::int64_t take = std::min(m - done, o.len - j);
    widen_half_row<D>(p + j, out + done, take);
    done += take;
  }
}

// Same-shape, scalar and row operands: a chunk of the output at a time
// through the thread's f32 scratch, without f32 copies of the tensors;
// other broadcasts widen both tensors whole. The f32 kernel's bits either
// way (one elementwise operation per output).
template <typename Math, DataType D>
void binary_half_kernel(KernelContext& ctx) {
  const Tensor x = input_of(ctx, 0, D), y = input_of(ctx, 1, D);  // copies: alive past alloc_output
  const Dims od = broadcast_dims(ctx.op()->name(), x.dims(), y.dims());
  const HalfOperand ox = half_operand(x.dims(), od), oy = half_operand(y.dims(), od);
  if (ox.kind == HalfOperand::Kind::Other || oy.kind == HalfOperand::Kind::Other) {
    const Tensor wx = widen_half<D>(x), wy = widen_half<D>(y);
    Tensor r = Tensor::empty(od, DataType::Float32);
    if (od.numel())
      run_broadcast<MathForward<Math>>(make_broadcast_plan(x.dims(), y.dims(), od), wx.data<float>(),
                                       wy.data<float>(), r.data<float>());
    return round_half<D>(r, ctx.alloc_output(0, od, D));
  }
  const auto* px = static_cast<const std::uint16_t*>(x.raw_data());
  const auto* py = static_cast<const std::uint16_t*>(y.raw_data());
  auto* po = static_cast<std::uint16_t*>(ctx.alloc_output(0, od, D).raw_data());
  parallel_for(od.numel(), items_per_range(6), [=](std::int64_t b, std::int64_t e) {
    float* buf = scratch<float>(3 * kHalfChunk);
    float *a = buf, *c = buf + kHalfChunk, *r = buf + 2 * kHalfChunk;
    for (std::int64_t i = b; i < e; i += kHalfChunk) {
      const std::int64_t m = std::min(kHalfChunk, e - i);
      widen_operand<D>(px, ox, i, m, a);
      widen_operand<D>(py, oy, i, m, c);
      for (std::int64_t k = 0; k < m; ++k) r[k] = MathForward<Math>::apply(a[k], c[k]);
      round_half_row<D>(r, po + i, m);
    }
  });
}

// One registration per member of BinaryFamily (binary_ops.h): the floats
// unless the op is integer-only, the integers unless it is floating-only.
template <typename Math>
void register_binary() {
  using Registrar = KernelRegistrar<BinaryOp<Math>>;
  constexpr std::string_view name = Math::name;
  if constexpr (!integer_only_math<Math>) {
    Registrar::template for_dtypes<Binary<Math>::template K, float, double>(PlaceKind::Cpu, name);
    Registrar(PlaceKind::Cpu, DataType::Float16, &binary_half_kernel<Math, DataType::Float16>, name);
    Registrar(PlaceKind::Cpu, DataType::BFloat16, &binary_half_kernel<Math, DataType::BFloat16>,
              name);
  }
  if constexpr (!Math::floating_only)
    Registrar::template for_dtypes<Binary<Math>::template K, std::int8_t, std::int16_t,
                                   std::int32_t, std::int64_t, std::uint8_t, std::uint16_t,
                                   std::uint32_t, std::uint64_t>(PlaceKind::Cpu, name);
}
template <typename... Maths>
bool register_family(BinaryMathList<Maths...>) {
  (register_binary<Maths>(), ...);
  return true;
}

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
    const T* b = k > 1 ? ctx.input(1).data<T>() : nullptr;
    // Elements split across the kernel's threads, each summed in input order.
    parallel_for(n, items_per_range(std::int64_t((k + 1) * sizeof(T))),
                 [&](std::int64_t j0, std::int64_t j1) {
                   if (k == 1) {
                     for (std::int64_t j = j0; j < j1; ++j) po[j] = a[j];
                     return;
                   }
                   for (std::int64_t j = j0; j < j1; ++j) po[j] = a[j] + b[j];
                   for (std::uint32_t i = 2; i < k; ++i) {
                     const T* __restrict c = ctx.input(i).data<T>();
                     for (std::int64_t j = j0; j < j1; ++j) po[j] += c[j];
                   }
                 });
  }
};

// add_n of 16-bit floats (mixed precision's gradient sums): summed in f32
// in input order, rounded once.
template <DataType D>
void add_n_half_kernel(KernelContext& ctx) {
  const std::uint32_t k = ctx.num_inputs();
  if (k == 0) throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has no inputs");
  if (ctx.input(0).dtype() != D) throw_input_dtype(ctx, 0, D);
  Tensor sum = widen_half<D>(ctx.input(0));
  float* ps = sum.data<float>();
  for (std::uint32_t i = 1; i < k; ++i) {
    const Tensor& xi = ctx.input(i);
    if (xi.dtype() != D || xi.dims() != sum.dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs must have one shape and dtype, got ",
                  xi.type_string(), " (input #", i, ") beside ", ctx.input(0).type_string(), " (input #0)");
    const auto* pi = static_cast<const std::uint16_t*>(xi.raw_data());
    for (std::int64_t j = 0, n = sum.numel(); j < n; ++j)
      ps[j] += D == DataType::Float16 ? half_to_float(pi[j]) : bfloat16_to_float(pi[j]);
  }
  round_half<D>(sum, ctx.alloc_output(0, sum.dims(), D));
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

}  // namespace

[[maybe_unused]] static const bool binary_family = register_family(BinaryFamily{});
KILN_REGISTER_KERNELS(AddNOp, Cpu, AddNK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNEL(AddNOp, Cpu, BFloat16, add_n_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(AddNOp, Cpu, Float16, add_n_half_kernel<DataType::Float16>);

KILN_REGISTER_KERNELS(GradOf<MaximumOp>, Cpu, MaximumGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MinimumOp>, Cpu, MinimumGradK, float, double);

}  // namespace kiln::cpu
