// The 16-bit floats kiln stores (f16: IEEE binary16; bf16: the top half of
// an f32) to and from float. Both round to nearest, ties to even, as
// PyTorch and ONNX Runtime do, and keep a NaN a NaN. f16 is converted in
// software, not through _Float16, which clang before 15 lacks on x86-64;
// double_to_half rounds a double once (f64 → f16 without a float between).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln {

// Exact: every f16 is a float (the NaN payload is kept).
inline float half_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
  const float sub = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal, exact
  return sign ? -sub : sub;
}

inline std::uint16_t double_to_half(double v) {
  const std::uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  const double x = std::fabs(v);
  if (std::isnan(v)) return sign | 0x7e00u;
  if (x >= 65520.0) return sign | 0x7c00u;  // rounds to infinity (65520 is a tie, to even)
  if (x == 0) return sign;
  // The binade's quantum is 2^(e-10); subnormals share the smallest normal's.
  const int e = std::max(std::ilogb(x), -14);
  const double m = std::rint(std::ldexp(x, 10 - e));  // exact scaling, then ties to even
  if (e == -14 && m < 1024) return sign | static_cast<std::uint16_t>(m);  // subnormal
  const int exp = m == 2048 ? e + 1 : e;  // rounded up into the next binade
  const int man = m == 2048 ? 0 : static_cast<int>(m) - 1024;
  return sign | static_cast<std::uint16_t>(((exp + 15) << 10) | man);
}

// A float is exact as a double, so this rounds once too.
inline std::uint16_t float_to_half(float v) { return double_to_half(v); }

inline float bfloat16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

inline std::uint16_t float_to_bfloat16(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

}  // namespace kiln
