// bf16 and f16 kernels of the elementwise families on CUDA: the unary
// family and its gradients, the floating binaries (broadcasting as
// elementwise.cu's) and gelu's launchers. Each element is widened to f32,
// computed by the same math struct as the f32 kernel and rounded once, in
// one pass over the 16-bit tensors: the bits half_via_f32 gives (widen,
// the f32 kernel, round), without its f32 copies and three extra launches.
// Registered by register.cc (gelu: elementwise.cc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda_kernel_util.cuh"
#include "cuda_kernels.h"
#include "kiln/dialect/binary_math.h"
#include "kiln/dialect/unary_math.h"
#include "kiln/kernel/broadcast.h"
#include "launch.h"

namespace kiln::cuda {
namespace {

template <DataType D>
__device__ float wide(std::uint16_t v) {
  if constexpr (D == DataType::BFloat16) return __bfloat162float(__ushort_as_bfloat16(v));
  else return __half2float(__ushort_as_half(v));
}
template <DataType D>
__device__ std::uint16_t narrow(float v) {
  if constexpr (D == DataType::BFloat16) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else return __half_as_ushort(__float2half_rn(v));
}

// out may be x (the in-place twins): each element is read, then written.
template <typename Math, DataType D>
__global__ void unary_half(const std::uint16_t* x, std::uint16_t* out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = narrow<D>(Math::forward(wide<D>(x[i])));
}

template <typename Math, DataType D>
__global__ void unary_half_backward(const std::uint16_t* __restrict__ a, const std::uint16_t* __restrict__ d,
                                    std::uint16_t* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = narrow<D>(Math::backward(wide<D>(a[i]), wide<D>(d[i])));
}

template <typename Math, DataType D>
__global__ void binary_half_same_shape(const std::uint16_t* __restrict__ x, const std::uint16_t* __restrict__ y,
                                       std::uint16_t* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = narrow<D>(Math::forward(wide<D>(x[i]), wide<D>(y[i])));
}

template <typename Math, DataType D>
__global__ void binary_half_broadcast(const std::uint16_t* __restrict__ x, const std::uint16_t* __restrict__ y,
                                      std::uint16_t* __restrict__ out, std::int64_t n, BroadcastPlan p) {
  KILN_GRID_STRIDE(i, n) {
    std::int64_t xo, yo;
    broadcast_offsets(p, i, xo, yo);
    out[i] = narrow<D>(Math::forward(wide<D>(x[xo]), wide<D>(y[yo])));
  }
}

// Input i of ctx, which must be of dtype D.
template <DataType D>
Tensor half_input(const KernelContext& ctx, std::uint32_t i) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != D) throw_input_dtype(ctx, i, D);
  return t;
}

const std::uint16_t* bits(const Tensor& t) { return static_cast<const std::uint16_t*>(t.raw_data()); }
std::uint16_t* bits(Tensor& t) { return static_cast<std::uint16_t*>(t.raw_data()); }

}  // namespace

template <typename Math, DataType D>
void binary_half_kernel(KernelContext& ctx) {
  // Copies keep x's and y's buffers alive while the output is allocated.
  const Tensor x = half_input<D>(ctx, 0), y = half_input<D>(ctx, 1);
  const Dims od = broadcast_dims(ctx.op()->name(), x.dims(), y.dims());
  Tensor& out = ctx.alloc_output(0, od, D);
  const std::int64_t n = od.numel();
  if (n == 0) return;
  const cudaStream_t s = stream_of(ctx);
  if (x.dims() == y.dims())
    binary_half_same_shape<Math, D><<<blocks_for(n), kThreads, 0, s>>>(bits(x), bits(y), bits(out), n);
  else
    binary_half_broadcast<Math, D><<<blocks_for(n), kThreads, 0, s>>>(
        bits(x), bits(y), bits(out), n, make_broadcast_plan(x.dims(), y.dims(), od));
  check_launch(ctx);
}

template <typename Math, DataType D>
void unary_half_kernel(KernelContext& ctx) {
  const Tensor x = half_input<D>(ctx, 0);
  Tensor& out = output_is_input(ctx, 0, 0) ? ctx.output(0) : ctx.alloc_output(0, x.dims(), D);
  const std::int64_t n = x.numel();
  if (n) unary_half<Math, D><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(bits(x), bits(out), n);
  check_launch(ctx);
}

template <typename Math, DataType D>
void unary_half_grad_kernel(KernelContext& ctx) {
  const Tensor a = half_input<D>(ctx, 0), d = half_input<D>(ctx, 1);
  if (a.dims() != d.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs must have one shape, got [",
                a.dims().to_string(), "] and [", d.dims().to_string(), "]");
  Tensor& out = ctx.alloc_output(0, a.dims(), D);
  const std::int64_t n = a.numel();
  if (n)
    unary_half_backward<Math, D><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(bits(a), bits(d), bits(out), n);
  check_launch(ctx);
}

template <typename Math>
void launch_unary_forward_half(DataType dt, const void* x, void* out, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const auto* xp = static_cast<const std::uint16_t*>(x);
  auto* op = static_cast<std::uint16_t*>(out);
  if (dt == DataType::BFloat16) unary_half<Math, DataType::BFloat16><<<blocks_for(n), kThreads, 0, s>>>(xp, op, n);
  else unary_half<Math, DataType::Float16><<<blocks_for(n), kThreads, 0, s>>>(xp, op, n);
}

template <typename Math>
void launch_unary_backward_half(DataType dt, const void* x, const void* d, void* out, std::int64_t n,
                                cudaStream_t s) {
  if (n == 0) return;
  const auto* xp = static_cast<const std::uint16_t*>(x);
  const auto* dp = static_cast<const std::uint16_t*>(d);
  auto* op = static_cast<std::uint16_t*>(out);
  if (dt == DataType::BFloat16)
    unary_half_backward<Math, DataType::BFloat16><<<blocks_for(n), kThreads, 0, s>>>(xp, dp, op, n);
  else
    unary_half_backward<Math, DataType::Float16><<<blocks_for(n), kThreads, 0, s>>>(xp, dp, op, n);
}

// ---- explicit instantiations: the members register.cc registers ----

#define KILN_HALVES(F, M) F(M, DataType::BFloat16) F(M, DataType::Float16)
#define KILN_BINARY_HALF(M, D) template void binary_half_kernel<M, D>(KernelContext&);
#define KILN_UNARY_HALF(M, D)                                     \
  template void unary_half_kernel<M, D>(KernelContext&); \
  template void unary_half_grad_kernel<M, D>(KernelContext&);

// The floating members of BinaryFamily.
KILN_HALVES(KILN_BINARY_HALF, AddMath)
KILN_HALVES(KILN_BINARY_HALF, SubMath)
KILN_HALVES(KILN_BINARY_HALF, MulMath)
KILN_HALVES(KILN_BINARY_HALF, DivMath)
KILN_HALVES(KILN_BINARY_HALF, MaximumMath)
KILN_HALVES(KILN_BINARY_HALF, MinimumMath)
KILN_HALVES(KILN_BINARY_HALF, PowMath)
KILN_HALVES(KILN_BINARY_HALF, ModMath)
KILN_HALVES(KILN_BINARY_HALF, FmodMath)

// Every member of UnaryFamily and its gradient.
KILN_HALVES(KILN_UNARY_HALF, ReluMath)
KILN_HALVES(KILN_UNARY_HALF, TanhMath)
KILN_HALVES(KILN_UNARY_HALF, SigmoidMath)
KILN_HALVES(KILN_UNARY_HALF, ExpMath)
KILN_HALVES(KILN_UNARY_HALF, LogMath)
KILN_HALVES(KILN_UNARY_HALF, SqrtMath)
KILN_HALVES(KILN_UNARY_HALF, SquareMath)
KILN_HALVES(KILN_UNARY_HALF, AbsMath)
KILN_HALVES(KILN_UNARY_HALF, NegMath)
KILN_HALVES(KILN_UNARY_HALF, SinMath)
KILN_HALVES(KILN_UNARY_HALF, CosMath)
KILN_HALVES(KILN_UNARY_HALF, TanMath)
KILN_HALVES(KILN_UNARY_HALF, AsinMath)
KILN_HALVES(KILN_UNARY_HALF, AcosMath)
KILN_HALVES(KILN_UNARY_HALF, AtanMath)
KILN_HALVES(KILN_UNARY_HALF, SinhMath)
KILN_HALVES(KILN_UNARY_HALF, CoshMath)
KILN_HALVES(KILN_UNARY_HALF, AsinhMath)
KILN_HALVES(KILN_UNARY_HALF, AcoshMath)
KILN_HALVES(KILN_UNARY_HALF, AtanhMath)
KILN_HALVES(KILN_UNARY_HALF, ErfMath)
KILN_HALVES(KILN_UNARY_HALF, FloorMath)
KILN_HALVES(KILN_UNARY_HALF, CeilMath)
KILN_HALVES(KILN_UNARY_HALF, RoundMath)
KILN_HALVES(KILN_UNARY_HALF, SignMath)

// gelu's two forms (elementwise.cc reads the attribute).
template void launch_unary_forward_half<GeluErfMath>(DataType, const void*, void*, std::int64_t, cudaStream_t);
template void launch_unary_forward_half<GeluTanhMath>(DataType, const void*, void*, std::int64_t, cudaStream_t);
template void launch_unary_backward_half<GeluErfMath>(DataType, const void*, const void*, void*, std::int64_t,
                                                      cudaStream_t);
template void launch_unary_backward_half<GeluTanhMath>(DataType, const void*, const void*, void*, std::int64_t,
                                                       cudaStream_t);

}  // namespace kiln::cuda
