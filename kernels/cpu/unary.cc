// CPU kernels of the unary ops of unary_ops.h: the family (relu, tanh,
// sigmoid, exp, log, sqrt, square, abs, neg, the trigonometric and hyperbolic
// functions, erf, floor, ceil, round, sign) and its gradient ops expanded
// from the Math structs (f32, f64, integers where the math allows; bf16 and
// f16 through the f32 loops chunk by chunk), the in-place relu_ / sqrt_ (the output variable is
// the input variable), gelu and gelu_grad (bf16 and f16 chunked alike), scale, assign and cast.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "unary_kernel_math.h"
#include "vector_math.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/support/half.h"

namespace kiln::cpu {
namespace {

// out = F::forward(x), or x = F::forward(x) when the output variable is the input's.
template <typename F, typename T>
void unary_apply(KernelContext& ctx) {
  const Tensor& x = typed_input<T>(ctx, 0);
  const std::int64_t n = x.numel();
  if (output_is_input(ctx, 0, 0)) {  // in place (relu_, sqrt_)
    map_elementwise_in_place<F, T>(ctx.output(0).data<T>(), n);
    return;
  }
  const T* px = x.data<T>();
  Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
  map_elementwise<F, T>(px, out.data<T>(), n);  // vector_math.h: AVX2 when the CPU has it
}


template <typename F, typename T>
void unary_grad(KernelContext& ctx) {
  const Tensor a = typed_input<T>(ctx, 0), d = typed_input<T>(ctx, 1);
  require_same_dims(ctx, a, d, 0, 1);
  Tensor& out = ctx.alloc_output(0, a.dims(), a.dtype());
  map_elementwise<F, T>(a.data<T>(), d.data<T>(), out.data<T>(), a.numel());
}

// The family's kernels, from each Math struct of unary_ops.h.
template <typename Math>
struct UnaryKernels {
  template <typename T>
  struct Forward {
    static void run(KernelContext& ctx) { unary_apply<KernelMath<Math>, T>(ctx); }
  };
  // dx = Math::backward(a, dout), a = x or y (GradReads).
  template <typename T>
  struct Backward {
    static void run(KernelContext& ctx) { unary_grad<Math, T>(ctx); }
  };
};

// ---- the family in bf16 / f16 ----
// x (and the gradient's dout) widened chunk by chunk into the thread's f32
// scratch, the f32 kernel's own loop run over the chunk (F's AVX-512 row
// where it has one), the result rounded once into out: the f32 kernel's
// bits on the widened x, without an f32 copy of the tensor.

template <typename F, DataType D>
void unary_half_apply(KernelContext& ctx) {
  const Tensor& x = input_of(ctx, 0, D);
  const auto* px = static_cast<const std::uint16_t*>(x.raw_data());
  void* out = output_is_input(ctx, 0, 0) ? ctx.output(0).raw_data() : ctx.alloc_output(0, x.dims(), D).raw_data();
  auto* po = static_cast<std::uint16_t*>(out);
  parallel_for(x.numel(), items_per_range(4), [=](std::int64_t b, std::int64_t e) {
    float* buf = scratch<float>(kHalfChunk);
    for (std::int64_t i = b; i < e; i += kHalfChunk) {
      const std::int64_t m = std::min(kHalfChunk, e - i);
      widen_half_row<D>(px + i, buf, m);
      simd_dispatch<simd_detail::MapInPlaceLoop<F, float>>(buf, m);
      round_half_row<D>(buf, po + i, m);
    }
  });
}

template <typename F, DataType D>
void unary_half_grad(KernelContext& ctx) {
  const Tensor &a = input_of(ctx, 0, D), &d = input_of(ctx, 1, D);
  require_same_dims(ctx, a, d, 0, 1);
  const auto* pa = static_cast<const std::uint16_t*>(a.raw_data());
  const auto* pd = static_cast<const std::uint16_t*>(d.raw_data());
  auto* po = static_cast<std::uint16_t*>(ctx.alloc_output(0, a.dims(), D).raw_data());
  parallel_for(a.numel(), items_per_range(6), [=](std::int64_t b, std::int64_t e) {
    float* buf = scratch<float>(3 * kHalfChunk);
    for (std::int64_t i = b; i < e; i += kHalfChunk) {
      const std::int64_t m = std::min(kHalfChunk, e - i);
      widen_half_row<D>(pa + i, buf, m);
      widen_half_row<D>(pd + i, buf + kHalfChunk, m);
      simd_dispatch<simd_detail::Map2Loop<F, float>>(buf, buf + kHalfChunk, buf + 2 * kHalfChunk, m);
      round_half_row<D>(buf + 2 * kHalfChunk, po + i, m);
    }
  });
}

template <typename Math, DataType D>
void register_unary_half() {
  KernelRegistrar<UnaryOp<Math>>(PlaceKind::Cpu, D, &unary_half_apply<KernelMath<Math>, D>, Math::name);
  KernelRegistrar<GradOf<UnaryOp<Math>>>(PlaceKind::Cpu, D, &unary_half_grad<Math, D>,
                                         GradOf<UnaryOp<Math>>::name);
}

template <typename Math>
void register_unary() {
  using K = UnaryKernels<Math>;
  constexpr auto cpu = PlaceKind::Cpu;
  constexpr std::string_view name = Math::name, grad_name = GradOf<UnaryOp<Math>>::name;
  if constexpr (Math::floating_only)
    KernelRegistrar<UnaryOp<Math>>::template for_dtypes<K::template Forward, float, double>(cpu, name);
  else
    KernelRegistrar<UnaryOp<Math>>::template for_dtypes<K::template Forward, float, double,
                                                        std::int32_t, std::int64_t>(cpu, name);
  KernelRegistrar<GradOf<UnaryOp<Math>>>::template for_dtypes<K::template Backward, float, double>(
      cpu, grad_name);
  register_unary_half<Math, DataType::BFloat16>();
  register_unary_half<Math, DataType::Float16>();
}
template <typename Math>
void register_inplace_unary() {
  using K = UnaryKernels<Math>;
  if constexpr (Math::floating_only)
    KernelRegistrar<InplaceUnaryOp<Math>>::template for_dtypes<K::template Forward, float, double>(
        PlaceKind::Cpu, Math::inplace_name);
  else
    KernelRegistrar<InplaceUnaryOp<Math>>::template for_dtypes<K::template Forward, float, double,
                                                               std::int32_t, std::int64_t>(
        PlaceKind::Cpu, Math::inplace_name);
}
template <typename... Maths>
bool register_family(MathList<Maths...>) {
  (register_unary<Maths>(), ...);
  return true;
}
template <typename... Maths>
bool register_inplace_family(MathList<Maths...>) {
  (register_inplace_unary<Maths>(), ...);
  return true;
}

template <typename T>
struct GeluK {
  static void run(KernelContext& ctx) {
    if (ctx.attrs<GeluOp>().approximate) unary_apply<GeluTanhF, T>(ctx);
    else unary_apply<GeluErfF, T>(ctx);
  }
};

struct GeluErfG {  // Φ(x) + x·φ(x); both from one exp in f32 (vector_math.h)
  static float backward(float x, float d) {
    const NormalCdfPdf n = normal_cdf_pdf(x);
    return d * (n.cdf + x * n.pdf);
  }
  static double backward(double x, double d) { return GeluErfMath::backward(x, d); }
};
template <typename T>
struct GeluGradK {
  static void run(KernelContext& ctx) {
    if (ctx.attrs<GradOf<GeluOp>>().approximate) unary_grad<GeluTanhG, T>(ctx);
    else unary_grad<GeluErfG, T>(ctx);
  }
};

// gelu and its gradient in bf16 / f16: the family's chunked 16-bit loops
// over gelu's f32 math (its bits on the widened operands, rounded once).
template <DataType D>
struct GeluHalfK {
  static void run(KernelContext& ctx) {
    if (ctx.attrs<GeluOp>().approximate) unary_half_apply<GeluTanhF, D>(ctx);
    else unary_half_apply<GeluErfF, D>(ctx);
  }
};
template <DataType D>
struct GeluHalfGradK {
  static void run(KernelContext& ctx) {
    if (ctx.attrs<GradOf<GeluOp>>().approximate) unary_half_grad<GeluTanhG, D>(ctx);
    else unary_half_grad<GeluErfG, D>(ctx);
  }
};

template <DataType D>
void register_gelu_half() {
  KernelRegistrar<GeluOp>(PlaceKind::Cpu, D, &GeluHalfK<D>::run, GeluOp::name);
  KernelRegistrar<GradOf<GeluOp>>(PlaceKind::Cpu, D, &GeluHalfGradK<D>::run, GradOf<GeluOp>::name);
}

[[maybe_unused]] const bool gelu_halves_registered = (register_gelu_half<DataType::BFloat16>(),
                                                      register_gelu_half<DataType::Float16>(), true);

template <typename T>
struct ScaleK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<ScaleOp>();
    const Tensor& x = typed_input<T>(ctx, 0);
    const std::int64_t n = x.numel();
    const T* __restrict px = x.data<T>();
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    T* __restrict po = out.data<T>();
    if constexpr (std::is_floating_point_v<T>) {
      // scale·(x + bias) = scale·x + scale·bias
      const T s = static_cast<T>(a.scale);
      const T b = static_cast<T>(a.bias_after_scale ? a.bias : a.scale * a.bias);
      for (std::int64_t i = 0; i < n; ++i) po[i] = s * px[i] + b;
    } else {
      const double s = a.scale;
      const double b = a.bias_after_scale ? a.bias : a.scale * a.bias;
      for (std::int64_t i = 0; i < n; ++i)
        po[i] = static_cast<T>(s * static_cast<double>(px[i]) + b);
    }
  }
};

// ---- assign / cast / full ----

// A byte copy; serves every dtype.
void assign_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (output_is_input(ctx, 0, 0)) return;
  Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
  if (x.bytes()) std::memcpy(out.raw_data(), x.raw_data(), x.bytes());
}

// The 16-bit floats as element types of their own (both store 16 bits).
struct Half { std::uint16_t bits; };
struct BHalf { std::uint16_t bits; };

// One element From → To, well defined for every value (see CastOp). The
// 16-bit floats convert through float (f64 → f16 rounds once, directly).
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<From, Half>) {
    return convert<To>(half_to_float(v.bits));
  } else if constexpr (std::is_same_v<From, BHalf>) {
    return convert<To>(bfloat16_to_float(v.bits));
  } else if constexpr (std::is_same_v<To, Half>) {
    if constexpr (std::is_same_v<From, double>)
      return Half{double_to_half(v)};
    else
      return Half{float_to_half(convert<float>(v))};
  } else if constexpr (std::is_same_v<To, BHalf>) {
    return BHalf{float_to_bfloat16(convert<float>(v))};
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // The range [lo, hi): lo is 0 or -2^(bits-1), hi 2^bits or 2^(bits-1),
    // both exact in floating point; anything outside saturates.
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr From hi = static_cast<From>(std::numeric_limits<To>::max() / 2 + 1) * From(2);
    if (!(v == v)) return To(0);
    if (v <= lo) return std::numeric_limits<To>::min();
    if (v >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <typename To, typename From>
void cast_loop(const void* in, void* out, std::int64_t n) {
  const From* __restrict pi = static_cast<const From*>(in);
  To* __restrict po = static_cast<To*>(out);
  for (std::int64_t i = 0; i < n; ++i) po[i] = convert<To>(pi[i]);
}

// f32 <-> bf16, the casts mixed precision puts around every lowered op:
// float_to_bfloat16's and bfloat16_to_float's bits, branch-free so the
// loops vectorize at the CPU's widest SIMD level.
struct FloatToBf16 {
  KILN_SIMD_INLINE static void run(const float* __restrict in, std::uint16_t* __restrict out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t u = std::bit_cast<std::uint32_t>(in[i]);
      const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
      out[i] = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    }
  }
};
struct Bf16ToFloat {
  KILN_SIMD_INLINE static void run(const std::uint16_t* __restrict in, float* __restrict out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(in[i]) << 16);
  }
};

// The f32 <-> bf16 cast of n elements; false for other dtypes.
bool cast_bf16(DataType from, DataType to, const void* in, void* out, std::int64_t n) {
  if (from == DataType::Float32 && to == DataType::BFloat16)
    f32_to_bf16(static_cast<const float*>(in), static_cast<std::uint16_t*>(out), n);
  else if (from == DataType::BFloat16 && to == DataType::Float32)
    bf16_to_f32(static_cast<const std::uint16_t*>(in), static_cast<float*>(out), n);
  else
    return false;
  return true;
}

// Calls f(T{}) with T the element type cast_loop uses for `t`.
template <typename F>
void with_cast_type(DataType t, F&& f) {
  switch (t) {
    case DataType::Float16: return f(Half{});
    case DataType::BFloat16: return f(BHalf{});
    case DataType::Float32: return f(float{});
    case DataType::Float64: return f(double{});
    case DataType::Int8: return f(std::int8_t{});
    case DataType::Int16: return f(std::int16_t{});
    case DataType::Int32: return f(std::int32_t{});
    case DataType::Int64: return f(std::int64_t{});
    case DataType::UInt8: return f(std::uint8_t{});
    case DataType::UInt16: return f(std::uint16_t{});
    case DataType::UInt32: return f(std::uint32_t{});
    case DataType::UInt64: return f(std::uint64_t{});
    case DataType::Bool: return f(bool{});
    case DataType::Undefined: break;
  }
}

bool castable(DataType t) { return t != DataType::Undefined; }

// Serves every input dtype; dispatches on (input dtype, attribute dtype).
void cast_kernel(KernelContext& ctx) {
  const DataType to = ctx.attrs<CastOp>().dtype;
  const Tensor& x = ctx.input(0);
  const DataType from = x.dtype();
  if (!castable(from) || !castable(to))
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no CPU cast from ",
                to_string(from), " to ", to_string(to));
  if (output_is_input(ctx, 0, 0))
    throw_error(ErrorKind::PreconditionNotMet, "op '", ctx.op()->name(),
                "' cannot run in place");
  const Tensor src = x;  // keeps the input alive while the output is (re)allocated
  Tensor& out = ctx.alloc_output(0, src.dims(), to);
  const std::int64_t n = src.numel();
  const void* in = src.raw_data();
  void* o = out.raw_data();
  if (from == to) {
    if (n) std::memcpy(o, in, src.bytes());
    return;
  }
  if (cast_bf16(from, to, in, o, n)) return;
  with_cast_type(from, [&](auto f) {
    with_cast_type(to, [&](auto t) { cast_loop<decltype(t), decltype(f)>(in, o, n); });
  });
}

}  // namespace

void bf16_to_f32(const std::uint16_t* in, float* out, std::int64_t n) {
  parallel_for(n, items_per_range(6), [=](std::int64_t b, std::int64_t e) {
    simd_dispatch<Bf16ToFloat>(in + b, out + b, e - b);
  });
}

void f32_to_bf16(const float* in, std::uint16_t* out, std::int64_t n) {
  parallel_for(n, items_per_range(6), [=](std::int64_t b, std::int64_t e) {
    simd_dispatch<FloatToBf16>(in + b, out + b, e - b);
  });
}

void bf16_to_f32_serial(const std::uint16_t* in, float* out, std::int64_t n) {
  simd_dispatch<Bf16ToFloat>(in, out, n);
}

void f32_to_bf16_serial(const float* in, std::uint16_t* out, std::int64_t n) {
  simd_dispatch<FloatToBf16>(in, out, n);
}

[[maybe_unused]] static const bool unary_family = register_family(UnaryFamily{});
[[maybe_unused]] static const bool inplace_family = register_inplace_family(InplaceUnaryFamily{});
KILN_REGISTER_KERNELS(GeluOp, Cpu, GeluK, float, double);
KILN_REGISTER_KERNELS(GradOf<GeluOp>, Cpu, GeluGradK, float, double);
KILN_REGISTER_KERNELS(ScaleOp, Cpu, ScaleK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNEL(AssignOp, Cpu, Undefined, assign_kernel);
KILN_REGISTER_KERNEL(CastOp, Cpu, Undefined, cast_kernel);

}  // namespace kiln::cpu
