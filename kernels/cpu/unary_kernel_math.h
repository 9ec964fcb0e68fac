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
// vector_math.h.
struct GeluErfF {
  template <typename T> static T forward(T x) { return x * normal_cdf(x); }
};

// gelu's tanh form (GeluTanhMath) and its gradient as the CPU kernels
// compute them: f32's tanh the polynomial of vector_math.h (libm's call
// kept the loop scalar: 16 ns an element, GPT-2 small's 12 GELUs a third of
// its MLP's time), f64's libm's.
struct GeluTanhF {
  template <typename T> static T forward(T x) {
    const T k = T(0.79788456080286535588);
    return T(0.5) * x * (T(1) + fast_tanh(k * (x + T(0.044715) * x * x * x)));
  }
};
struct GeluTanhG {
  template <typename T> static T backward(T x, T d) {
    const T k = T(0.79788456080286535588), c = T(0.044715);
    const T t = fast_tanh(k * (x + c * x * x * x));
    return d * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
  }
};

}  // namespace kiln::cpu
