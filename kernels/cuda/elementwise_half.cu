// bf16 and f16 kernels of the elementwise families on CUDA: the unary
// family and its gradients, the floating binaries (broadcasting as
// elementwise.cu's) and gelu's launchers. Each element is widened to f32,
// computed by the same math struct as the f32 kernel and rounded once, in
// one pass over the 16-bit tensors: the bits half_via_f32 gives (widen,
// the f32 kernel, round), without its f32 copies and three extra launches.
// Launchers only (launch.h); their host halves are elementwise_kernels.h's
// (gelu: elementwise.cc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "grid_stride.cuh"
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

}  // namespace

template <typename Math>
void launch_binary_half(DataType dt, const void* x, const void* y, void* out, std::int64_t n,
                        const BroadcastPlan* plan, cudaStream_t s) {
  if (n == 0) return;
  const auto* xp = static_cast<const std::uint16_t*>(x);
  const auto* yp = static_cast<const std::uint16_t*>(y);
  auto* op = static_cast<std::uint16_t*>(out);
  constexpr DataType B = DataType::BFloat16, H = DataType::Float16;
  if (!plan && dt == B) binary_half_same_shape<Math, B><<<blocks_for(n), kThreads, 0, s>>>(xp, yp, op, n);
  else if (!plan) binary_half_same_shape<Math, H><<<blocks_for(n), kThreads, 0, s>>>(xp, yp, op, n);
  else if (dt == B) binary_half_broadcast<Math, B><<<blocks_for(n), kThreads, 0, s>>>(xp, yp, op, n, *plan);
  else binary_half_broadcast<Math, H><<<blocks_for(n), kThreads, 0, s>>>(xp, yp, op, n, *plan);
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

#define KILN_BINARY_HALF(M)                                                                           \
  template void launch_binary_half<M>(DataType, const void*, const void*, void*, std::int64_t, \
                                      const BroadcastPlan*, cudaStream_t);
#define KILN_UNARY_HALF(M)                                                                         \
  template void launch_unary_forward_half<M>(DataType, const void*, void*, std::int64_t, cudaStream_t); \
  template void launch_unary_backward_half<M>(DataType, const void*, const void*, void*, std::int64_t,  \
                                              cudaStream_t);

// The floating members of BinaryFamily.
KILN_BINARY_HALF(AddMath)
KILN_BINARY_HALF(SubMath)
KILN_BINARY_HALF(MulMath)
KILN_BINARY_HALF(DivMath)
KILN_BINARY_HALF(MaximumMath)
KILN_BINARY_HALF(MinimumMath)
KILN_BINARY_HALF(PowMath)
KILN_BINARY_HALF(ModMath)
KILN_BINARY_HALF(FmodMath)

// Every member of UnaryFamily and its gradient.
KILN_UNARY_HALF(ReluMath)
KILN_UNARY_HALF(TanhMath)
KILN_UNARY_HALF(SigmoidMath)
KILN_UNARY_HALF(ExpMath)
KILN_UNARY_HALF(LogMath)
KILN_UNARY_HALF(SqrtMath)
KILN_UNARY_HALF(SquareMath)
KILN_UNARY_HALF(AbsMath)
KILN_UNARY_HALF(NegMath)
KILN_UNARY_HALF(SinMath)
KILN_UNARY_HALF(CosMath)
KILN_UNARY_HALF(TanMath)
KILN_UNARY_HALF(AsinMath)
KILN_UNARY_HALF(AcosMath)
KILN_UNARY_HALF(AtanMath)
KILN_UNARY_HALF(SinhMath)
KILN_UNARY_HALF(CoshMath)
KILN_UNARY_HALF(AsinhMath)
KILN_UNARY_HALF(AcoshMath)
KILN_UNARY_HALF(AtanhMath)
KILN_UNARY_HALF(ErfMath)
KILN_UNARY_HALF(FloorMath)
KILN_UNARY_HALF(CeilMath)
KILN_UNARY_HALF(RoundMath)
KILN_UNARY_HALF(SignMath)

// gelu's two forms (elementwise.cc reads the attribute).
KILN_UNARY_HALF(GeluErfMath)
KILN_UNARY_HALF(GeluTanhMath)

}  // namespace kiln::cuda
