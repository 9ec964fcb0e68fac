// Host halves of the CUDA max_pool2d / avg_pool2d / adaptive_avg_pool2d
// kernels and their gradients (pool.cu): the CPU's geometry and checks
// (pool_ops.h), then one launch. max_pool2d / avg_pool2d and their
// gradients also over bf16 / f16 (Bits16): the same kernels computing in
// f32 (launch_pool_half), not half_via_f32's widened copies.
#include <cstdint>

#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/pool_ops.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cuda {
namespace {

// A kernel's elements as bf16 / f16 bits of dtype Dt.
template <DataType Dt>
struct Bits16 {
  static constexpr DataType dtype = Dt;
};
template <typename T>
constexpr bool is_bits16 = false;
template <DataType Dt>
constexpr bool is_bits16<Bits16<Dt>> = true;

template <typename T>
const Tensor& pool_input(const KernelContext& ctx, std::uint32_t i) {
  if constexpr (is_bits16<T>) {
    if (ctx.input(i).dtype() != T::dtype) throw_input_dtype(ctx, i, T::dtype);
    return ctx.input(i);
  } else {
    return typed_input<T>(ctx, i);
  }
}

template <typename T>
void pool(bool max, const Tensor& x, Tensor& out, const Pool2dGeometry& g, bool exclusive, cudaStream_t s) {
  if constexpr (is_bits16<T>) launch_pool_half(T::dtype, max, x.raw_data(), out.raw_data(), g, exclusive, s);
  else launch_pool(max, x.data<T>(), out.data<T>(), g, exclusive, s);
}


template <typename T>
struct MaxPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = pool_input<T>(ctx, 0);
    data_format::require_nchw_kernel(ctx.op()->name(), ctx.attrs<MaxPool2dOp>().data_format, "CUDA");
    const Pool2dGeometry g =
        pool::geometry(ctx.op()->name(), x.dims(), ctx.attrs<MaxPool2dOp>());
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.ho, g.wo}, x.dtype());
    pool<T>(true, x, out, g, false, stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename T>
struct AvgPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = pool_input<T>(ctx, 0);
    const auto& a = ctx.attrs<AvgPool2dOp>();
    const Pool2dGeometry g = pool::geometry(ctx.op()->name(), x.dims(), a);
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.ho, g.wo}, x.dtype());
    pool<T>(false, x, out, g, a.exclusive, stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename OpT, bool is_max, typename T>
void pool_grad(KernelContext& ctx) {
  const Tensor x = pool_input<T>(ctx, 0), dout = pool_input<T>(ctx, 1);
  const auto& a = ctx.attrs<GradOf<OpT>>();
  if constexpr (is_max) data_format::require_nchw_kernel(ctx.op()->name(), a.data_format, "CUDA");
  const Pool2dGeometry g = pool::geometry(ctx.op()->name(), x.dims(), a);
  pool::check_dout(ctx.op()->name(), dout.dims(), g);
  bool exclusive = false;
  if constexpr (!is_max) exclusive = a.exclusive;
  Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
  if constexpr (is_bits16<T>)
    launch_pool_grad_half(T::dtype, is_max, x.raw_data(), dout.raw_data(), dx.raw_data(), g, exclusive,
                          stream_of(ctx));
  else
    launch_pool_grad(is_max, x.data<T>(), dout.data<T>(), dx.data<T>(), g, exclusive, stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
struct MaxPoolGradK {
  static void run(KernelContext& ctx) { pool_grad<MaxPool2dOp, true, T>(ctx); }
};
template <typename T>
struct AvgPoolGradK {
  static void run(KernelContext& ctx) { pool_grad<AvgPool2dOp, false, T>(ctx); }
};

template <typename T>
struct AdaptiveAvgPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const Pool2dGeometry g =
        pool::adaptive_geometry(ctx.op()->name(), x.dims(), ctx.attrs<AdaptiveAvgPool2dOp>().output_size);
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.ho, g.wo}, x.dtype());
    launch_adaptive_avg_pool(x.data<T>(), out.data<T>(), g, stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename T>
struct AdaptiveAvgPoolGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), dout = typed_input<T>(ctx, 1);
    const Pool2dGeometry g = pool::adaptive_geometry(ctx.op()->name(), x.dims(),
                                                     ctx.attrs<GradOf<AdaptiveAvgPool2dOp>>().output_size);
    pool::check_dout(ctx.op()->name(), dout.dims(), g);
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    launch_adaptive_avg_pool_grad(dout.data<T>(), dx.data<T>(), g, stream_of(ctx));
    check_launch(ctx);
  }
};

template <DataType Dt>
void register_pools16() {
  KernelRegistrar<MaxPool2dOp>(PlaceKind::Cuda, Dt, &MaxPoolK<Bits16<Dt>>::run, MaxPool2dOp::name);
  KernelRegistrar<GradOf<MaxPool2dOp>>(PlaceKind::Cuda, Dt, &MaxPoolGradK<Bits16<Dt>>::run,
                                       GradOf<MaxPool2dOp>::name);
  KernelRegistrar<AvgPool2dOp>(PlaceKind::Cuda, Dt, &AvgPoolK<Bits16<Dt>>::run, AvgPool2dOp::name);
  KernelRegistrar<GradOf<AvgPool2dOp>>(PlaceKind::Cuda, Dt, &AvgPoolGradK<Bits16<Dt>>::run,
                                       GradOf<AvgPool2dOp>::name);
}

[[maybe_unused]] const bool pools16_registered = [] {
  register_pools16<DataType::BFloat16>();
  register_pools16<DataType::Float16>();
  return true;
}();

}  // namespace

KILN_REGISTER_KERNELS(AdaptiveAvgPool2dOp, Cuda, AdaptiveAvgPoolK, float, double);
KILN_REGISTER_KERNELS(GradOf<AdaptiveAvgPool2dOp>, Cuda, AdaptiveAvgPoolGradK, float, double);
KILN_REGISTER_KERNELS(MaxPool2dOp, Cuda, MaxPoolK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(GradOf<MaxPool2dOp>, Cuda, MaxPoolGradK, float, double);
KILN_REGISTER_KERNELS(AvgPool2dOp, Cuda, AvgPoolK, float, double);
KILN_REGISTER_KERNELS(GradOf<AvgPool2dOp>, Cuda, AvgPoolGradK, float, double);

}  // namespace kiln::cuda
