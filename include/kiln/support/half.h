// The 16-bit floats kiln stores (f16: IEEE binary16; bf16: the top half of
// an f32) to and from float. f16 goes through the compiler's _Float16 (F16C
// instructions where the target has them); bf16 rounds to nearest, ties to
// even, as PyTorch and ONNX Runtime do, and keeps a NaN a NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace kiln {

inline float half_to_float(std::uint16_t bits) {
  return static_cast<float>(std::bit_cast<_Float16>(bits));
}

inline std::uint16_t float_to_half(float v) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(v));
}

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
