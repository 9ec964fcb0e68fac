// The forward function the CPU kernels of the unary family run (unary.cc,
// and the fused elementwise kernel, which must compute what they compute):
// the Math struct's, except where libm's call would keep the loop scalar
// (f32 tanh and sigmoid take the polynomial forms of vector_math.h; f64
// stays libm's).
#pragma once

#include <algorithm>
#include <type_traits>

#include "sigmoid_avx512.h"
#include "vector_math.h"
#include "kiln/dialect/unary_math.h"

namespace kiln::cpu {

template <typename Math>
struct KernelMath : Math {};
template <>
struct KernelMath<TanhMath> : TanhMath {
  template <typename T> static T forward(T x) { return fast_tanh(x); }
};
// f32 sigmoid below -87 would be denormal (under 1.2e-38), and each
// multiply that reads a denormal takes a microcode assist (measured: SiLU
// over such values 5x slower); it stays at sigmoid(-87), about 1.6e-38.
// With AVX-512, f32 rows take sigmoid_avx512.h's hand-written form.
template <>
struct KernelMath<SigmoidMath> : SigmoidMath {
  template <typename T> static T forward(T x) {
    if constexpr (std::is_same_v<T, float>) x = std::max(x, -87.0f);
    return T(1) / (T(1) + fast_exp(-x));
  }
#ifdef KILN_HAS_SIMD_CLONES
  KILN_TARGET_AVX512 static void map_avx512(const float* x, float* out, std::int64_t n) {
    avx512::sigmoid_row(x, out, n);
  }
#endif
};

// gelu's exact form as its CPU kernels compute it: x · Φ(x), Φ from
// vector_math.h (the tanh form is GeluTanhMath's).
struct GeluErfF {
  template <typename T> static T forward(T x) { return x * normal_cdf(x); }
};

}  // namespace kiln::cpu
