// kiln.pointwise_depthwise_conv2d's AVX-512 kernel (pointwise_depthwise.h).
// Each task runs a band of one image's output rows, one block of up to 64
// channels at a time; for each row it computes the expanded input rows the
// row's taps need and the ring does not hold yet (in order, each once per
// band and block), then the depthwise row. The
// expansion is a register-blocked GEMM of 6 pixels by up to 64 channels
// over weights packed [c][e]; the depthwise, 4 pixels by up to 64 channels
// over weights packed [tap][e].
#include "pointwise_depthwise.h"

#include <algorithm>
#include <list>
#include <vector>

#include "intra_op.h"
#include "sigmoid_avx512.h"
#include "vector_math.h"

namespace kiln::cpu {

#ifdef KILN_HAS_SIMD_CLONES
namespace {

using onednn::ConvActivation;
constexpr int kMaxTaps = 7;

// act(v) in 16 lanes; a NaN stays NaN (max and min return their second
// operand when one is NaN).
KILN_TARGET_AVX512 inline __m512 activate(__m512 v, ConvActivation act) {
  const __m512 zero = _mm512_setzero_ps();
  switch (act) {
    case ConvActivation::Relu: return _mm512_mask_max_ps(zero, avx512::kAll, zero, v);
    case ConvActivation::Relu6:
      return _mm512_mask_min_ps(zero, avx512::kAll, _mm512_set1_ps(6.0f),
                                _mm512_mask_max_ps(zero, avx512::kAll, zero, v));
    case ConvActivation::Silu: return avx512::silu16(v, zero);
    case ConvActivation::None: break;
  }
  return v;
}

// The vectors of 16 channels in block b of a row of e channels: e / 16
// vectors split into the fewest blocks of at most 4, as even as they go
// (144 channels: 3 + 3 + 3, not 4 + 4 + 1, whose last block would load its
// inputs for one vector only).
inline std::int64_t channel_blocks(std::int64_t e) { return (e / 16 + 3) / 4; }
inline int block_vectors(std::int64_t e, std::int64_t b) {
  const std::int64_t v = e / 16, blocks = channel_blocks(e);
  return int(v / blocks + (b < v % blocks ? 1 : 0));
}

// row[p][j] = act(Σ_k x[p][k] · pw[k][j] + bias[j]) for P pixels (x's rows
// c apart, row's ld apart) and 16·J channels (pw's rows e apart).
template <int P, int J>
KILN_TARGET_AVX512 void expand_block(const float* x, std::int64_t c, const float* pw, std::int64_t e,
                                     const float* bias, float* row, std::int64_t ld, ConvActivation act) {
  __m512 acc[P][J];
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < J; ++j) acc[p][j] = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < c; ++k) {
    __m512 w[J];
    for (int j = 0; j < J; ++j) w[j] = _mm512_loadu_ps(pw + k * e + 16 * j);
    for (int p = 0; p < P; ++p) {
      const __m512 xv = _mm512_set1_ps(x[p * c + k]);
      for (int j = 0; j < J; ++j) acc[p][j] = _mm512_fmadd_ps(xv, w[j], acc[p][j]);
    }
  }
  for (int j = 0; j < J; ++j) {
    const __m512 b = _mm512_loadu_ps(bias + 16 * j);
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(row + p * ld + 16 * j, activate(_mm512_add_ps(acc[p][j], b), act));
  }
}

using ExpandBlock = void (*)(const float*, std::int64_t, const float*, std::int64_t, const float*, float*,
                             std::int64_t, ConvActivation);
template <int P>
constexpr ExpandBlock kExpandByJ[] = {expand_block<P, 1>, expand_block<P, 2>, expand_block<P, 3>,
                                      expand_block<P, 4>};
constexpr const ExpandBlock* kExpand[] = {kExpandByJ<1>, kExpandByJ<2>, kExpandByJ<3>,
                                          kExpandByJ<4>, kExpandByJ<5>, kExpandByJ<6>};

// The channels [j0, j0 + 16·vectors) of `pixels` expanded pixels (one image
// row): out [pixels, 16·vectors] from x [pixels, c].
KILN_TARGET_AVX512 void expand_pixels(const PointwiseDepthwise& p, const float* pw, const float* x,
                                      std::int64_t pixels, std::int64_t j0, int vectors, float* out) {
  const std::int64_t c = p.expand.c, e = p.expand.o, ld = 16 * vectors;
  for (std::int64_t x0 = 0; x0 < pixels; x0 += 6) {
    const int block = int(std::min<std::int64_t>(6, pixels - x0));
    kExpand[block - 1][vectors - 1](x + x0 * c, c, pw + j0, e, p.pw_bias + j0, out + x0 * ld, ld, p.expand_act);
  }
}

// The expanded rows one output row's taps read, top to bottom, each [w,
// ld] (one block of channels); null where a tap row lies in the padding.
struct TapRows {
  const float* rows[kMaxTaps];
};

// out[p][j] for P output pixels whose taps all lie inside the row:
// Σ_taps in · w, + bias, through act. `in` is column x0 of the first
// pixel in the tap rows (pixels ld apart), `out` its result (pixels e
// apart), at the block's first channel.
template <int P, int J>
KILN_TARGET_AVX512 void depthwise_block(const TapRows& t, std::int64_t in, std::int64_t ld, const Conv2dGeometry& g,
                                        std::int64_t e, const float* dw, const float* bias, float* out,
                                        ConvActivation act) {
  __m512 acc[P][J];
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < J; ++j) acc[p][j] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < g.kh; ++i) {
    if (t.rows[i] == nullptr) continue;
    for (std::int64_t k = 0; k < g.kw; ++k) {
      const float* src = t.rows[i] + in + k * ld;
      const float* wk = dw + (i * g.kw + k) * e;
      for (int j = 0; j < J; ++j) {
        const __m512 w = _mm512_loadu_ps(wk + 16 * j);
        for (int p = 0; p < P; ++p)
          acc[p][j] = _mm512_fmadd_ps(_mm512_loadu_ps(src + p * g.sw * ld + 16 * j), w, acc[p][j]);
      }
    }
  }
  for (int j = 0; j < J; ++j) {
    const __m512 b = _mm512_loadu_ps(bias + 16 * j);
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + p * e + 16 * j, activate(_mm512_add_ps(acc[p][j], b), act));
  }
}

// depthwise_block for one output pixel at the row's edge, whose column x0
// may leave the row: the taps outside are skipped, the others summed in
// the same order.
template <int J>
KILN_TARGET_AVX512 void depthwise_edge(const TapRows& t, std::int64_t x0, std::int64_t ld, const Conv2dGeometry& g,
                                       std::int64_t e, const float* dw, const float* bias, float* out,
                                       ConvActivation act) {
  __m512 acc[J];
  for (int j = 0; j < J; ++j) acc[j] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < g.kh; ++i) {
    if (t.rows[i] == nullptr) continue;
    for (std::int64_t k = 0; k < g.kw; ++k) {
      if (x0 + k < 0 || x0 + k >= g.w) continue;
      const float* src = t.rows[i] + (x0 + k) * ld;
      const float* wk = dw + (i * g.kw + k) * e;
      for (int j = 0; j < J; ++j)
        acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(src + 16 * j), _mm512_loadu_ps(wk + 16 * j), acc[j]);
    }
  }
  for (int j = 0; j < J; ++j)
    _mm512_storeu_ps(out + 16 * j, activate(_mm512_add_ps(acc[j], _mm512_loadu_ps(bias + 16 * j)), act));
}

using DepthwiseBlock = void (*)(const TapRows&, std::int64_t, std::int64_t, const Conv2dGeometry&, std::int64_t,
                                const float*, const float*, float*, ConvActivation);
template <int P>
constexpr DepthwiseBlock kDepthwiseByJ[] = {depthwise_block<P, 1>, depthwise_block<P, 2>, depthwise_block<P, 3>,
                                            depthwise_block<P, 4>};
constexpr const DepthwiseBlock* kDepthwise[] = {kDepthwiseByJ<1>, kDepthwiseByJ<2>, kDepthwiseByJ<3>,
                                                kDepthwiseByJ<4>};
constexpr decltype(&depthwise_edge<1>) kEdge[] = {depthwise_edge<1>, depthwise_edge<2>, depthwise_edge<3>,
                                                  depthwise_edge<4>};

// The channels [j0, j0 + 16·vectors) of output row `out` [wo, e] from its
// tap rows: the pixels whose taps all lie inside the row in blocks of 4,
// the others one by one.
KILN_TARGET_AVX512 void depthwise_row(const PointwiseDepthwise& p, const float* dw, const TapRows& t, std::int64_t j0,
                                      int vectors, float* out) {
  const Conv2dGeometry& g = p.depthwise;
  const std::int64_t e = g.c, ld = 16 * vectors;
  // Interior pixels: ox·sw - pl >= 0 and ox·sw - pl + kw <= w.
  const std::int64_t first = std::min(g.wo, (g.pl + g.sw - 1) / g.sw);
  const std::int64_t room = g.w - g.kw + g.pl;
  const std::int64_t last = room < 0 ? first : std::max(first, std::min(g.wo, room / g.sw + 1));
  const float *wj = dw + j0, *bj = p.dw_bias + j0;
  for (std::int64_t ox = 0; ox < first; ++ox)
    kEdge[vectors - 1](t, ox * g.sw - g.pl, ld, g, e, wj, bj, out + ox * e + j0, p.act);
  for (std::int64_t ox = first; ox < last; ox += 4) {
    const int pixels = int(std::min<std::int64_t>(4, last - ox));
    kDepthwise[pixels - 1][vectors - 1](t, (ox * g.sw - g.pl) * ld, ld, g, e, wj, bj, out + ox * e + j0, p.act);
  }
  for (std::int64_t ox = last; ox < g.wo; ++ox)
    kEdge[vectors - 1](t, ox * g.sw - g.pl, ld, g, e, wj, bj, out + ox * e + j0, p.act);
}

// Weights as the blocks read them: pw [c][e], dw [tap][e].
struct PackedWeights {
  std::vector<float> pw, dw;
  void pack(const PointwiseDepthwise& p) {
    const std::int64_t c = p.expand.c, e = p.expand.o, taps = p.depthwise.kh * p.depthwise.kw;
    pw.resize(std::size_t(c * e));
    dw.resize(std::size_t(taps * e));
    for (std::int64_t k = 0; k < c; ++k)
      for (std::int64_t j = 0; j < e; ++j) pw[std::size_t(k * e + j)] = p.pw[j * c + k];
    for (std::int64_t k = 0; k < taps; ++k)
      for (std::int64_t j = 0; j < e; ++j) dw[std::size_t(k * e + j)] = p.dw[j * taps + k];
  }
  std::size_t bytes() const { return (pw.size() + dw.size()) * sizeof(float); }
};

// The packed weights of the pairs this thread ran, by their buffers'
// identities: packed again only when a buffer's writes changed, as
// oneDNN's reordered weights are kept (onednn.cc's WeightCache), not on
// every run. Past 256 MiB it starts over.
class PackedCache {
 public:
  const PackedWeights& get(const PointwiseDepthwise& p) {
    const Key key{p.pw_weights.buffer, p.pw_weights.offset, p.dw_weights.buffer, p.dw_weights.offset,
                  p.expand.c * p.expand.o, p.depthwise.kh * p.depthwise.kw};
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
    if (it == entries_.end()) {
      if (bytes_ > (std::size_t(256) << 20)) clear();
      it = entries_.insert(entries_.end(), Entry{key, ~std::uint64_t(0), ~std::uint64_t(0), {}});
    }
    if (it->pw_writes != p.pw_weights.writes || it->dw_writes != p.dw_weights.writes) {
      bytes_ -= it->weights.bytes();
      it->pw_writes = it->dw_writes = ~std::uint64_t(0);  // until the pack is done
      it->weights.pack(p);
      bytes_ += it->weights.bytes();
      it->pw_writes = p.pw_weights.writes;
      it->dw_writes = p.dw_weights.writes;
    }
    return it->weights;
  }

 private:
  struct Key {
    std::uint64_t pw_buffer, pw_offset, dw_buffer, dw_offset;
    std::int64_t pw_size, taps;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    std::uint64_t pw_writes, dw_writes;
    PackedWeights weights;
  };
  void clear() {
    entries_.clear();
    bytes_ = 0;
  }
  std::list<Entry> entries_;
  std::size_t bytes_ = 0;
};

// p's weights packed: from this thread's cache where both buffers are known.
const PackedWeights& packed_weights(const PointwiseDepthwise& p, PackedWeights& local) {
  if (p.pw_weights.buffer == 0 || p.dw_weights.buffer == 0) {
    local.pack(p);
    return local;
  }
  thread_local PackedCache cache;
  return cache.get(p);
}

// Output rows [r0, r1) of image n, one block of channels at a time, so that
// the depthwise rows read a ring of kh x w x at most 64 floats (MobileNetV2's
// 112-wide block, 48 channels a block: 64 KiB, near a Zen 5 core's 48 KiB L1d,
// where all 96 channels' rows took 129 KiB). The expanded rows live in
// `ring`: input row ih in slot ih mod kh, computed when first read.
KILN_TARGET_AVX512 void band(const PointwiseDepthwise& p, const PackedWeights& k, std::int64_t n, std::int64_t r0,
                             std::int64_t r1, float* ring) {
  const Conv2dGeometry& g = p.depthwise;
  const std::int64_t c = p.expand.c;
  const float* x = p.x + n * g.h * g.w * c;
  float* out = p.out + n * g.ho * g.wo * g.c;
  for (std::int64_t b = 0, j0 = 0, vectors = 0; b < channel_blocks(g.c); ++b, j0 += 16 * vectors) {
    vectors = block_vectors(g.c, b);
    const std::int64_t row_size = g.w * 16 * vectors;
    std::int64_t done = -1;  // the last input row expanded into the ring
    for (std::int64_t r = r0; r < r1; ++r) {
      TapRows t{};
      for (std::int64_t i = 0; i < g.kh; ++i) {
        const std::int64_t ih = r * g.sh - g.pt + i;
        if (ih < 0 || ih >= g.h) continue;
        float* slot = ring + (ih % g.kh) * row_size;
        if (ih > done) {
          expand_pixels(p, k.pw.data(), x + ih * g.w * c, g.w, j0, int(vectors), slot);
          done = ih;
        }
        t.rows[i] = slot;
      }
      depthwise_row(p, k.dw.data(), t, j0, int(vectors), out + r * g.wo * g.c);
    }
  }
}

}  // namespace

bool pointwise_depthwise_fits(const Conv2dGeometry& expand, const Conv2dGeometry& dw) {
  const bool pointwise = expand.kh == 1 && expand.kw == 1 && expand.groups == 1 && expand.ho == expand.h &&
                         expand.wo == expand.w;
  return cpu_simd_level() == SimdLevel::Avx512 && pointwise && expand.o % 16 == 0 && expand.o > 0 &&
         dw.kh <= kMaxTaps &&
         dw.kw <= kMaxTaps && dw.dh == 1 && dw.dw == 1 && dw.groups == dw.c && dw.o == dw.c && dw.c == expand.o &&
         dw.h == expand.h && dw.w == expand.w;
}

void pointwise_depthwise_nhwc(const PointwiseDepthwise& p) {
  PackedWeights local;
  const PackedWeights& k = packed_weights(p, local);
  const Conv2dGeometry& g = p.depthwise;
  // Bands only where the images alone would leave a thread idle; the
  // bits do not depend on the split (a band's first rows are expanded
  // again, the same way).
  const int threads = intra_op_threads();
  const std::int64_t bands =
      threads > 1 && g.n < 2 * threads ? std::min(g.ho, (2 * threads + g.n - 1) / g.n) : std::int64_t{1};
  parallel_for(g.n * bands, 1, [&](std::int64_t b0, std::int64_t b1) {
    thread_local std::vector<float> ring;
    ring.resize(std::size_t(g.kh * g.w * 64));
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t n = b / bands, part = b % bands;
      band(p, k, n, part * g.ho / bands, (part + 1) * g.ho / bands, ring.data());
    }
  });
}

#else

bool pointwise_depthwise_fits(const Conv2dGeometry&, const Conv2dGeometry&) { return false; }
void pointwise_depthwise_nhwc(const PointwiseDepthwise&) {}

#endif

}  // namespace kiln::cpu
