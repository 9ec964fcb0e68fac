// CPU kernels of the random ops (uniform_random, gaussian_random, dropout and
// dropout_grad) and
// the process-wide generator of kiln/kernel/random.h.
#include "kiln/kernel/random.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include "kiln/dialect/random_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "cpu_kernel_util.h"

namespace kiln {

namespace {
// The generator's seed and the number of keys drawn since. Relaxed order: the
// executor orders Random ops (happens-before through its dependency counters),
// so no kernel needs these to order anything else.
std::atomic<std::uint64_t> g_seed{kDefaultRandomSeed};
std::atomic<std::uint64_t> g_drawn{0};
}  // namespace

void set_random_seed(std::uint64_t seed) {
  g_seed.store(seed, std::memory_order_relaxed);
  g_drawn.store(0, std::memory_order_relaxed);
}

std::uint64_t random_key(std::int64_t seed_attr) {
  if (seed_attr != 0) return random_detail::mix64(static_cast<std::uint64_t>(seed_attr));
  std::uint64_t n = g_drawn.fetch_add(1, std::memory_order_relaxed);
  return random_bits(random_detail::mix64(g_seed.load(std::memory_order_relaxed)), n);
}

namespace {

// The shape attribute as run-time dims; a -1 left in it is an error.
Dims shape_dims(const KernelContext& ctx, const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' needs a fully known shape to run, got a dim of ", d);
    if (__builtin_mul_overflow(n, d, &n))
      throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' shape's element count overflows int64");
  }
  return Dims(shape);
}

template <typename T>
void uniform_random_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<UniformRandomOp>();
  if (!(a.min <= a.max))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' needs min <= max, got [",
                a.min, ", ", a.max, "]");
  Tensor& out = ctx.alloc_output(0, shape_dims(ctx, a.shape), data_type_of<T>);
  T* o = out.data<T>();
  const std::uint64_t key = random_key(a.seed);
  const double lo = a.min, span = a.max - a.min;
  const T hi = static_cast<T>(a.max), below_hi = std::nextafter(hi, static_cast<T>(a.min));
  const std::int64_t n = out.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = random_uniform01(key, static_cast<std::uint64_t>(i));
    T v = static_cast<T>(uniform_value(lo, span, u));
    o[i] = (v >= hi && span > 0) ? below_hi : v;  // keep [min, max) after rounding to T
  }
}

template <typename T>
void gaussian_random_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<GaussianRandomOp>();
  Tensor& out = ctx.alloc_output(0, shape_dims(ctx, a.shape), data_type_of<T>);
  T* o = out.data<T>();
  const std::uint64_t key = random_key(a.seed);
  const std::int64_t n = out.numel();
  double z0, z1;
  std::int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    random_normal_pair(key, static_cast<std::uint64_t>(i / 2), z0, z1);
    o[i] = static_cast<T>(gaussian_value(a.mean, a.std, z0));
    o[i + 1] = static_cast<T>(gaussian_value(a.mean, a.std, z1));
  }
  if (i < n) {
    random_normal_pair(key, static_cast<std::uint64_t>(i / 2), z0, z1);
    o[i] = static_cast<T>(gaussian_value(a.mean, a.std, z0));
  }
}

template <typename T>
void dropout_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<DropoutOp>();
  if (!(a.p >= 0.0 && a.p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' needs a drop probability p in [0, 1), got ", a.p);
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
  Tensor& mask = ctx.alloc_output(1, x.dims(), DataType::Bool);
  const T* in = x.data<T>();
  T* o = out.data<T>();
  bool* m = mask.data<bool>();
  const std::int64_t n = x.numel();
  if (a.is_test || a.p == 0.0) {  // identity; draws no key
    if (n > 0 && o != in) std::memcpy(o, in, static_cast<std::size_t>(n) * sizeof(T));
    std::memset(m, 1, static_cast<std::size_t>(n));
    return;
  }
  const std::uint64_t key = random_key(a.seed);
  const T scale = static_cast<T>(1.0 / (1.0 - a.p));
  for (std::int64_t i = 0; i < n; ++i) {
    bool keep = random_uniform01(key, static_cast<std::uint64_t>(i)) >= a.p;
    m[i] = keep;
    o[i] = keep ? in[i] * scale : T(0);
  }
}

}  // namespace

void random_key_kernel(KernelContext& ctx) {
  const std::int64_t one[] = {1};
  Tensor& out = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(one, 1)), DataType::UInt64);
  const auto& a = ctx.attrs<RandomKeyOp>();
  out.data<std::uint64_t>()[0] = a.is_test ? 0 : random_key(a.seed);
}

KILN_REGISTER_KERNEL(RandomKeyOp, Cpu, UInt64, random_key_kernel);
KILN_REGISTER_KERNEL(UniformRandomOp, Cpu, Float32, uniform_random_kernel<float>);
KILN_REGISTER_KERNEL(UniformRandomOp, Cpu, Float64, uniform_random_kernel<double>);
KILN_REGISTER_KERNEL(GaussianRandomOp, Cpu, Float32, gaussian_random_kernel<float>);
KILN_REGISTER_KERNEL(GaussianRandomOp, Cpu, Float64, gaussian_random_kernel<double>);
KILN_REGISTER_KERNEL(DropoutOp, Cpu, Float32, dropout_kernel<float>);
KILN_REGISTER_KERNEL(DropoutOp, Cpu, Float64, dropout_kernel<double>);

}  // namespace kiln

namespace kiln::cpu {
namespace {

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

KILN_REGISTER_KERNELS(GradOf<DropoutOp>, Cpu, DropoutGradK, float, double);

}  // namespace kiln::cpu
