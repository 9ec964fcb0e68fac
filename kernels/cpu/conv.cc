// CPU kernels of kiln.conv2d, kiln.conv2d_transpose and their gradients
// (NCHW), all built from three cores over one conv geometry:
//   forward:      out_g = w_g · im2col(x_g)           (one GEMM per image and group)
//   input grad:   dx_g  = col2im(w_gᵀ · dout_g)
//   weight grad:  dw_g  = Σ_images dout_g · im2col(x_g)ᵀ
// conv2d_transpose's forward is conv2d's input grad, its input grad is
// conv2d's forward and its weight grad is conv2d's weight grad with the
// roles of input and output swapped. The column buffer is a per-thread
// scratch; a 1x1 kernel with stride 1 and no padding uses x itself.
#ifdef __x86_64__
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "column_means.h"
#include "cpu_blas.h"
#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "intra_op.h"
#include "onednn.h"
#include "pointwise_depthwise.h"
#include "unary_kernel_math.h"
#include "vector_math.h"
#include "kiln/dialect/conv_ops.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/cpu_convolution.h"
#include "kiln/kernel/half_via_f32.h"

namespace kiln::cpu {
namespace {

// dst [n, cols, rows] = src [n, rows, cols]: NHWC -> NCHW with rows = H·W
// and cols = C, NCHW -> NHWC with rows = C and cols = H·W.
template <typename T>
void swap_last_axes(const T* src, T* dst, std::int64_t n, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t i = 0; i < n; ++i, src += rows * cols, dst += rows * cols)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

template <typename T>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  cpu::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

// The range [lo, hi) of output columns whose input column ow·s + off lies
// in [0, w).
KILN_SIMD_INLINE void valid_range(std::int64_t off, std::int64_t s, std::int64_t w, std::int64_t wo,
                        std::int64_t& lo, std::int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = w - off <= 0 ? 0 : (w - off + s - 1) / s;
  lo = std::min(lo, wo);
  hi = std::clamp(hi, lo, wo);
}

// col [cg·kh·kw, ho·wo] from one image's group x [cg, h, w]; compiled for
// the CPU's widest SIMD level (vector_math.h).
template <typename T>
struct Im2col {
  KILN_SIMD_INLINE static void run(const T* x, T* col, const Conv2dGeometry* gp,
                                   std::int64_t cg) {
    const Conv2dGeometry& g = *gp;
    const std::int64_t p = g.ho * g.wo;
    for (std::int64_t c = 0; c < cg; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          T* row = col + ((c * g.kh + i) * g.kw + j) * p;
          const T* xc = x + c * g.h * g.w;
          const std::int64_t off = j * g.dw - g.pl;
          std::int64_t lo, hi;
          valid_range(off, g.sw, g.w, g.wo, lo, hi);
          for (std::int64_t oh = 0; oh < g.ho; ++oh) {
            T* __restrict r = row + oh * g.wo;
            const std::int64_t ih = oh * g.sh - g.pt + i * g.dh;
            if (ih < 0 || ih >= g.h) {
              for (std::int64_t ow = 0; ow < g.wo; ++ow) r[ow] = T(0);
              continue;
            }
            const T* __restrict xr = xc + ih * g.w;
            for (std::int64_t ow = 0; ow < lo; ++ow) r[ow] = T(0);
            if (g.sw == 1) {
              for (std::int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow + off];
            } else {
              for (std::int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * g.sw + off];
            }
            for (std::int64_t ow = hi; ow < g.wo; ++ow) r[ow] = T(0);
          }
        }
  }
};
#ifdef KILN_HAS_SIMD_CLONES
// Im2col for f32 with a column stride of 1, in AVX-512 masked loads and
// stores: each output row (wo columns, its first lo and last wo - hi zero)
// in 16-lane chunks, with no scalar edges. Rows are as short as an image
// row, so a generic vectorized loop spent most of its time in its edges.
KILN_TARGET_AVX512 void im2col_unit_stride_avx512(const float* x, float* col,
                                                  const Conv2dGeometry& g, std::int64_t cg) {
  const std::int64_t p = g.ho * g.wo;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (std::int64_t c = 0; c < cg; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        float* row = col + ((c * g.kh + i) * g.kw + j) * p;
        const float* xc = x + c * g.h * g.w;
        const std::int64_t off = j * g.dw - g.pl;
        std::int64_t lo, hi;
        valid_range(off, 1, g.w, g.wo, lo, hi);
        for (std::int64_t oh = 0; oh < g.ho; ++oh) {
          float* r = row + oh * g.wo;
          const std::int64_t ih = oh * g.sh - g.pt + i * g.dh;
          const bool inside = ih >= 0 && ih < g.h;
          // x's row shifted so that column ow reads xs[ow] (only lanes in
          // [lo, hi) are loaded, so the shift never reads outside x's row).
          const float* xs = xc + (inside ? ih : 0) * g.w + off;
          for (std::int64_t b = 0; b < g.wo; b += 16) {
            const __m512i col_ix = _mm512_add_epi32(lane, _mm512_set1_epi32(int(b)));
            const __mmask16 store = _mm512_cmplt_epi32_mask(col_ix, _mm512_set1_epi32(int(g.wo)));
            const __mmask16 load =
                inside ? __mmask16(store & _mm512_cmpge_epi32_mask(col_ix, _mm512_set1_epi32(int(lo))) &
                                   _mm512_cmplt_epi32_mask(col_ix, _mm512_set1_epi32(int(hi))))
                       : __mmask16(0);
            _mm512_mask_storeu_ps(r + b, store, _mm512_maskz_loadu_ps(load, xs + b));
          }
        }
      }
}
#endif

template <typename T>
void im2col(const T* x, T* col, const Conv2dGeometry& g, std::int64_t cg) {
#ifdef KILN_HAS_SIMD_CLONES
  if constexpr (std::is_same_v<T, float>)
    if (g.sw == 1 && cpu_simd_level() == SimdLevel::Avx512)
      return im2col_unit_stride_avx512(x, col, g, cg);
#endif
  simd_dispatch<Im2col<T>>(x, col, &g, cg);
}

// dx [cg, h, w] += col2im(col [cg·kh·kw, ho·wo]) (the caller zeroed dx).
template <typename T>
struct Col2im {
  KILN_SIMD_INLINE static void run(const T* col, T* dx, const Conv2dGeometry* gp,
                                   std::int64_t cg) {
    const Conv2dGeometry& g = *gp;
    const std::int64_t p = g.ho * g.wo;
    for (std::int64_t c = 0; c < cg; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          const T* row = col + ((c * g.kh + i) * g.kw + j) * p;
          T* xc = dx + c * g.h * g.w;
          const std::int64_t off = j * g.dw - g.pl;
          std::int64_t lo, hi;
          valid_range(off, g.sw, g.w, g.wo, lo, hi);
          for (std::int64_t oh = 0; oh < g.ho; ++oh) {
            const std::int64_t ih = oh * g.sh - g.pt + i * g.dh;
            if (ih < 0 || ih >= g.h) continue;
            const T* __restrict r = row + oh * g.wo;
            T* __restrict xr = xc + ih * g.w;
            if (g.sw == 1) {
              for (std::int64_t ow = lo; ow < hi; ++ow) xr[ow + off] += r[ow];
            } else {
              for (std::int64_t ow = lo; ow < hi; ++ow) xr[ow * g.sw + off] += r[ow];
            }
          }
        }
  }
};
#ifdef KILN_HAS_SIMD_CLONES
// Col2im for f32 with strides of 1, in AVX-512: each 16-column chunk of an x
// row gathers its kh·kw terms from col in a register (masked loads; lanes
// outside a col row read nothing) and is stored once — no read-modify-write
// of x, whose overlapping shifted stores stalled store-to-load forwarding.
KILN_TARGET_AVX512 void col2im_unit_stride_avx512(const float* col, float* dx,
                                                  const Conv2dGeometry& g, std::int64_t cg) {
  const std::int64_t p = g.ho * g.wo;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i zero = _mm512_setzero_si512(), wo = _mm512_set1_epi32(int(g.wo));
  for (std::int64_t c = 0; c < cg; ++c)
    for (std::int64_t ih = 0; ih < g.h; ++ih)
      for (std::int64_t b = 0; b < g.w; b += 16) {
        const __m512i x_ix = _mm512_add_epi32(lane, _mm512_set1_epi32(int(b)));
        const __mmask16 in_row = _mm512_cmplt_epi32_mask(x_ix, _mm512_set1_epi32(int(g.w)));
        __m512 acc = _mm512_setzero_ps();
        for (std::int64_t i = 0; i < g.kh; ++i) {
          const std::int64_t oh = ih + g.pt - i * g.dh;  // the output row reading x row ih
          if (oh < 0 || oh >= g.ho) continue;
          for (std::int64_t j = 0; j < g.kw; ++j) {
            const std::int64_t shift = g.pl - j * g.dw;  // output column = x column + shift
            const __m512i ow = _mm512_add_epi32(x_ix, _mm512_set1_epi32(int(shift)));
            const __mmask16 m = in_row & _mm512_cmpge_epi32_mask(ow, zero) &
                                _mm512_cmplt_epi32_mask(ow, wo);
            const float* r = col + ((c * g.kh + i) * g.kw + j) * p + oh * g.wo + shift + b;
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, r));
          }
        }
        _mm512_mask_storeu_ps(dx + (c * g.h + ih) * g.w + b, in_row, acc);
      }
}
#endif

// dx [cg, h, w] = col2im(col [cg·kh·kw, ho·wo]).
template <typename T>
void col2im(const T* col, T* dx, const Conv2dGeometry& g, std::int64_t cg) {
#ifdef KILN_HAS_SIMD_CLONES
  if constexpr (std::is_same_v<T, float>)
    if (g.sh == 1 && g.sw == 1 && cpu_simd_level() == SimdLevel::Avx512)
      return col2im_unit_stride_avx512(col, dx, g, cg);
#endif
  std::fill(dx, dx + cg * g.h * g.w, T(0));
  simd_dispatch<Col2im<T>>(col, dx, &g, cg);
}

inline bool direct(const Conv2dGeometry& g) {  // col == x
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 &&
         g.ho == g.h && g.wo == g.w;
}

using onednn::ConvActivation;

// row[i] = silu(row[i] + b) = v · sigmoid(v), the sigmoid the unary kernel
// computes (so the fused op matches conv, sigmoid, mul bit for bit), in
// tiles of three simple loops: written as one loop, GCC's AVX-512 code ran
// at ~5 ns an element (masked selects in a chain), as tiles at ~0.5.
template <typename T>
struct SiluRow {
  KILN_SIMD_INLINE static void run(T* __restrict row, T b, std::int64_t p) {
    constexpr std::int64_t kTile = 256;
    alignas(64) T s[kTile];
    for (std::int64_t t = 0; t < p; t += kTile) {
      const std::int64_t m = std::min(kTile, p - t);
      T* __restrict r = row + t;
      for (std::int64_t i = 0; i < m; ++i) r[i] += b;
      for (std::int64_t i = 0; i < m; ++i) s[i] = KernelMath<SigmoidMath>::forward(r[i]);
      for (std::int64_t i = 0; i < m; ++i) r[i] *= s[i];
    }
  }
#ifdef KILN_HAS_SIMD_CLONES
  static void run_avx512(float* row, float b, std::int64_t p) { avx512::silu_row(row, b, p); }
#endif
};

// x[i] = silu(x[i]) over n elements, on the kernel's threads (intra_op.h);
// every element the same bits at any thread count.
template <typename T>
void silu_in_place(T* x, std::int64_t n) {
  parallel_for(n, items_per_range(2 * sizeof(T)), [x](std::int64_t b, std::int64_t e) {
    simd_dispatch<SiluRow<T>>(x + b, T(0), e - b);
  });
}

// block [channels, p] += bias[first + c] per channel, then `act`: one pass
// over a block the GEMM has just written. relu and relu6 give 0 for a NaN,
// as kiln.relu and oneDNN's post-ops (kiln.clip keeps it).
template <typename T>
void bias_activation(T* __restrict block, const T* __restrict bias, std::int64_t first,
                     std::int64_t channels, std::int64_t p, ConvActivation act) {
  for (std::int64_t c = 0; c < channels; ++c) {
    T* __restrict row = block + c * p;
    const T b = bias ? bias[first + c] : T(0);
    if (act == ConvActivation::Silu)
      simd_dispatch<SiluRow<T>>(row, b, p);
    else if (act == ConvActivation::Relu6)
      for (std::int64_t i = 0; i < p; ++i) row[i] = std::min(ReluMath::forward(row[i] + b), T(6));
    else if (act == ConvActivation::Relu)
      for (std::int64_t i = 0; i < p; ++i) row[i] = ReluMath::forward(row[i] + b);
    else
      for (std::int64_t i = 0; i < p; ++i) row[i] += b;
  }
}

#ifdef KILN_HAS_SIMD_CLONES
// Direct convolution for few output channels (stride 1, no dilation, one
// group, output rows of at most 32): each output row of all O channels is
// held in 2·O AVX-512 accumulators, and every load of an input row segment
// feeds O fused multiply-adds. im2col + GEMM does worse there: a GEMM with
// M = O < 16 fills OpenBLAS's 16-row tile poorly, and the column buffer
// costs a pass of its own (LeNet's first conv: O = 6, C·kh·kw = 25).
// xp is one image zero-padded to [c, hp, wp]; out one image's [O, ho, wo];
// the bias and activation are applied as each row is stored.
template <int O>
KILN_TARGET_AVX512 void direct_conv_image_avx512(const float* xp, std::int64_t hp, std::int64_t wp,
                                                 const float* w, float* out,
                                                 const Conv2dGeometry& g, const float* bias,
                                                 ConvActivation act) {
  const __mmask16 m0 = g.wo >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << g.wo) - 1);
  const __mmask16 m1 = g.wo > 16 ? __mmask16((1u << (g.wo - 16)) - 1) : __mmask16(0);
  const std::int64_t per_o = g.c * g.kh * g.kw;  // w[o] is w + o · per_o
  for (std::int64_t oh = 0; oh < g.ho; ++oh) {
    __m512 a0[O], a1[O];
    for (int o = 0; o < O; ++o) a0[o] = a1[o] = _mm512_setzero_ps();
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i) {
        const float* xr = xp + (c * hp + oh + i) * wp;
        const float* wr = w + (c * g.kh + i) * g.kw;
        for (std::int64_t j = 0; j < g.kw; ++j) {
          const __m512 v0 = _mm512_maskz_loadu_ps(m0, xr + j);
          const __m512 v1 = _mm512_maskz_loadu_ps(m1, xr + j + 16);
          for (int o = 0; o < O; ++o) {
            const __m512 s = _mm512_set1_ps(wr[o * per_o + j]);
            a0[o] = _mm512_fmadd_ps(s, v0, a0[o]);
            a1[o] = _mm512_fmadd_ps(s, v1, a1[o]);
          }
        }
      }
    for (int o = 0; o < O; ++o) {
      const __m512 b = _mm512_set1_ps(bias ? bias[o] : 0.0f);
      __m512 r0 = _mm512_add_ps(a0[o], b), r1 = _mm512_add_ps(a1[o], b);
      if (act != ConvActivation::None) {  // a NaN gives 0, as kiln.relu and oneDNN's post-ops
        r0 = _mm512_mask_max_ps(r0, avx512::kAll, r0, _mm512_setzero_ps());
        r1 = _mm512_mask_max_ps(r1, avx512::kAll, r1, _mm512_setzero_ps());
      }
      if (act == ConvActivation::Relu6) {
        r0 = _mm512_mask_min_ps(r0, avx512::kAll, r0, _mm512_set1_ps(6.0f));
        r1 = _mm512_mask_min_ps(r1, avx512::kAll, r1, _mm512_set1_ps(6.0f));
      }
      float* orow = out + (o * g.ho + oh) * g.wo;
      _mm512_mask_storeu_ps(orow, m0, r0);
      _mm512_mask_storeu_ps(orow + 16, m1, r1);
    }
  }
}

// Whether direct_conv_image_avx512 covers g (and the CPU has AVX-512).
inline bool direct_conv_fits(const Conv2dGeometry& g) {
  return g.groups == 1 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.o >= 1 &&
         g.o <= 8 && g.wo >= 1 && g.wo <= 32 && cpu_simd_level() == SimdLevel::Avx512;
}

// One thread's direct convolutions of g's images: each copied into a
// zero-padded buffer, then direct_conv_image_avx512.
class DirectConv {
 public:
  DirectConv(const float* w, const Conv2dGeometry& g, const float* bias, ConvActivation act)
      : w_(w), g_(g), bias_(bias), act_(act), hp_(g.h + g.pt + g.pb), wp_(g.w + g.pl + g.pr),
        padded_(scratch<float>(g.c * hp_ * wp_)) {
    std::fill(padded_, padded_ + g.c * hp_ * wp_, 0.0f);  // the padding stays 0 image after image
  }
  // dst [o, ho, wo] = the convolution of image xi [c, h, w].
  void image(const float* xi, float* dst) {
    using Fn = void (*)(const float*, std::int64_t, std::int64_t, const float*, float*, const Conv2dGeometry&,
                        const float*, ConvActivation);
    static constexpr Fn by_o[] = {direct_conv_image_avx512<1>, direct_conv_image_avx512<2>,
                                  direct_conv_image_avx512<3>, direct_conv_image_avx512<4>,
                                  direct_conv_image_avx512<5>, direct_conv_image_avx512<6>,
                                  direct_conv_image_avx512<7>, direct_conv_image_avx512<8>};
    for (std::int64_t c = 0; c < g_.c; ++c)
      for (std::int64_t r = 0; r < g_.h; ++r)
        std::memcpy(padded_ + (c * hp_ + g_.pt + r) * wp_ + g_.pl, xi + (c * g_.h + r) * g_.w,
                    sizeof(float) * static_cast<std::size_t>(g_.w));
    by_o[g_.o - 1](padded_, hp_, wp_, w_, dst, g_, bias_, act_);
  }

 private:
  const float* w_;
  const Conv2dGeometry& g_;
  const float* bias_;
  ConvActivation act_;
  std::int64_t hp_, wp_;
  float* padded_;  // this thread's scratch
};

void direct_conv_avx512(const float* x, const float* w, float* out, const Conv2dGeometry& g,
                        const float* bias, ConvActivation act) {
  DirectConv conv(w, g, bias, act);
  for (std::int64_t n = 0; n < g.n; ++n) conv.image(x + n * g.c * g.h * g.w, out + n * g.o * g.ho * g.wo);
}

// Whether an NHWC convolution runs as direct_conv_nhwc_one_channel: one
// input channel (x then reads as NCHW) into few outputs (LeNet-5's first
// convolution, 1 -> 6, 5x5: oneDNN 2.6's brgconv pads the 6 outputs to 16
// and runs one multiply-add per tap and block).
inline bool direct_conv_nhwc_fits(const Conv2dGeometry& g) { return g.c == 1 && direct_conv_fits(g); }

// out [n, ho, wo, o] = conv2d of x [n, h, w, 1] by direct_conv_image_avx512,
// images split across the kernel's threads, each image's [o, ho, wo] result
// swapped into out's layout while in cache.
void direct_conv_nhwc_one_channel(const float* x, const float* w, float* out, const Conv2dGeometry& g,
                                  const float* bias, ConvActivation act) {
  const std::int64_t pixels = g.ho * g.wo;
  parallel_for(g.n, 1, [&](std::int64_t n0, std::int64_t n1) {
    DirectConv conv(w, g, bias, act);
    thread_local std::vector<float> block;
    block.resize(std::size_t(g.o * pixels));
    for (std::int64_t n = n0; n < n1; ++n) {
      conv.image(x + n * g.h * g.w, block.data());
      swap_last_axes(block.data(), out + n * pixels * g.o, 1, g.o, pixels);
    }
  });
}
#endif

// Which contents w holds, for oneDNN's reordered-weights cache: only a
// buffer an allocator owns (kiln writes it through Tensors, which count the
// writes); external or arena-wrapped memory is reordered every call.
onednn::ContentsIdentity weights_identity(const Tensor& w) {
  const Buffer& b = *w.buffer();
  if (b.allocator() == nullptr || w.place().kind != PlaceKind::Cpu) return {};
  return {b.id(), b.writes(), w.offset()};
}

// Which contents an activation holds, for oneDNN's kept blocked results
// (onednn::name_result): an arena piece's too, whose bytes hold one value
// while it lives and are written through Tensors, which count the writes.
onednn::ContentsIdentity contents_identity(const Tensor& t) {
  if (t.place().kind != PlaceKind::Cpu) return {};
  return {t.buffer()->id(), t.buffer()->writes(), t.offset()};
}

// out = act(conv(x, w) + bias) by oneDNN's primitive, in NCHW or NHWC; a
// SiLU is kiln's pass over out after it (SiluRow's bits, as kiln.sigmoid
// and kiln.mul give), not oneDNN's swish post-op, which was slower on every
// shape EfficientNet-B0 has (8x96x112x112 from 16 channels, 1x1: 6.2 ms
// with the post-op, 3.3 + 1.7 without; a depthwise 3x3 on 8x144x56x56:
// 3.3 with it, 1.4 without). False where oneDNN has none (out not written).
bool onednn_convolve(const float* x, const float* w, const float* bias, float* out, const Conv2dGeometry& g,
                     ConvActivation act, const onednn::ContentsIdentity& weights, bool channels_last = false,
                     bool allow_winograd = true, const onednn::ContentsIdentity& x_contents = {}) {
  const bool silu = act == ConvActivation::Silu;
  if (!onednn::conv2d_forward(x, w, bias, out, g, silu ? ConvActivation::None : act, weights,
                              {.channels_last = channels_last, .allow_winograd = allow_winograd,
                               .x_contents = x_contents}))
    return false;
  if (silu) silu_in_place(out, g.n * g.o * g.ho * g.wo);
  return true;
}

// out [n, o, ho, wo] = conv2d(x [n, c, h, w], w [o, c/groups, kh, kw]),
// plus bias[o] (when given) and through `act` — applied to each
// image's and group's output block right after its GEMM wrote it (still in
// cache), or as a direct convolution stores each row; oneDNN's primitive
// where it has one (SiLU then over its output).
template <typename T>
void conv_forward(const T* x, const T* w, T* out, const Conv2dGeometry& g,
                  const T* bias = nullptr, ConvActivation act = ConvActivation::None,
                  const onednn::ContentsIdentity& weights = {}) {
  // A 1x1 convolution with stride 1 is one GEMM on NCHW as it is; oneDNN's
  // blocked primitive would add two reorders of x and out (measured: 2-3x
  // slower on MobileNet's pointwise convolutions).
  if constexpr (std::is_same_v<T, float>)
    if (!direct(g) && onednn_convolve(x, w, bias, out, g, act, weights)) return;
#ifdef KILN_HAS_SIMD_CLONES
  if constexpr (std::is_same_v<T, float>)
    if (direct_conv_fits(g) && act != ConvActivation::Silu)
      return direct_conv_avx512(x, w, out, g, bias, act);
#endif
  const std::int64_t cg = g.c / g.groups, og = g.o / g.groups, k = cg * g.kh * g.kw;
  const std::int64_t p = g.ho * g.wo;
  const bool dir = direct(g);
  T* col = dir ? nullptr : scratch<T>(k * p);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t gi = 0; gi < g.groups; ++gi) {
      const T* xg = x + (n * g.c + gi * cg) * g.h * g.w;
      if (!dir) im2col(xg, col, g, cg);
      T* block = out + (n * g.o + gi * og) * p;
      gemm(false, false, og, p, k, w + gi * og * k, k, dir ? xg : col, p, T(0), block, p);
      if (bias || act != ConvActivation::None) bias_activation(block, bias, gi * og, og, p, act);
    }
}

// dx [n, c, h, w] = conv2d's input grad from dout [n, o, ho, wo].
template <typename T>
void conv_input_grad(const T* dout, const T* w, T* dx, const Conv2dGeometry& g) {
  const std::int64_t cg = g.c / g.groups, og = g.o / g.groups, k = cg * g.kh * g.kw;
  const std::int64_t p = g.ho * g.wo;
  const bool dir = direct(g);
  T* col = dir ? nullptr : scratch<T>(k * p);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t gi = 0; gi < g.groups; ++gi) {
      T* dxg = dx + (n * g.c + gi * cg) * g.h * g.w;
      gemm(true, false, k, p, og, w + gi * og * k, k, dout + (n * g.o + gi * og) * p, p, T(0),
           dir ? dxg : col, p);
      if (!dir) col2im(col, dxg, g, cg);
    }
}

// The gradients oneDNN computes (onednn::conv2d_backward; f32, not a 1x1
// stride-1 convolution: that one is a GEMM on NCHW as it is); the caller
// computes the others itself.
template <typename T>
onednn::ConvGrads library_grads(const T* x, const T* w, const T* dout, T* dx, T* dw,
                                const Conv2dGeometry& g, bool nhwc = false) {
  if constexpr (std::is_same_v<T, float>)
    if (nhwc || !direct(g)) return onednn::conv2d_backward(x, w, dout, dx, dw, g, nhwc);
  return {};
}

// dw [o, c/groups, kh, kw] = Σ_n dout_n · im2col(x_n)ᵀ.
template <typename T>
void conv_weight_grad(const T* x, const T* dout, T* dw, const Conv2dGeometry& g) {
  const std::int64_t cg = g.c / g.groups, og = g.o / g.groups, k = cg * g.kh * g.kw;
  const std::int64_t p = g.ho * g.wo;
  if (g.n == 0 || p == 0) {
    std::fill(dw, dw + g.o * k, T(0));
    return;
  }
  const bool dir = direct(g);
  T* col = dir ? nullptr : scratch<T>(k * p);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t gi = 0; gi < g.groups; ++gi) {
      const T* xg = x + (n * g.c + gi * cg) * g.h * g.w;
      if (!dir) im2col(xg, col, g, cg);
      gemm(false, true, og, k, p, dout + (n * g.o + gi * og) * p, p, dir ? xg : col, p,
           n == 0 ? T(0) : T(1), dw + gi * og * k, k);
    }
}

[[noreturn]] void bad_shapes(const KernelContext& ctx, const Tensor& x, const Tensor& w,
                             const char* why) {
  throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", why, ": x is [",
              x.dims().to_string(), "], w is [", w.dims().to_string(), "]");
}

// The geometry of conv2d(x, w) with the attributes of a conv2d (or its grad).
template <typename A>
Conv2dGeometry conv2d_geometry(const KernelContext& ctx, const Tensor& x, const Tensor& w,
                               const A& a) {
  return conv::geometry(ctx.op()->name(), x.dims(), w.dims(), a.strides, a.paddings, a.dilations,
                        a.groups);
}

// The geometry of conv2d(x, w) with an NHWC x [n, h, w, c] (data_format
// NHWC) or an NCHW one.
template <typename A>
Conv2dGeometry layout_geometry(const KernelContext& ctx, const Tensor& x, const Tensor& w, const A& a) {
  if (!data_format::channels_last(ctx.op()->name(), a.data_format)) return conv2d_geometry(ctx, x, w, a);
  if (x.rank() != 4) bad_shapes(ctx, x, w, "needs a rank-4 NHWC x");
  const Dims& d = x.dims();
  return conv::geometry(ctx.op()->name(), Dims{d[0], d[3], d[1], d[2]}, w.dims(), a.strides, a.paddings,
                        a.dilations, a.groups);
}

// The geometry of the conv2d whose input grad conv2d_transpose(x, w) is.
template <typename A>
Conv2dGeometry transpose_geometry(const KernelContext& ctx, const Tensor& x, const Tensor& w,
                                  const A& a) {
  const std::string_view op = ctx.op()->name();
  if (x.rank() != 4 || w.rank() != 4) bad_shapes(ctx, x, w, "needs rank-4 x and w");
  Conv2dGeometry g;
  g.n = x.dims()[0], g.o = x.dims()[1], g.ho = x.dims()[2], g.wo = x.dims()[3];
  g.groups = a.groups;
  if (g.groups < 1 || w.dims()[0] != g.o || g.o % g.groups != 0)
    bad_shapes(ctx, x, w, "has channels that do not fit the groups");
  g.c = w.dims()[1] * g.groups, g.kh = w.dims()[2], g.kw = w.dims()[3];
  auto p = conv::paddings4(op, a.paddings);
  g.pt = p[0], g.pb = p[1], g.pl = p[2], g.pr = p[3];
  g.sh = a.strides.at(0), g.sw = a.strides.at(1), g.dh = a.dilations.at(0), g.dw = a.dilations.at(1);
  g.h = (g.ho - 1) * g.sh - g.pt - g.pb + g.dh * (g.kh - 1) + a.output_padding.at(0) + 1;
  g.w = (g.wo - 1) * g.sw - g.pl - g.pr + g.dw * (g.kw - 1) + a.output_padding.at(1) + 1;
  if (g.h < 1 || g.w < 1) bad_shapes(ctx, x, w, "would have an empty output");
  return g;
}

// An NHWC conv through NCHW copies: the path of f64 and of geometries that
// oneDNN does not take.
template <typename T>
void conv_forward_nhwc_by_copies(const T* x, const T* w, T* out, const Conv2dGeometry& g,
                                 const T* bias, ConvActivation act,
                                 const onednn::ContentsIdentity& weights) {
  std::vector<T> xt(static_cast<std::size_t>(g.n * g.c * g.h * g.w)),
      ot(static_cast<std::size_t>(g.n * g.o * g.ho * g.wo));
  swap_last_axes(x, xt.data(), g.n, g.h * g.w, g.c);
  conv_forward(xt.data(), w, ot.data(), g, bias, act, weights);
  swap_last_axes(ot.data(), out, g.n, g.o, g.ho * g.wo);
}

// out += residual, then `act`, split across the kernel's threads.
template <typename T>
void add_residual(T* out, const T* residual, std::int64_t n, ConvActivation act) {
  parallel_for(n, items_per_range(3 * sizeof(T)), [=](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) out[i] += residual[i];
    if (act == ConvActivation::Silu) simd_dispatch<SiluRow<T>>(out + b, T(0), e - b);
    if (act == ConvActivation::Relu6)
      for (std::int64_t i = b; i < e; ++i) out[i] = std::min(ReluMath::forward(out[i]), T(6));
    if (act == ConvActivation::Relu)
      for (std::int64_t i = b; i < e; ++i) out[i] = ReluMath::forward(out[i]);
  });
}

// A 1x1, stride-1, unpadded, ungrouped convolution: in NHWC, one GEMM over
// the pixels.
bool pointwise(const Conv2dGeometry& g) {
  return g.groups == 1 && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 &&
         g.ho == g.h && g.wo == g.w && g.dh == 1 && g.dw == 1;
}

// Rows [0, rows) of out [·, o] (pixels by channels): + bias, + residual,
// through act (SiLU excepted), in the unfused ops' order.
template <typename T>
struct PixelRowsEpilogue {
  KILN_SIMD_INLINE static void run(T* out, const T* bias, const T* residual, std::int64_t rows, std::int64_t o,
                                   ConvActivation act) {
    for (std::int64_t r = 0; r < rows; ++r) {
      T* __restrict row = out + r * o;
      if (bias != nullptr)
        for (std::int64_t k = 0; k < o; ++k) row[k] += bias[k];
      if (residual != nullptr) {
        const T* __restrict res = residual + r * o;
        for (std::int64_t k = 0; k < o; ++k) row[k] += res[k];
      }
      if (act == ConvActivation::Relu)
        for (std::int64_t k = 0; k < o; ++k) row[k] = ReluMath::forward(row[k]);
      else if (act == ConvActivation::Relu6)
        for (std::int64_t k = 0; k < o; ++k) row[k] = std::min(ReluMath::forward(row[k]), T(6));
    }
  }
};

// Pixel rows per block of a pointwise NHWC convolution: ~64 KiB of output,
// from the shape alone.
std::int64_t pointwise_block_rows(const Conv2dGeometry& g) {
  return std::clamp<std::int64_t>((std::int64_t{1} << 16) / g.o / 64 * 64, 64, 4096);
}

// Rows [r0, r0 + m) of a pointwise NHWC convolution: out = act(x · wᵀ +
// bias + residual), a one-thread GEMM over all of c, then its epilogue
// while the block is in L2.
void pointwise_rows(const float* x, const float* w, const float* bias, const float* residual, float* out,
                    std::int64_t r0, std::int64_t m, const Conv2dGeometry& g, ConvActivation act) {
  float* block = out + r0 * g.o;
  if (!onednn::sgemm(false, true, m, g.o, g.c, 1.0f, x + r0 * g.c, g.c, w, g.c, 0.0f, block, g.o))
    gemm(false, true, m, g.o, g.c, x + r0 * g.c, g.c, w, g.c, 0.0f, block, g.o);
  if (bias != nullptr || residual != nullptr || act != ConvActivation::None)
    simd_dispatch<PixelRowsEpilogue<float>>(block, bias, residual ? residual + r0 * g.o : nullptr, m, g.o, act);
  if (act == ConvActivation::Silu) simd_dispatch<SiluRow<float>>(block, 0.0f, m * g.o);
}

// out [p, o] = act(x [p, c] · wᵀ + bias + residual) for a pointwise NHWC
// convolution, as blocks of pixel rows (pointwise_rows). Block bounds depend
// on the shape alone, so the bits on the thread count not at all.
void pointwise_nhwc(const float* x, const float* w, const float* bias, const float* residual, float* out,
                    const Conv2dGeometry& g, ConvActivation act) {
  const std::int64_t pixels = g.n * g.h * g.w, rows = pointwise_block_rows(g);
  parallel_for((pixels + rows - 1) / rows, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b)
      pointwise_rows(x, w, bias, residual, out, b * rows, std::min(rows, pixels - b * rows), g, act);
  });
}

// pointwise_nhwc of x ⊙ scale without writing the product: each image's
// blocks multiply by w ⊙ scale_n (o·c products per block), scale_n c
// factors `image_stride` (c, or 0: one set for all images) apart. Blocks
// stay within an image; their bounds, too, come from the shape alone.
void pointwise_nhwc_scaled(const float* x, const float* scale, std::int64_t image_stride, const float* w,
                           const float* bias, const float* residual, float* out, const Conv2dGeometry& g,
                           ConvActivation act) {
  // At least two blocks an image (a batch of one on two threads).
  const std::int64_t pixels = g.h * g.w, rows = std::min(pointwise_block_rows(g), (pixels + 127) / 128 * 64);
  const std::int64_t per_image = (pixels + rows - 1) / rows;
  parallel_for(g.n * per_image, 1, [&](std::int64_t b0, std::int64_t b1) {
    thread_local std::vector<float> scaled;
    scaled.resize(std::size_t(g.o * g.c));
    for (std::int64_t b = b0, image = -1; b < b1; ++b) {
      if (b / per_image != image) {
        image = b / per_image;
        const float* s = scale + image * image_stride;
        for (std::int64_t k = 0; k < g.o; ++k)
          for (std::int64_t c = 0; c < g.c; ++c) scaled[std::size_t(k * g.c + c)] = w[k * g.c + c] * s[c];
      }
      const std::int64_t p0 = (b % per_image) * rows;
      pointwise_rows(x, scaled.data(), bias, residual, out, image * pixels + p0, std::min(rows, pixels - p0), g,
                     act);
    }
  });
}

// Whether pointwise_nhwc adds a residual to g's result rather than
// oneDNN's primitive with its sum post-op: where g is pointwise over 16 Ki
// pixels and more (an inverted residual block's projection at MobileNetV2's
// and EfficientNet-B0's 56x56 stage, 144 -> 24 channels over 8x56x56: 2.2
// ms there, 1.4-1.5 so). At 28x28 and below, and without a residual (the
// epilogue's pass is then the only gain), the primitive ties or wins.
bool pointwise_adding_by_gemm(const Conv2dGeometry& g) {
  return pointwise(g) && g.n * g.h * g.w >= 16384;
}

// A convolution's result dims: [n, ho, wo, o] in NHWC, [n, o, ho, wo] in NCHW.
Dims out_dims(const Conv2dGeometry& g, bool nhwc) {
  return nhwc ? Dims{g.n, g.ho, g.wo, g.o} : Dims{g.n, g.o, g.ho, g.wo};
}

ConvActivation fused_activation(const FusedConv2dOp::Attributes& a) {
  return a.activation == "relu"    ? ConvActivation::Relu
         : a.activation == "relu6" ? ConvActivation::Relu6
         : a.activation == "silu"  ? ConvActivation::Silu
                                   : ConvActivation::None;
}

void check_bias(const KernelContext& ctx, const Tensor& bias, const Conv2dGeometry& g) {
  if (bias.dims() != Dims{g.o})
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' bias is [", bias.dims().to_string(),
                "], the convolution has ", g.o, " output channels");
}

void check_residual(const KernelContext& ctx, const Tensor& residual, const Tensor& out) {
  if (residual.dims() != out.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' residual is [",
                residual.dims().to_string(), "], the result is [", out.dims().to_string(), "]");
}

template <typename T>
struct FusedConv2dK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), w = typed_input<T>(ctx, 1),
                 bias = typed_input<T>(ctx, 2);
    const auto& a = ctx.attrs<FusedConv2dOp>();
    const bool nhwc = a.data_format == "NHWC";
    const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
    check_bias(ctx, bias, g);
    const onednn::ContentsIdentity x_contents = contents_identity(x);  // before out is written
    Tensor& out = ctx.alloc_output(0, out_dims(g, nhwc), x.dtype());
    const ConvActivation act = fused_activation(a);
    if (ctx.num_inputs() == 4) {
      const Tensor residual = typed_input<T>(ctx, 3);
      const onednn::ContentsIdentity residual_contents = contents_identity(residual);  // out may be its buffer
      check_residual(ctx, residual, out);
      if (out.numel() > 0)
        convolve_adding(x, w, bias, residual.data<T>(), out, g, act, nhwc, !a.weights_trained, x_contents,
                        residual_contents);
      return;
    }
    if (out.numel() > 0) convolve(x, w, bias, out, g, act, nhwc, !a.weights_trained, x_contents);
  }

  // out = act(conv(x, w) + bias) in either layout. x_contents: x's
  // (contents_identity) where oneDNN's primitive may read a blocked copy it
  // kept of them; out is then named for the next convolution, unless a
  // SiLU pass wrote it after the primitive.
  static void convolve(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                       const Conv2dGeometry& g, ConvActivation act, bool nhwc, bool allow_winograd,
                       const onednn::ContentsIdentity& x_contents = {}) {
    if (!nhwc)
      return conv_forward(x.data<T>(), w.data<T>(), out.data<T>(), g, bias.data<T>(), act,
                          weights_identity(w));
#ifdef KILN_HAS_SIMD_CLONES
    if constexpr (std::is_same_v<T, float>)
      if (direct_conv_nhwc_fits(g) && act != ConvActivation::Silu)
        return direct_conv_nhwc_one_channel(x.data<T>(), w.data<T>(), out.data<T>(), g, bias.data<T>(), act);
#endif
    if constexpr (std::is_same_v<T, float>) {
      if (pointwise(g) && g.h * g.w == 1)  // a fully connected layer: one GEMM, no primitive's overhead
        return pointwise_nhwc(x.data<T>(), w.data<T>(), bias.data<T>(), nullptr, out.data<T>(), g, act);
      if (onednn_convolve(x.data<T>(), w.data<T>(), bias.data<T>(), out.data<T>(), g, act, weights_identity(w),
                          true, allow_winograd, x_contents)) {
        if (act != ConvActivation::Silu) onednn::name_result(contents_identity(out));
        return;
      }
    }
    conv_forward_nhwc_by_copies(x.data<T>(), w.data<T>(), out.data<T>(), g, bias.data<T>(), act,
                                weights_identity(w));
  }

  // out = act(conv(x, w) + bias + residual): a large pointwise NHWC one by
  // pointwise_nhwc; else oneDNN adds the residual (copied into out first)
  // in the convolution's own pass; otherwise the convolution's result gets
  // it, and the activation, in one more pass.
  static void convolve_adding(const Tensor& x, const Tensor& w, const Tensor& bias, const T* residual,
                              Tensor& out, const Conv2dGeometry& g, ConvActivation act, bool nhwc,
                              bool allow_winograd, const onednn::ContentsIdentity& x_contents = {},
                              const onednn::ContentsIdentity& residual_contents = {}) {
    T* po = out.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (nhwc && pointwise_adding_by_gemm(g))
        return pointwise_nhwc(x.data<T>(), w.data<T>(), bias.data<T>(), residual, po, g, act);
      if (nhwc || (act != ConvActivation::Silu && !direct(g))) {  // NCHW 1x1: conv_forward's GEMM
        if (onednn::conv2d_forward(x.data<T>(), w.data<T>(), bias.data<T>(), po, g, act, weights_identity(w),
                                   {.channels_last = nhwc,
                                    .allow_winograd = allow_winograd,
                                    .residual = residual,
                                    .x_contents = x_contents,
                                    .residual_contents = residual_contents})) {
          onednn::name_result(contents_identity(out));
          return;
        }
      }
    }
    convolve(x, w, bias, out, g, ConvActivation::None, nhwc, allow_winograd);
    add_residual(po, residual, out.numel(), act);
  }
};

// x ⊙ scale over x's pixels ([n, c, h, w] or [n, h, w, c]), each image's
// c factors `image_stride` (c or 0) apart: kiln.mul's bits. Only where the
// fuse pass would not have built the op (it folds nothing there).
template <typename T>
Tensor scale_channels(const Tensor& x, const T* scale, std::int64_t image_stride, const Conv2dGeometry& g,
                      bool nhwc) {
  Tensor r = Tensor::empty(x.dims(), x.dtype());
  const T* px = x.data<T>();
  T* pr = r.data<T>();
  const std::int64_t pixels = g.h * g.w;
  parallel_for(g.n * (nhwc ? pixels : g.c), items_per_range(std::int64_t(2 * sizeof(T)) * (nhwc ? g.c : pixels)),
               [&](std::int64_t r0, std::int64_t r1) {
                 for (std::int64_t row = r0; row < r1; ++row) {
                   const std::int64_t len = nhwc ? g.c : pixels;
                   const T* __restrict a = px + row * len;
                   T* __restrict o = pr + row * len;
                   if (nhwc) {
                     const T* __restrict s = scale + row / pixels * image_stride;
                     for (std::int64_t i = 0; i < len; ++i) o[i] = a[i] * s[i];
                   } else {
                     const T s = scale[row / g.c * image_stride + row % g.c];
                     for (std::int64_t i = 0; i < len; ++i) o[i] = a[i] * s;
                   }
                 }
               });
  return r;
}

// The distance between images' factors in channel_scaled_conv2d's scale:
// c for [n, c, 1, 1] ([n, 1, 1, c] in NHWC), 0 for one set of factors
// ([1, c, 1, 1]) shared by every image; kiln::Error otherwise.
std::int64_t check_scale(const KernelContext& ctx, const Tensor& scale, const Tensor& x, const Conv2dGeometry& g,
                         bool nhwc) {
  const Dims& d = scale.dims();
  const bool fits = d.rank() == 4 && (d[0] == g.n || d[0] == 1) && d[nhwc ? 3 : 1] == g.c &&
                    d[nhwc ? 1 : 2] == 1 && d[nhwc ? 2 : 3] == 1;
  if (!fits)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' scale is [", d.to_string(), "], x [",
                x.dims().to_string(), "] needs ", nhwc ? "[Nx1x1xC]" : "[NxCx1x1]", " with N = ", g.n, " or 1, C = ",
                g.c);
  return d[0] == 1 ? 0 : g.c;
}

template <typename T>
struct ChannelScaledConv2dK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), scale = typed_input<T>(ctx, 1), w = typed_input<T>(ctx, 2),
                 bias = typed_input<T>(ctx, 3);
    const auto& a = ctx.attrs<ChannelScaledConv2dOp>();
    const bool nhwc = a.data_format == "NHWC";
    const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
    check_bias(ctx, bias, g);
    const std::int64_t image_stride = check_scale(ctx, scale, x, g, nhwc);
    const Tensor residual = ctx.num_inputs() == 5 ? typed_input<T>(ctx, 4) : Tensor();
    Tensor& out = ctx.alloc_output(0, out_dims(g, nhwc), x.dtype());
    if (residual.is_initialized()) check_residual(ctx, residual, out);
    if (out.numel() == 0) return;
    const ConvActivation act = fused_activation(a);
    const T* res = residual.is_initialized() ? residual.data<T>() : nullptr;
    if constexpr (std::is_same_v<T, float>)
      if (nhwc && cpu_folds_channel_scale(g))
        return pointwise_nhwc_scaled(x.data<T>(), scale.data<T>(), image_stride, w.data<T>(), bias.data<T>(), res,
                                     out.data<T>(), g, act);
    const Tensor scaled = scale_channels(x, scale.data<T>(), image_stride, g, nhwc);
    if (res) return FusedConv2dK<T>::convolve_adding(scaled, w, bias, res, out, g, act, nhwc, !a.weights_trained);
    FusedConv2dK<T>::convolve(scaled, w, bias, out, g, act, nhwc, !a.weights_trained);
  }
};

// What fused_conv2d_mean runs over each chunk of pixel rows before summing
// it: SiluRow (kiln.sigmoid's and kiln.mul's bits), or nothing.
void silu_rows(float* block, std::int64_t elements) { simd_dispatch<SiluRow<float>>(block, 0.0f, elements); }
void rows_as_they_are(float*, std::int64_t) {}

// fused_conv2d (NHWC) and its mean over the pixels: the convolution without
// its SiLU, then one pass that applies the SiLU to each chunk of rows and
// sums the chunk (mean_over_rows).
template <typename T>
struct FusedConv2dMeanK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), w = typed_input<T>(ctx, 1), bias = typed_input<T>(ctx, 2);
    const auto& a = ctx.attrs<FusedConv2dMeanOp>();
    const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
    check_bias(ctx, bias, g);
    Tensor& out = ctx.alloc_output(0, out_dims(g, true), x.dtype());
    T* mean = ctx.alloc_output(1, Dims{g.n, 1, 1, g.o}, x.dtype()).template data<T>();
    if (out.numel() == 0) {  // no pixels: kiln.mean's NaN
      std::fill(mean, mean + g.n * g.o, std::numeric_limits<T>::quiet_NaN());
      return;
    }
    const ConvActivation act = fused_activation(a);
    const bool silu = act == ConvActivation::Silu;
    FusedConv2dK<T>::convolve(x, w, bias, out, g, silu ? ConvActivation::None : act, true, !a.weights_trained);
    mean_over_rows(out.data<T>(), g.n, g.ho * g.wo, g.o, mean, silu ? &silu_rows : &rows_as_they_are);
  }
};

// pointwise_depthwise_conv2d: pointwise_depthwise_nhwc's one pass where
// it fits; else the two fused_conv2d, the expanded tensor in between.
template <typename T>
struct PointwiseDepthwiseConv2dK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), pw = typed_input<T>(ctx, 1), pb = typed_input<T>(ctx, 2),
                 dw = typed_input<T>(ctx, 3), db = typed_input<T>(ctx, 4);
    using Op = PointwiseDepthwiseConv2dOp;
    const auto& a = ctx.attrs<Op>();
    const auto pa = Op::pointwise_attrs(a);
    const Conv2dGeometry g1 = layout_geometry(ctx, x, pw, pa);
    check_bias(ctx, pb, g1);
    const auto da = Op::depthwise_attrs(a, g1.o);
    const Dims mid_dims = out_dims(g1, true);
    const Conv2dGeometry g2 = conv::geometry(ctx.op()->name(), Dims{g1.n, g1.o, g1.ho, g1.wo}, dw.dims(),
                                             da.strides, da.paddings, da.dilations, da.groups);
    check_bias(ctx, db, g2);
    Tensor& out = ctx.alloc_output(0, out_dims(g2, true), x.dtype());
    if (out.numel() == 0) return;
    if constexpr (std::is_same_v<T, float>)
      if (pointwise_depthwise_fits(g1, g2))
        return pointwise_depthwise_nhwc({x.data<T>(), pw.data<T>(), pb.data<T>(), dw.data<T>(), db.data<T>(),
                                         out.data<T>(), g1, g2, fused_activation(pa), fused_activation(da),
                                         weights_identity(pw), weights_identity(dw)});
    Tensor mid = Tensor::empty(mid_dims, x.dtype());
    if (mid.numel() > 0) FusedConv2dK<T>::convolve(x, pw, pb, mid, g1, fused_activation(pa), true, true);
    FusedConv2dK<T>::convolve(mid, dw, db, out, g2, fused_activation(da), true, true);
  }
};

template <typename T>
struct Conv2dK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), w = typed_input<T>(ctx, 1);
    const auto& a = ctx.attrs<Conv2dOp>();
    const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
    const bool nhwc = a.data_format == "NHWC";
    Tensor& out = ctx.alloc_output(0, out_dims(g, nhwc), x.dtype());
    if (out.numel() == 0) return;
    const T* none = nullptr;
    if (!nhwc)
      return conv_forward(x.data<T>(), w.data<T>(), out.data<T>(), g, none, ConvActivation::None,
                          weights_identity(w));
    // No Winograd: kiln.conv2d is what a training program convolves with
    // where its convolution has no bias (a ResNet's, before batch norm), and
    // its weights change every step (kiln.fused_conv2d says so itself).
    if constexpr (std::is_same_v<T, float>)
      if (onednn::conv2d_forward(x.data<T>(), w.data<T>(), none, out.data<T>(), g, ConvActivation::None,
                                 weights_identity(w), {.channels_last = true, .allow_winograd = false}))
        return;
    conv_forward_nhwc_by_copies(x.data<T>(), w.data<T>(), out.data<T>(), g, none, ConvActivation::None,
                                weights_identity(w));
  }
};

template <typename T>
struct Conv2dGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), w = typed_input<T>(ctx, 1),
                 dout = typed_input<T>(ctx, 2);
    const auto& a = ctx.attrs<GradOf<Conv2dOp>>();
    const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
    const bool nhwc = a.data_format == "NHWC";
    conv::check_dout(ctx.op()->name(), dout.dims(), out_dims(g, nhwc));
    // dx goes unread when x is a data op (a network's first layer): skip it.
    T* dx = ctx.output_unused(0) ? nullptr : ctx.alloc_output(0, x.dims(), x.dtype()).template data<T>();
    T* dw = ctx.output_unused(1) ? nullptr : ctx.alloc_output(1, w.dims(), w.dtype()).template data<T>();
    if (x.numel() == 0) dx = nullptr;
    if (w.numel() == 0) dw = nullptr;
    const onednn::ConvGrads done = library_grads(x.data<T>(), w.data<T>(), dout.data<T>(), dx, dw, g, nhwc);
    if ((dw == nullptr || done.dw) && (dx == nullptr || done.dx)) return;
    if (nhwc) return by_copies(x.data<T>(), w.data<T>(), dout.data<T>(), done.dx ? nullptr : dx,
                               done.dw ? nullptr : dw, g);
    if (dw != nullptr && !done.dw) conv_weight_grad(x.data<T>(), dout.data<T>(), dw, g);
    if (dx != nullptr && !done.dx) conv_input_grad(dout.data<T>(), w.data<T>(), dx, g);
  }

  // The NHWC gradients through NCHW copies: f64's path and the
  // geometries oneDNN does not take.
  static void by_copies(const T* x, const T* w, const T* dout, T* dx, T* dw, const Conv2dGeometry& g) {
    std::vector<T> xt(static_cast<std::size_t>(g.n * g.c * g.h * g.w)),
        dt(static_cast<std::size_t>(g.n * g.o * g.ho * g.wo));
    swap_last_axes(dout, dt.data(), g.n, g.ho * g.wo, g.o);
    if (dw != nullptr) {
      swap_last_axes(x, xt.data(), g.n, g.h * g.w, g.c);
      conv_weight_grad(xt.data(), dt.data(), dw, g);
    }
    if (dx != nullptr) {
      conv_input_grad(dt.data(), w, xt.data(), g);
      swap_last_axes(xt.data(), dx, g.n, g.c, g.h * g.w);
    }
  }
};

template <typename T>
struct Conv2dTransposeK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), w = typed_input<T>(ctx, 1);
    const Conv2dGeometry g = transpose_geometry(ctx, x, w, ctx.attrs<Conv2dTransposeOp>());
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.c, g.h, g.w}, x.dtype());
    if (out.numel() == 0) return;
    // conv2d's input gradient with x as its dout.
    if (!library_grads<T>(nullptr, w.data<T>(), x.data<T>(), out.data<T>(), nullptr, g).dx)
      conv_input_grad(x.data<T>(), w.data<T>(), out.data<T>(), g);
  }
};

template <typename T>
struct Conv2dTransposeGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), w = typed_input<T>(ctx, 1),
                 dout = typed_input<T>(ctx, 2);
    const Conv2dGeometry g =
        transpose_geometry(ctx, x, w, ctx.attrs<GradOf<Conv2dTransposeOp>>());
    conv::check_dout(ctx.op()->name(), dout.dims(), Dims{g.n, g.c, g.h, g.w});
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    Tensor& dw = ctx.alloc_output(1, w.dims(), w.dtype());
    if (dx.numel() > 0) conv_forward(dout.data<T>(), w.data<T>(), dx.data<T>(), g);
    if (dw.numel() > 0 && !library_grads<T>(dout.data<T>(), w.data<T>(), x.data<T>(), nullptr, dw.data<T>(), g).dw)
      conv_weight_grad(dout.data<T>(), x.data<T>(), dw.data<T>(), g);
  }
};

// bf16 convolutions: oneDNN's bf16 kernels (f32 accumulation, each result
// rounded once) where the CPU computes bf16 natively and every operand is
// bf16; otherwise the f32 kernel on widened operands (half_via_f32.h).
template <typename OpT>
struct Bf16ConvK {
  static void run(KernelContext& ctx) {
    if (!onednn::native_bf16() || !all_bf16(ctx) || !native(ctx))
      run_cpu_half_via_f32(ctx, TypeId::get<OpT>());
  }
  // Whether oneDNN computed every output.
  static bool native(KernelContext& ctx);

  static bool all_bf16(const KernelContext& ctx) {
    for (std::uint32_t i = 0; i < ctx.num_inputs(); ++i)
      if (ctx.input(i).dtype() != DataType::BFloat16) return false;
    return true;
  }
};

const std::uint16_t* bf16(const Tensor& t) { return static_cast<const std::uint16_t*>(t.raw_data()); }
std::uint16_t* bf16(Tensor& t) { return static_cast<std::uint16_t*>(t.raw_data()); }

template <>
bool Bf16ConvK<Conv2dOp>::native(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  const auto& a = ctx.attrs<Conv2dOp>();
  const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
  const bool nhwc = a.data_format == "NHWC";
  Tensor& out = ctx.alloc_output(0, out_dims(g, nhwc), x.dtype());
  return out.numel() == 0 || onednn::conv2d_forward(bf16(x), bf16(w), nullptr, bf16(out), g, ConvActivation::None,
                                                    weights_identity(w), {.channels_last = nhwc, .allow_winograd = false});
}

template <>
bool Bf16ConvK<FusedConv2dOp>::native(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1), &bias = ctx.input(2);
  const auto& a = ctx.attrs<FusedConv2dOp>();
  const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
  check_bias(ctx, bias, g);
  const bool nhwc = a.data_format == "NHWC";
  Tensor& out = ctx.alloc_output(0, out_dims(g, nhwc), x.dtype());
  const bool residual = ctx.num_inputs() == 4;
  if (residual) check_residual(ctx, ctx.input(3), out);
  if (out.numel() == 0) return true;
  return onednn::conv2d_forward(
      bf16(x), bf16(w), bf16(bias), bf16(out), g, fused_activation(a), weights_identity(w),
      {.channels_last = nhwc, .allow_winograd = false, .residual = residual ? ctx.input(3).raw_data() : nullptr});
}

template <>
bool Bf16ConvK<GradOf<Conv2dOp>>::native(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1), &dout = ctx.input(2);
  const auto& a = ctx.attrs<GradOf<Conv2dOp>>();
  const Conv2dGeometry g = layout_geometry(ctx, x, w, a);
  const bool nhwc = a.data_format == "NHWC";
  conv::check_dout(ctx.op()->name(), dout.dims(), out_dims(g, nhwc));
  const bool want_dx = !ctx.output_unused(0) && x.numel() > 0, want_dw = !ctx.output_unused(1) && w.numel() > 0;
  std::uint16_t* dx = want_dx ? bf16(ctx.alloc_output(0, x.dims(), x.dtype())) : nullptr;
  std::uint16_t* dw = want_dw ? bf16(ctx.alloc_output(1, w.dims(), w.dtype())) : nullptr;
  const onednn::ConvGrads done = onednn::conv2d_backward(bf16(x), bf16(w), bf16(dout), dx, dw, g, nhwc);
  return (!want_dx || done.dx) && (!want_dw || done.dw);
}

}  // namespace

KILN_REGISTER_KERNELS(Conv2dOp, Cpu, Conv2dK, float, double);
KILN_REGISTER_KERNELS(FusedConv2dOp, Cpu, FusedConv2dK, float, double);
KILN_REGISTER_KERNELS(ChannelScaledConv2dOp, Cpu, ChannelScaledConv2dK, float, double);
KILN_REGISTER_KERNELS(FusedConv2dMeanOp, Cpu, FusedConv2dMeanK, float);
KILN_REGISTER_KERNELS(PointwiseDepthwiseConv2dOp, Cpu, PointwiseDepthwiseConv2dK, float, double);
KILN_REGISTER_KERNELS(GradOf<Conv2dOp>, Cpu, Conv2dGradK, float, double);
KILN_REGISTER_KERNELS(Conv2dTransposeOp, Cpu, Conv2dTransposeK, float, double);
KILN_REGISTER_KERNELS(GradOf<Conv2dTransposeOp>, Cpu, Conv2dTransposeGradK, float, double);

namespace {
template <typename... OpTs>
void register_bf16(OpTypeList<OpTs...>) {
  (KernelRegistrar<OpTs>(PlaceKind::Cpu, DataType::BFloat16, &Bf16ConvK<OpTs>::run, OpTs::name), ...);
}
[[maybe_unused]] const bool bf16_registered = (register_bf16(CpuOwnBf16Ops{}), true);
}  // namespace

}  // namespace kiln::cpu

namespace kiln {

bool cpu_folds_channel_scale(const Conv2dGeometry& g) { return cpu::pointwise(g) && g.h * g.w >= 4 * g.o; }
bool cpu_fuses_pointwise_depthwise(const Conv2dGeometry& expand, const Conv2dGeometry& depthwise) {
  constexpr std::int64_t kMinExpandedBytes = std::int64_t{4} << 20;
  return cpu::pointwise_depthwise_fits(expand, depthwise) &&
         expand.h * expand.w * expand.o * std::int64_t(sizeof(float)) >= kMinExpandedBytes;
}

}  // namespace kiln
