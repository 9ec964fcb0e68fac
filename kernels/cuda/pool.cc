// Host halves of the CUDA max_pool2d / avg_pool2d / adaptive_avg_pool2d
// kernels and their gradients (pool.cu): the CPU's geometry and checks
// (pool_ops.h), then one launch.
#include <cstdint>

#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/pool_ops.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cuda {
namespace {


template <typename T>
struct MaxPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    data_format::require_nchw_kernel(ctx.op()->name(), ctx.attrs<MaxPool2dOp>().data_format, "CUDA");
    const Pool2dGeometry g =
        pool::geometry(ctx.op()->name(), x.dims(), ctx.attrs<MaxPool2dOp>());
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.ho, g.wo}, x.dtype());
    launch_pool(true, x.data<T>(), out.data<T>(), g, false, stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename T>
struct AvgPoolK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const auto& a = ctx.attrs<AvgPool2dOp>();
    const Pool2dGeometry g = pool::geometry(ctx.op()->name(), x.dims(), a);
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.ho, g.wo}, x.dtype());
    launch_pool(false, x.data<T>(), out.data<T>(), g, a.exclusive, stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename OpT, bool is_max, typename T>
void pool_grad(KernelContext& ctx) {
  const Tensor x = typed_input<T>(ctx, 0), dout = typed_input<T>(ctx, 1);
  const auto& a = ctx.attrs<GradOf<OpT>>();
  if constexpr (is_max) data_format::require_nchw_kernel(ctx.op()->name(), a.data_format, "CUDA");
  const Pool2dGeometry g = pool::geometry(ctx.op()->name(), x.dims(), a);
  pool::check_dout(ctx.op()->name(), dout.dims(), g);
  bool exclusive = false;
  if constexpr (!is_max) exclusive = a.exclusive;
  Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
  launch_pool_grad(is_max, x.data<T>(), dout.data<T>(), dx.data<T>(), g, exclusive,
                   stream_of(ctx));
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

}  // namespace

KILN_REGISTER_KERNELS(AdaptiveAvgPool2dOp, Cuda, AdaptiveAvgPoolK, float, double);
KILN_REGISTER_KERNELS(GradOf<AdaptiveAvgPool2dOp>, Cuda, AdaptiveAvgPoolGradK, float, double);
KILN_REGISTER_KERNELS(MaxPool2dOp, Cuda, MaxPoolK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(GradOf<MaxPool2dOp>, Cuda, MaxPoolGradK, float, double);
KILN_REGISTER_KERNELS(AvgPool2dOp, Cuda, AvgPoolK, float, double);
KILN_REGISTER_KERNELS(GradOf<AvgPool2dOp>, Cuda, AvgPoolGradK, float, double);

}  // namespace kiln::cuda
