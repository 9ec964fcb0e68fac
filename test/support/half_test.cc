// The 16-bit floats: f16 and bf16 to and from float.
#include "kiln/support/half.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

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

#if defined(__GNUC__) && !defined(__clang__) && defined(__FLT16_MAX__)
// GCC's _Float16 is IEEE binary16 with round-to-nearest-even conversions:
// the software conversions must agree with it bit for bit.
TEST_CASE("f16 conversions agree with the compiler's _Float16 on every f16 and on floats and "
          "doubles across the range, ties and subnormals included",
          "[support][half]") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float want = static_cast<float>(std::bit_cast<_Float16>(bits));
    const float got = kiln::half_to_float(bits);
    INFO("f16 bits " << b);
    if (std::isnan(want)) CHECK(std::isnan(got));
    else REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any_float;
  auto check_float = [](float v) {
    INFO("float " << v);
    const auto want = std::bit_cast<std::uint16_t>(static_cast<_Float16>(v));
    const std::uint16_t got = kiln::float_to_half(v);
    if (std::isnan(v)) CHECK((got & 0x7c00u) == 0x7c00u);
    else REQUIRE(got == want);
  };
  for (int i = 0; i < 200000; ++i) check_float(std::bit_cast<float>(any_float(rng)));
  // Every f16 and the midpoints and near-midpoints beside it (ties to even).
  for (std::uint32_t b = 0; b < 0x7c00; ++b) {
    const float f = kiln::half_to_float(static_cast<std::uint16_t>(b));
    const float next = kiln::half_to_float(static_cast<std::uint16_t>(b + 1));
    const float mid = f + (next - f) / 2;
    for (float v : {f, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      check_float(v);
      check_float(-v);
    }
  }
  for (double d : {65504.0, 65519.99, 65520.0, 1e6, 5.960464477539063e-08, 2.98e-08, 2.9802322387695312e-08,
                   6.103515625e-05, 1.0 / 3.0}) {
    INFO("double " << d);
    CHECK(kiln::double_to_half(d) == std::bit_cast<std::uint16_t>(static_cast<_Float16>(d)));
  }
}
#endif
