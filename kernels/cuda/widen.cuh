// The type a kernel computes in for elements stored as S — bf16 / f16
// widened to f32, the others as they are — and the two conversions:
// widened where an element is read (exact), narrowed where a result is
// written (rounded to nearest even, once: half_via_f32's bits).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln::cuda {

template <typename S>
struct WidenedOf {
  using type = S;
};
template <>
struct WidenedOf<__nv_bfloat16> {
  using type = float;
};
template <>
struct WidenedOf<__half> {
  using type = float;
};
template <typename S>
using Widened = typename WidenedOf<S>::type;

__device__ inline float widened(float v) { return v; }
__device__ inline double widened(double v) { return v; }
__device__ inline std::int32_t widened(std::int32_t v) { return v; }
__device__ inline std::int64_t widened(std::int64_t v) { return v; }
__device__ inline float widened(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float widened(__half v) { return __half2float(v); }

template <typename S>
__device__ inline S narrowed(Widened<S> v) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else if constexpr (std::is_same_v<S, __half>) return __float2half_rn(v);
  else return v;
}

}  // namespace kiln::cuda
