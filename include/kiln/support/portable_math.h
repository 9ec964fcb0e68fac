// Floating-point functions that give the same bits on the host and on a
// CUDA device: only +, -, ·, / and sqrt (correctly rounded on both), each
// product through mul_rn so that no compiler fuses it with a neighbouring
// add into an FMA (nvcc contracts by default; the host build targets
// x86-64 without FMA, where GCC does not). portable_log and
// portable_sincos_2pi replace libm's log / sin / cos, whose last bits
// differ between glibc and CUDA, in the random numbers of kiln/kernel/random.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "kiln/support/host_device.h"

namespace kiln {

// a · b rounded once, never fused with an add.
KILN_HOST_DEVICE inline double mul_rn(double a, double b);
KILN_HOST_DEVICE inline float mul_rn(float a, float b);
// ln x for a positive normal x, within a few ulp of the exact value.
KILN_HOST_DEVICE inline double portable_log(double x);
// sin(2πu) and cos(2πu) for u in [0, 1), within a few ulp of the exact values.
KILN_HOST_DEVICE inline void portable_sincos_2pi(double u, double& s, double& c);

KILN_HOST_DEVICE inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

KILN_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// x = m · 2^e with m in [√½, √2); ln m = 2 atanh(s) = 2 (s + s³/3 + s⁵/5 + …)
// with s = (m - 1) / (m + 1), |s| < 0.172 (eleven terms reach 2^-60);
// ln x = e · ln 2 (split in two, the high part exact) + ln m.
KILN_HOST_DEVICE inline double portable_log(double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;  // m in [1, 2)
  double m;
  std::memcpy(&m, &bits, sizeof m);
  if (m > 1.4142135623730951) {
    m = mul_rn(m, 0.5);
    ++e;
  }
  const double s = (m - 1.0) / (m + 1.0);  // m - 1 is exact (Sterbenz)
  const double z = mul_rn(s, s);
  double p = 1.0 / 23;
  p = mul_rn(p, z) + 1.0 / 21;
  p = mul_rn(p, z) + 1.0 / 19;
  p = mul_rn(p, z) + 1.0 / 17;
  p = mul_rn(p, z) + 1.0 / 15;
  p = mul_rn(p, z) + 1.0 / 13;
  p = mul_rn(p, z) + 1.0 / 11;
  p = mul_rn(p, z) + 1.0 / 9;
  p = mul_rn(p, z) + 1.0 / 7;
  p = mul_rn(p, z) + 1.0 / 5;
  p = mul_rn(p, z) + 1.0 / 3;
  const double ln_m = mul_rn(2.0, s) + mul_rn(mul_rn(2.0, s), mul_rn(z, p));
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3fe62e42fee00000
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return mul_rn(de, kLn2Hi) + (mul_rn(de, kLn2Lo) + ln_m);
}

// 2πu = q · π/2 + a with q = round(4u) and |a| ≤ π/4 (4u - q is exact); sin a
// and cos a by their Taylor series to the 17th / 18th power, then the
// quadrant's symmetry.
KILN_HOST_DEVICE inline void portable_sincos_2pi(double u, double& s, double& c) {
  const double u4 = mul_rn(u, 4.0);                               // exact
  double q = static_cast<double>(static_cast<std::int64_t>(u4));  // floor: u4 >= 0
  double f = u4 - q;                                              // exact, in [0, 1)
  if (f > 0.5) {
    f = f - 1.0;  // exact
    q = q + 1.0;
  }
  constexpr double kHalfPi = 1.57079632679489661923;
  const double a = mul_rn(f, kHalfPi);
  const double z = mul_rn(a, a);
  double ps = 1.0 / 355687428096000.0;  // 1/17!  (sin: a · Σ (-1)^k z^k / (2k+1)!)
  ps = mul_rn(ps, -z) + 1.0 / 1307674368000.0;
  ps = mul_rn(ps, -z) + 1.0 / 6227020800.0;
  ps = mul_rn(ps, -z) + 1.0 / 39916800.0;
  ps = mul_rn(ps, -z) + 1.0 / 362880.0;
  ps = mul_rn(ps, -z) + 1.0 / 5040.0;
  ps = mul_rn(ps, -z) + 1.0 / 120.0;
  ps = mul_rn(ps, -z) + 1.0 / 6.0;
  const double sin_a = a - mul_rn(mul_rn(a, z), ps);
  double pc = 1.0 / 6402373705728000.0;  // 1/18!  (cos: Σ (-1)^k z^k / (2k)!)
  pc = mul_rn(pc, -z) + 1.0 / 20922789888000.0;
  pc = mul_rn(pc, -z) + 1.0 / 87178291200.0;
  pc = mul_rn(pc, -z) + 1.0 / 479001600.0;
  pc = mul_rn(pc, -z) + 1.0 / 3628800.0;
  pc = mul_rn(pc, -z) + 1.0 / 40320.0;
  pc = mul_rn(pc, -z) + 1.0 / 720.0;
  pc = mul_rn(pc, -z) + 1.0 / 24.0;
  pc = mul_rn(pc, -z) + 0.5;
  const double cos_a = 1.0 - mul_rn(z, pc);
  switch (static_cast<int>(q) & 3) {
    case 0:
      s = sin_a;
      c = cos_a;
      break;
    case 1:
      s = cos_a;
      c = -sin_a;
      break;
    case 2:
      s = -sin_a;
      c = -cos_a;
      break;
    default:
      s = -cos_a;
      c = sin_a;
      break;
  }
}

}  // namespace kiln
