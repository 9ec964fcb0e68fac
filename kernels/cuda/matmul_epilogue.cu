// kiln.fused_matmul's epilogue where cuBLASLt does not apply it
// (launch.h's launch_bias_activation): a bias along the product's last dim
// (or one element; or none) added, the sum kept where asked, then relu or
// gelu (either form), in place over the product or from it. Each step
// computes what kiln.add's and the activation's own CUDA kernels compute
// (16-bit: in f32, each result rounded once).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "grid_stride.cuh"
#include "kiln/dialect/binary_math.h"
#include "kiln/dialect/unary_math.h"
#include "kiln/support/error.h"
#include "launch.h"

namespace kiln::cuda {
namespace {

// E: float, double, __half or __nv_bfloat16; S: how it is stored.
template <typename E>
using Stored = std::conditional_t<std::is_floating_point_v<E>, E, std::uint16_t>;
template <typename E>
using Wide = std::conditional_t<std::is_same_v<E, double>, double, float>;

template <typename E>
__device__ Wide<E> load_wide(const Stored<E>* p, std::int64_t i) {
  if constexpr (std::is_floating_point_v<E>) return p[i];
  else if constexpr (std::is_same_v<E, __half>) return __half2float(__ushort_as_half(p[i]));
  else return __bfloat162float(__ushort_as_bfloat16(p[i]));
}
template <typename E>
__device__ void store_narrow(Stored<E>* p, std::int64_t i, Wide<E> v) {
  if constexpr (std::is_floating_point_v<E>) p[i] = v;
  else if constexpr (std::is_same_v<E, __half>) p[i] = __half_as_ushort(__float2half_rn(v));
  else p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// v as stored in E and read back (16-bit: rounded; f32, f64: v).
template <typename E>
__device__ Wide<E> stored_value(Wide<E> v) {
  if constexpr (std::is_floating_point_v<E>) return v;
  else if constexpr (std::is_same_v<E, __half>) return __half2float(__float2half_rn(v));
  else return __bfloat162float(__float2bfloat16_rn(v));
}

template <typename W>
__device__ W activate(EpilogueAct act, W v) {
  switch (act) {
    case EpilogueAct::Relu: return ReluMath::forward(v);
    case EpilogueAct::GeluErf: return GeluErfMath::forward(v);
    case EpilogueAct::GeluTanh: return GeluTanhMath::forward(v);
    case EpilogueAct::None: break;
  }
  return v;
}

template <typename E>
__global__ void bias_activation(const Stored<E>* x, Stored<E>* y, Stored<E>* pre, const Stored<E>* bias,
                                std::int64_t total, std::int64_t n, bool one_bias, EpilogueAct act) {
  KILN_GRID_STRIDE(i, total) {
    Wide<E> v = load_wide<E>(x, i);
    if (bias) v = AddMath::forward(v, load_wide<E>(bias, one_bias ? 0 : i % n));
    if (pre) store_narrow<E>(pre, i, v);
    if (act != EpilogueAct::None) v = activate(act, stored_value<E>(v));
    store_narrow<E>(y, i, v);
  }
}

template <typename E>
void launch(const void* x, void* y, void* pre, const void* bias, std::int64_t total, std::int64_t n, bool one_bias,
            EpilogueAct act, cudaStream_t s) {
  bias_activation<E><<<blocks_for(total), kThreads, 0, s>>>(
      static_cast<const Stored<E>*>(x), static_cast<Stored<E>*>(y), static_cast<Stored<E>*>(pre),
      static_cast<const Stored<E>*>(bias), total, n, one_bias, act);
}

}  // namespace

void launch_bias_activation(DataType dt, const void* x, void* y, void* pre, const void* bias, std::int64_t total,
                            std::int64_t n, bool one_bias, EpilogueAct act, cudaStream_t s) {
  if (total == 0) return;
  switch (dt) {
    case DataType::Float32: return launch<float>(x, y, pre, bias, total, n, one_bias, act, s);
    case DataType::Float64: return launch<double>(x, y, pre, bias, total, n, one_bias, act, s);
    case DataType::BFloat16: return launch<__nv_bfloat16>(x, y, pre, bias, total, n, one_bias, act, s);
    case DataType::Float16: return launch<__half>(x, y, pre, bias, total, n, one_bias, act, s);
    default:
      throw_error(ErrorKind::Unimplemented, "kiln.fused_matmul's CUDA epilogue has no ", to_string(dt),
                  " form");
  }
}

}  // namespace kiln::cuda
