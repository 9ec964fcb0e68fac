// The per-element math of the optimizer update ops (kiln/dialect/optimizer_ops.h),
// written once for the CPU and CUDA kernels (__host__ __device__, nvcc-safe).
// Every product goes through mul_rn, so nvcc fuses nothing into an FMA and
// both devices compute the same bits (sqrt and / are correctly rounded on
// both).
#pragma once

#include <cmath>

#include "kiln/support/host_device.h"
#include "kiln/support/portable_math.h"

namespace kiln {

// sgd_: param - lr · grad
template <typename T>
KILN_HOST_DEVICE inline T sgd_step(T p, T g, T lr) {
  return p - mul_rn(lr, g);
}

// momentum_: v = mu · v + g; p -= lr · (g + mu · v) (nesterov) or lr · v.
template <typename T>
KILN_HOST_DEVICE inline void momentum_step(T& p, T& v, T g, T lr, T mu, bool nesterov) {
  v = mul_rn(mu, v) + g;
  p = p - (nesterov ? mul_rn(lr, g + mul_rn(mu, v)) : mul_rn(lr, v));
}

// The bias-corrected step size and epsilon of adam_ (Paddle's):
// lr_t = lr · √(1 - β₂ᵗ) / (1 - β₁ᵗ), eps_t = ε · √(1 - β₂ᵗ).
template <typename T>
struct AdamStep {
  T beta1, beta2, lr_t, eps_t;
};
template <typename T>
KILN_HOST_DEVICE inline AdamStep<T> adam_step_of(T lr, T beta1_pow, T beta2_pow, T beta1, T beta2,
                                                 T eps) {
  const T root = std::sqrt(T(1) - beta2_pow);
  return AdamStep<T>{beta1, beta2, mul_rn(lr, root) / (T(1) - beta1_pow), mul_rn(eps, root)};
}

// One element of adam_: m1 = β₁ m1 + (1 - β₁) g; m2 = β₂ m2 + (1 - β₂) g²;
// p -= lr_t · m1 / (√m2 + eps_t).
template <typename T>
KILN_HOST_DEVICE inline void adam_element(T& p, T& m1, T& m2, T g, const AdamStep<T>& s) {
  m1 = mul_rn(s.beta1, m1) + mul_rn(T(1) - s.beta1, g);
  m2 = mul_rn(s.beta2, m2) + mul_rn(mul_rn(T(1) - s.beta2, g), g);
  p = p - mul_rn(s.lr_t, m1 / (std::sqrt(m2) + s.eps_t));
}

}  // namespace kiln
