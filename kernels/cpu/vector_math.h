// Elementwise math for f32 kernel loops that the compiler vectorizes: exp
// and erfc as straight-line polynomials (no libm calls, no branches), so a
// loop over them compiles to SIMD code (clamps are min / max and choices
// selects between computed values). The f64 overloads are libm's (the
// gradient checks run in f64 and want its full precision).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::cpu {

// Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, a degree-7 polynomial in r
// times 2^n built from its bits; within 2 ulp of std::exp. Inputs are
// clamped to [-87, 88], so it never overflows; below -87 it gives exp(-87) ~
// 1.6e-38 instead of a denormal or 0.
inline float fast_exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;            // x - n ln 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}
inline double fast_exp(double x) { return std::exp(x); }

// erfc(z) for z >= 0: t · exp(-z² + P(t)) with t = 1 / (1 + z / 2) and P the
// degree-9 Chebyshev fit of Numerical Recipes (erfcc); relative error below
// 1.2e-7 for every z >= 0.
inline float fast_erfc_nonneg(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * fast_exp(-z * z + p);
}

// Φ(x), the standard normal CDF: 0.5 · erfc(-x / √2).
// Both sides are computed and one selected: no branch, so loops vectorize
// (with -ftrapping-math GCC does not speculate a float op into a branch).
inline float normal_cdf(float x) {
  const float e = 0.5f * fast_erfc_nonneg(std::fabs(x) * 0.70710678118654752440f);
  const float upper = 1.0f - e;
  return x < 0 ? e : upper;
}
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

// Elementwise loops compiled twice — for AVX2 with FMA (8 f32 lanes, fused
// multiply-adds) and for the x86-64 baseline the library is built for (SSE2,
// 4 lanes) — and run in the first form when the CPU has those features
// (checked once). Anywhere else, the one loop.
#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_HAS_AVX2_CLONES 1
inline bool cpu_has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

namespace detail {
template <typename F, typename T>
void map_base(const T* __restrict x, T* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = F::forward(x[i]);
}
template <typename F, typename T>
void map2_base(const T* __restrict x, const T* __restrict y, T* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = F::backward(x[i], y[i]);
}
#ifdef KILN_HAS_AVX2_CLONES
template <typename F, typename T>
__attribute__((target("avx2,fma"))) void map_avx2(const T* __restrict x, T* __restrict out,
                                                  std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = F::forward(x[i]);
}
template <typename F, typename T>
__attribute__((target("avx2,fma"))) void map2_avx2(const T* __restrict x, const T* __restrict y,
                                                   T* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = F::backward(x[i], y[i]);
}
#endif
}  // namespace detail

// out[i] = F::forward(x[i]); x and out do not overlap.
template <typename F, typename T>
void map_elementwise(const T* x, T* out, std::int64_t n) {
#ifdef KILN_HAS_AVX2_CLONES
  if (cpu_has_avx2_fma()) return detail::map_avx2<F, T>(x, out, n);
#endif
  detail::map_base<F, T>(x, out, n);
}
// out[i] = F::backward(x[i], y[i]); out overlaps neither.
template <typename F, typename T>
void map_elementwise(const T* x, const T* y, T* out, std::int64_t n) {
#ifdef KILN_HAS_AVX2_CLONES
  if (cpu_has_avx2_fma()) return detail::map2_avx2<F, T>(x, y, out, n);
#endif
  detail::map2_base<F, T>(x, y, out, n);
}

}  // namespace kiln::cpu
