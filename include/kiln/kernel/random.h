// Deterministic random numbers for kiln's random kernels (uniform_random,
// gaussian_random, dropout). A counter-based generator: element i of an op's
// output is a pure function of (key, i) — SplitMix64's finaliser applied to
// key + (i + 1) * golden gamma — so results do not depend on threading or
// chunking, and a CUDA kernel can reproduce them exactly.
//
// The key of one kernel run comes from the op's `seed` attribute:
//   seed != 0: key = mix(seed). Every run of the op draws the same numbers
//              (Paddle's fix_seed): for initializers, and reproducible tests.
//   seed == 0: key = the next key of a process-wide generator (a seed and an
//              atomic counter). Each run draws new numbers; the sequence is
//              reproducible because the executor runs Random ops in program
//              order. The generator starts from kDefaultRandomSeed and
//              set_random_seed() resets it (like paddle.seed / torch.manual_seed).
//
// The element functions are __host__ __device__ (nvcc-safe) and use only
// correctly rounded operations (kiln/support/portable_math.h: no libm log /
// sin / cos, no fused multiply-add), so the CPU and CUDA kernels draw
// bit-identical numbers.
#pragma once

#include <cmath>
#include <cstdint>

#include "kiln/support/host_device.h"
#include "kiln/support/portable_math.h"

namespace kiln {

inline constexpr std::uint64_t kDefaultRandomSeed = 0x6b696c6e5eedULL;

// Resets the process-wide generator: the keys drawn after it depend only on `seed`.
void set_random_seed(std::uint64_t seed);
// The key a random kernel uses for one run, from its op's seed attribute (see above).
std::uint64_t random_key(std::int64_t seed_attr);

namespace random_detail {
inline constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
KILN_HOST_DEVICE inline constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace random_detail

// 64 random bits for element i under `key`.
KILN_HOST_DEVICE inline constexpr std::uint64_t random_bits(std::uint64_t key, std::uint64_t i) {
  return random_detail::mix64(key + (i + 1) * random_detail::kGamma);
}
// Uniform in [0, 1) with 53 random bits.
KILN_HOST_DEVICE inline double random_uniform01(std::uint64_t key, std::uint64_t i) {
  return static_cast<double>(random_bits(key, i) >> 11) * 0x1.0p-53;
}
// Two standard normals from one Box-Muller transform over elements
// (2k, 2k + 1): z0 (cosine half) is element 2k, z1 (sine half) element 2k + 1.
KILN_HOST_DEVICE inline void random_normal_pair(std::uint64_t key, std::uint64_t k, double& z0,
                                                double& z1) {
  double u1 = static_cast<double>((random_bits(key, 2 * k) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  double u2 = static_cast<double>(random_bits(key, 2 * k + 1) >> 11) * 0x1.0p-53;    // [0, 1)
  const double r = std::sqrt(-2.0 * portable_log(u1));
  double s, c;
  portable_sincos_2pi(u2, s, c);
  z0 = mul_rn(r, c);
  z1 = mul_rn(r, s);
}
// Standard normal for element i (one half of pair i / 2).
KILN_HOST_DEVICE inline double random_normal(std::uint64_t key, std::uint64_t i) {
  double z0, z1;
  random_normal_pair(key, i / 2, z0, z1);
  return (i & 1) ? z1 : z0;
}

// lo + span · u, the value uniform_random draws before rounding to its dtype.
KILN_HOST_DEVICE inline double uniform_value(double lo, double span, double u) {
  return lo + mul_rn(span, u);
}
// mean + std · z, the value gaussian_random draws before rounding to its dtype.
KILN_HOST_DEVICE inline double gaussian_value(double mean, double std, double z) {
  return mean + mul_rn(std, z);
}

}  // namespace kiln
