// The forward function the CPU kernels of the unary family run (unary.cc,
// and the fused elementwise kernel, which must compute what they compute):
// the Math struct's, except where libm's call would keep the loop scalar
// (f32 tanh and sigmoid take the polynomial forms of vector_math.h; f64
// stays libm's).
#pragma once

#include "vector_math.h"
#include "kiln/dialect/unary_math.h"

namespace kiln::cpu {

template <typename Math>
struct KernelMath : Math {};
template <>
struct KernelMath<TanhMath> : TanhMath {
  template <typename T> static T forward(T x) { return fast_tanh(x); }
};
template <>
struct KernelMath<SigmoidMath> : SigmoidMath {
  template <typename T> static T forward(T x) { return T(1) / (T(1) + fast_exp(-x)); }
};

}  // namespace kiln::cpu
