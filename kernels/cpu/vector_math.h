// Elementwise math for f32 kernel loops that the compiler vectorizes: exp,
// tanh and erfc as straight-line polynomials (no libm calls, no branches), so a
// loop over them compiles to SIMD code (clamps are min / max and choices
// selects between computed values). The f64 overloads are libm's (the
// gradient checks run in f64 and want its full precision).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "intra_op.h"

namespace kiln::cpu {

// Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, a degree-7 polynomial in r
// times 2^n built from its bits; within 2 ulp of std::exp. Inputs are
// clamped to [-87, 88], so it never overflows; below -87 it gives 0 (exp(-87)
// is ~1.6e-38, the smallest normal float is 1.2e-38): never a denormal, and
// exp(-inf) is 0 as it must be — a softmax over a causal mask's -inf would
// otherwise fill its output with denormals, which slow every multiply that
// reads them by orders of magnitude.
inline float fast_exp(float x) {
  const float below = x < -87.0f ? 0.0f : 1.0f;  // a select: the loop stays vectorized
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
  return below * p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}
inline double fast_exp(double x) { return std::exp(x); }

// tanh in f32 without libm: Cephes' tanhf — an odd polynomial below |x| =
// 0.625, 1 - 2 / (exp(2|x|) + 1) with x's sign above; both are computed and
// one selected, so loops over it vectorize. Within a few ulp of std::tanh.
inline float fast_tanh(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float big = 1.0f - 2.0f / (fast_exp(2.0f * std::fabs(x)) + 1.0f);
  return std::fabs(x) < 0.625f ? small : std::copysign(big, x);
}
inline double fast_tanh(double x) { return std::tanh(x); }

// Φ(x), the standard normal CDF, and φ(x), its density, in f32 from one
// exp: with z = |x| / √2, erfc(z) = P(t) · exp(-z²), t = 1 / (1 + p z) and P
// the degree-5 polynomial of Abramowitz & Stegun 7.1.26 (absolute error below
// 1.5e-7), and φ(x) = exp(-z²) / √(2π). Both sides of x < 0 are computed
// and one selected: no branch, so loops vectorize (with -ftrapping-math GCC
// does not speculate a float op into a branch).
struct NormalCdfPdf {
  float cdf, pdf;
};
inline NormalCdfPdf normal_cdf_pdf(float x) {
  const float z = std::fabs(x) * 0.70710678118654752440f;
  const float t = 1.0f / (1.0f + 0.3275911f * z);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float g = fast_exp(-z * z);
  const float tail = 0.5f * p * t * g;  // Φ(-|x|) = erfc(z) / 2
  return {x < 0 ? tail : 1.0f - tail, 0.39894228040143267794f * g};
}
inline float normal_cdf(float x) { return normal_cdf_pdf(x).cdf; }
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

// Elementwise loops compiled three times — for AVX-512 (16 f32 lanes; BW
// too, so that loops over bf16 / f16 bits use 512-bit vectors), for
// AVX2 with FMA (8 lanes, fused multiply-adds) and for the x86-64 baseline
// the library is built for (SSE2, 4 lanes) — and run in the widest form the
// CPU has (checked once). Anywhere else, the one loop.
#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_HAS_SIMD_CLONES 1
#define KILN_TARGET_AVX2 __attribute__((target("avx2,fma")))
// 512-bit vectors wanted explicitly: both compilers otherwise prefer 256.
#ifdef __clang__
#define KILN_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"), min_vector_width(512)))
#else
#define KILN_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,prefer-vector-width=512")))
#endif
enum class SimdLevel { Baseline, Avx2, Avx512 };
// The widest level the CPU has, or a narrower one named by the environment
// variable KILN_CPU_SIMD (baseline, avx2), so that tests can run the
// narrower code paths on a wide machine.
// The detection, once, out of line: cpu_simd_level() inlines to a guard
// check and a load (a dispatching kernel asks on every call).
[[gnu::noinline, gnu::cold]] inline SimdLevel detect_simd_level() {
  SimdLevel best = SimdLevel::Baseline;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw"))
    best = SimdLevel::Avx512;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    best = SimdLevel::Avx2;
  const char* cap = std::getenv("KILN_CPU_SIMD");
  if (cap != nullptr && std::strcmp(cap, "baseline") == 0) return SimdLevel::Baseline;
  if (cap != nullptr && std::strcmp(cap, "avx2") == 0 && best == SimdLevel::Avx512) return SimdLevel::Avx2;
  return best;
}
[[gnu::always_inline]] inline SimdLevel cpu_simd_level() {
  static const SimdLevel level = detect_simd_level();
  return level;
}
#endif

// simd_dispatch<Body>(args...): runs Body::run(args...) compiled for the
// widest of those levels the CPU has. Body::run must be KILN_SIMD_INLINE so
// that it is compiled inside each level's wrapper (whose loops then
// vectorize for that level), not called as one baseline copy. A Body whose
// AVX-512 form is written by hand (intrinsics, KILN_TARGET_AVX512) gives it
// as Body::run_avx512(args...), which the AVX-512 level then calls instead;
// likewise Body::run_avx2 (KILN_TARGET_AVX2) for the AVX2 level.
#define KILN_SIMD_INLINE [[gnu::always_inline]] inline
namespace simd_detail {
template <typename Body, typename... Args>
void simd_base(Args... args) {
  Body::run(args...);
}
#ifdef KILN_HAS_SIMD_CLONES
template <typename Body, typename... Args>
KILN_TARGET_AVX2 void simd_avx2(Args... args) {
  if constexpr (requires { Body::run_avx2(args...); })
    Body::run_avx2(args...);
  else
    Body::run(args...);
}
template <typename Body, typename... Args>
KILN_TARGET_AVX512 void simd_avx512(Args... args) {
  if constexpr (requires { Body::run_avx512(args...); })
    Body::run_avx512(args...);
  else
    Body::run(args...);
}
#endif
}  // namespace simd_detail

template <typename Body, typename... Args>
void simd_dispatch(Args... args) {
#ifdef KILN_HAS_SIMD_CLONES
  switch (cpu_simd_level()) {
    case SimdLevel::Avx512: return simd_detail::simd_avx512<Body>(args...);
    case SimdLevel::Avx2: return simd_detail::simd_avx2<Body>(args...);
    case SimdLevel::Baseline: break;
  }
#endif
  simd_detail::simd_base<Body>(args...);
}

namespace simd_detail {
template <typename F, typename T>
struct MapLoop {
  KILN_SIMD_INLINE static void run(const T* __restrict x, T* __restrict out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = F::forward(x[i]);
  }
  // F's own AVX-512 row, where it has one (F::map_avx512).
  static void run_avx512(const T* x, T* out, std::int64_t n)
    requires requires { F::map_avx512(x, out, n); }
  {
    F::map_avx512(x, out, n);
  }
};
template <typename F, typename T>
struct MapInPlaceLoop {
  KILN_SIMD_INLINE static void run(T* __restrict x, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = F::forward(x[i]);
  }
  static void run_avx512(T* x, std::int64_t n)
    requires requires { F::map_avx512(x, x, n); }
  {
    F::map_avx512(x, x, n);
  }
};
template <typename F, typename T>
struct Map2Loop {
  KILN_SIMD_INLINE static void run(const T* __restrict x, const T* __restrict y,
                                   T* __restrict out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = F::backward(x[i], y[i]);
  }
};
}  // namespace simd_detail

// out[i] = F::forward(x[i]); x and out do not overlap. Split across the
// kernel's threads (intra_op.h), as the two-operand form below.
template <typename F, typename T>
void map_elementwise(const T* x, T* out, std::int64_t n) {
  parallel_for(n, items_per_range(2 * sizeof(T)), [=](std::int64_t b, std::int64_t e) {
    simd_dispatch<simd_detail::MapLoop<F, T>>(x + b, out + b, e - b);
  });
}
// x[i] = F::forward(x[i]), the same bits as map_elementwise's.
template <typename F, typename T>
void map_elementwise_in_place(T* x, std::int64_t n) {
  parallel_for(n, items_per_range(2 * sizeof(T)), [=](std::int64_t b, std::int64_t e) {
    simd_dispatch<simd_detail::MapInPlaceLoop<F, T>>(x + b, e - b);
  });
}
// out[i] = F::backward(x[i], y[i]); out overlaps neither.
template <typename F, typename T>
void map_elementwise(const T* x, const T* y, T* out, std::int64_t n) {
  parallel_for(n, items_per_range(3 * sizeof(T)), [=](std::int64_t b, std::int64_t e) {
    simd_dispatch<simd_detail::Map2Loop<F, T>>(x + b, y + b, out + b, e - b);
  });
}

}  // namespace kiln::cpu
