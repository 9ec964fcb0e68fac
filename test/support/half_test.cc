// The 16-bit floats: f16 and bf16 to and from float.
#include "kiln/support/half.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "catch.hpp"

using kiln::bfloat16_to_float;
using kiln::float_to_bfloat16;
using kiln::float_to_half;
using kiln::half_to_float;

TEST_CASE("f16 holds its exact values, rounds the rest to nearest and overflows to infinity",
          "[support][half]") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);  // the largest f16
  CHECK(float_to_half(0.1f) == 0x2e66);
  CHECK(float_to_half(1e6f) == 0x7c00);  // +inf
  CHECK(float_to_half(5.96046448e-08f) == 0x0001);  // the smallest subnormal
  // 1 + 2^-11 lies halfway between 1 and the next f16: ties go to even (1).
  CHECK(float_to_half(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(float_to_half(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
  CHECK(half_to_float(0x3c00) == 1.0f);
  CHECK(half_to_float(0x7bff) == 65504.0f);
  CHECK(half_to_float(0x0001) == 0x1p-24f);
  CHECK(std::isinf(half_to_float(0xfc00)));
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t bits = 0; bits < 0x7c00; bits += 7) {
    INFO(bits);
    CHECK(float_to_half(half_to_float(static_cast<std::uint16_t>(bits))) == bits);
  }
}

TEST_CASE("bf16 keeps f32's top half, rounding to nearest even and keeping NaN a NaN",
          "[support][half]") {
  CHECK(float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(bfloat16_to_float(0x3f80) == 1.0f);
  CHECK(bfloat16_to_float(0xc040) == -3.0f);
  // 0x3f808000 is halfway between 0x3f80 and 0x3f81: to even, 0x3f80;
  // 0x3f818000 halfway between 0x3f81 and 0x3f82: to even, 0x3f82.
  CHECK(float_to_bfloat16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);
  CHECK(float_to_bfloat16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);
  CHECK(float_to_bfloat16(std::bit_cast<float>(0x3f808001u)) == 0x3f81);
  CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to +inf
  const std::uint16_t nan = float_to_bfloat16(std::bit_cast<float>(0x7f800001u));
  CHECK(std::isnan(bfloat16_to_float(nan)));
  CHECK(std::isinf(bfloat16_to_float(float_to_bfloat16(std::numeric_limits<float>::infinity()))));
}
