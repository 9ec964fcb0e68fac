// The windows of max_pool2d / avg_pool2d over one [H, W] plane: the
// geometry (pool_ops.h's InferMeta fills it), each output's window clipped
// to the input, the window's first maximum and avg_pool2d's divisor; and
// adaptive_avg_pool2d's windows. Free of
// the IR, so the CPU and CUDA kernels expand the same functions
// (KILN_HOST_DEVICE) and agree element for element; the window functions
// compute in the geometry's index type (PoolIndex).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/support/host_device.h"

namespace kiln {

struct Pool2dGeometry {
  std::int64_t n = 0, c = 0, h = 0, w = 0, ho = 0, wo = 0;
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pb = 0, pl = 0, pr = 0;
};

// The index type of a pool geometry G: Pool2dGeometry's int64_t, or the
// narrower type a CUDA kernel copies the same fields to where its planes
// allow. The functions below take G's fields and compute in it.
template <typename G>
using PoolIndex = std::remove_cvref_t<decltype(G::h)>;

// Window [hs, he) × [ws, we) of an output, clipped to the input.
template <typename I>
struct BasicPoolWindow {
  I hs, he, ws, we;
};
using PoolWindow = BasicPoolWindow<std::int64_t>;

// Output (oh, ow)'s window.
template <typename G>
KILN_HOST_DEVICE inline BasicPoolWindow<PoolIndex<G>> pool_window(const G& g, PoolIndex<G> oh,
                                                                  PoolIndex<G> ow) {
  BasicPoolWindow<PoolIndex<G>> r;
  r.hs = oh * g.sh - g.pt;
  r.ws = ow * g.sw - g.pl;
  r.he = r.hs + g.kh < g.h ? r.hs + g.kh : g.h;
  r.we = r.ws + g.kw < g.w ? r.ws + g.kw : g.w;
  r.hs = r.hs > 0 ? r.hs : 0;
  r.ws = r.ws > 0 ? r.ws : 0;
  return r;
}

// Whether v takes over as a window's maximum from m: greater, or the first
// NaN (NaN wins, and the first one stays).
template <typename T>
KILN_HOST_DEVICE inline bool pool_max_replaces(const T& v, const T& m) {
  return v > m || (v != v && m == m);
}

// Index (in the plane x) of window r's first maximum, row-major; NaN wins.
template <typename T, typename G>
KILN_HOST_DEVICE inline PoolIndex<G> pool_argmax(const T* x, const G& g,
                                                 const BasicPoolWindow<PoolIndex<G>>& r) {
  PoolIndex<G> best = r.hs * g.w + r.ws;
  T m = x[best];
  for (PoolIndex<G> ih = r.hs; ih < r.he; ++ih)
    for (PoolIndex<G> iw = r.ws; iw < r.we; ++iw) {
      const T v = x[ih * g.w + iw];
      if (pool_max_replaces(v, m)) {
        m = v;
        best = ih * g.w + iw;
      }
    }
  return best;
}

// avg_pool2d's divisor along one axis for output o: the window of k
// starting at o·s − p0, clipped to the input of n (exclusive) or to the
// input padded by p1 at its end (its start left unclipped).
KILN_HOST_DEVICE inline std::int64_t avg_pool_extent(std::int64_t o, std::int64_t k, std::int64_t s,
                                                     std::int64_t p0, std::int64_t p1, std::int64_t n,
                                                     bool exclusive) {
  const std::int64_t start = o * s - p0;
  const std::int64_t bound = exclusive ? n : n + p1;
  const std::int64_t end = start + k < bound ? start + k : bound;
  return end - (exclusive && start < 0 ? 0 : start);
}

// The divisor of avg_pool2d's window at (oh, ow): its input elements
// (exclusive) or its extent clipped to the padded input — the product of
// its extents along H and W.
KILN_HOST_DEVICE inline std::int64_t avg_pool_count(const Pool2dGeometry& g, std::int64_t oh,
                                                    std::int64_t ow, bool exclusive) {
  return avg_pool_extent(oh, g.kh, g.sh, g.pt, g.pb, g.h, exclusive) *
         avg_pool_extent(ow, g.kw, g.sw, g.pl, g.pr, g.w, exclusive);
}

// The outputs whose windows hold input row (or column) i: [first, last],
// empty when first > last. k, s, p0: the window, stride and leading padding
// along that axis; out: the output extent. I: first's and last's type.
template <typename I>
KILN_HOST_DEVICE inline void pool_outputs_covering(std::type_identity_t<I> i, std::type_identity_t<I> k,
                                                   std::type_identity_t<I> s, std::type_identity_t<I> p0,
                                                   std::type_identity_t<I> out, I& first, I& last) {
  const I hi = i + p0;      // o·s <= hi
  const I lo = hi - k + 1;  // o·s >= lo
  first = lo <= 0 ? I(0) : (lo + s - 1) / s;
  last = hi / s;
  if (last > out - 1) last = out - 1;
}

// adaptive_avg_pool2d's window along one axis: output i of `out` over an
// input of `in` reads [floor(i·in / out), ceil((i + 1)·in / out)).
KILN_HOST_DEVICE inline std::int64_t adaptive_start(std::int64_t i, std::int64_t in, std::int64_t out) {
  return (i * in) / out;
}
KILN_HOST_DEVICE inline std::int64_t adaptive_end(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}
// The outputs whose adaptive windows hold input index i: [first, last].
KILN_HOST_DEVICE inline void adaptive_outputs_covering(std::int64_t i, std::int64_t in, std::int64_t out,
                                                       std::int64_t& first, std::int64_t& last) {
  first = (i * out) / in;
  last = ((i + 1) * out + in - 1) / in - 1;
  if (last > out - 1) last = out - 1;
}

}  // namespace kiln
