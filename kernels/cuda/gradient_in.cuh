// An optimizer update's gradient element on the device (launch.h's
// GradientIn): the parameter's type T, or an f32 parameter's bf16 / f16
// gradient widened exactly (bfloat16_to_float's and half_to_float's bits),
// so the update has the bits it has on the gradient cast to f32.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "launch.h"

namespace kiln::cuda {

template <typename T>
__device__ __forceinline__ T gradient_at(const void* g, GradientType type, std::int64_t i) {
  if constexpr (std::is_same_v<T, float>) {
    if (type == GradientType::BFloat16)
      return __uint_as_float(static_cast<unsigned>(static_cast<const std::uint16_t*>(g)[i]) << 16);
    if (type == GradientType::Float16) return __half2float(static_cast<const __half*>(g)[i]);
  }
  return static_cast<const T*>(g)[i];
}

template <typename T>
__device__ __forceinline__ T gradient_at(const GradientIn& g, std::int64_t i) {
  return gradient_at<T>(g.data, g.type, i);
}

}  // namespace kiln::cuda
