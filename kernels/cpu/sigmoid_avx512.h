// f32 sigmoid and SiLU over rows, written in AVX-512 intrinsics: the form
// the AVX-512 level of simd_dispatch runs for kiln.sigmoid, the SiLU of
// kiln.fused_conv2d and the sigmoid epilogues (vector_math.h's run_avx512).
// Auto-vectorized, the same polynomial took ~0.30 ns an element here (the
// clamps became compare-and-blend chains, 2^n a convert, add and shift);
// with roundscale and scalef, ~0.16 ns. Same bits at every position of a
// row (the tail is a masked vector, not a scalar loop), so at any thread
// count. Its lane masks (kAll, tail_lanes) serve the other hand-written
// AVX-512 kernels too (pool.cc's max pool).
#pragma once

#include <cstdint>

#include "vector_math.h"

#ifdef KILN_HAS_SIMD_CLONES
#include <immintrin.h>

namespace kiln::cpu::avx512 {

// The intrinsics below are the masked forms with every lane set: GCC 12
// warns of an uninitialized value inside the unmasked ones' definitions.
constexpr __mmask16 kAll = 0xFFFF;

// 1 / (1 + exp(-x)) in 16 lanes: exp by Cephes' polynomial (vector_math.h's
// fast_exp) on -x = n ln2 + r, times 2^n by scalef. -x is clamped to [-87,
// 87] first: sigmoid(-87) ~ 1.6e-38 is the smallest result, never a
// denormal (which would slow the multiply after it), and above 87 the
// result is 1. NaN stays NaN (max and min return their second operand for
// a NaN).
KILN_TARGET_AVX512 inline __m512 sigmoid16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(87.0f);
  const __m512 neg = _mm512_sub_ps(_mm512_setzero_ps(), x);
  const __m512 t = _mm512_mask_min_ps(hi, kAll, hi, _mm512_mask_max_ps(lo, kAll, lo, neg));
  const __m512 n = _mm512_mask_roundscale_ps(t, kAll, _mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), t);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, _mm512_mask_scalef_ps(p, kAll, p, n)));
}

// The last n % 16 lanes (fewer than 16) of a row: a masked vector, so that
// they get the bits the full vectors would give them. Masked loads and
// stores are slow on some CPUs (AMD's), so only the tail has them.
inline __mmask16 tail_lanes(std::int64_t left) { return __mmask16((1u << left) - 1); }

// out[i] = sigmoid(x[i]); out may be x.
KILN_TARGET_AVX512 inline void sigmoid_row(const float* x, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, sigmoid16(_mm512_loadu_ps(x + i)));
  if (i == n) return;
  const __mmask16 m = tail_lanes(n - i);
  _mm512_mask_storeu_ps(out + i, m, sigmoid16(_mm512_maskz_loadu_ps(m, x + i)));
}

// row[i] = v · sigmoid(v), v = row[i] + b.
KILN_TARGET_AVX512 inline __m512 silu16(__m512 x, __m512 b) {
  const __m512 v = _mm512_add_ps(x, b);
  return _mm512_mul_ps(v, sigmoid16(v));
}
KILN_TARGET_AVX512 inline void silu_row(float* row, float b, std::int64_t n) {
  const __m512 vb = _mm512_set1_ps(b);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(row + i, silu16(_mm512_loadu_ps(row + i), vb));
  if (i == n) return;
  const __mmask16 m = tail_lanes(n - i);
  _mm512_mask_storeu_ps(row + i, m, silu16(_mm512_maskz_loadu_ps(m, row + i), vb));
}

}  // namespace kiln::cpu::avx512
#endif
