// Helpers for the 16-bit float kernel tests: conversions by dtype and
// random tensors whose values bf16 / f16 hold exactly.
#pragma once

#include <cstdint>
#include <random>

#include "kiln/runtime/tensor.h"
#include "kiln/support/half.h"

namespace kiln_test {

inline std::uint16_t to_half(float v, kiln::DataType dt) {
  return dt == kiln::DataType::Float16 ? kiln::float_to_half(v) : kiln::float_to_bfloat16(v);
}
inline float from_half(std::uint16_t v, kiln::DataType dt) {
  return dt == kiln::DataType::Float16 ? kiln::half_to_float(v) : kiln::bfloat16_to_float(v);
}

// Values drawn in [-2, 2) and rounded to `dt` (so widening them is exact).
inline kiln::Tensor random_half(const kiln::Dims& dims, kiln::DataType dt, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  kiln::Tensor t = kiln::Tensor::empty(dims, dt);
  auto* p = static_cast<std::uint16_t*>(t.raw_data());
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = to_half(u(rng), dt);
  return t;
}

}  // namespace kiln_test
