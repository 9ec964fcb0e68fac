// CUDA kernels that reduce rows: sum / mean / max / prod over axes and their
// gradients, softmax / log_softmax along any axis, softmax_with_cross_entropy,
// layer_norm / rms_norm and batch_norm (with fused_batch_norm's relu / relu6
// on y; x, y, dy and dx also bf16 / f16 beside f32 parameters, widened
// where read and rounded once where written), each with its gradient. A row
// (an output element of a reduction, a softmax or norm row) gets `Lanes` threads — one, a warp, or the
// whole block when the row is long — that each accumulate a strided part and
// combine through warp shuffles (and shared memory across the block's
// warps); softmax along an inner axis gives each column one thread, so
// neighbouring threads read neighbouring addresses. Launched by reduce.cc
// (launch.h). batch_norm reduces each channel in chunks, a block each, and
// then the chunks' partials (its section below).
//
// They compute what the CPU kernels compute (f32 sums of a reduction in
// f64, as there), in another summation order: equal to the CPU's up to
// rounding for sums, means, products and the norms, exactly for max and for
// integers; exp / log are CUDA's (the CPU's f32 softmax uses its own
// fast_exp, within 2 ulp of exp).
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "grid_stride.cuh"
#include "kiln/dialect/unary_math.h"
#include "launch.h"
#include "widen.cuh"

namespace kiln::cuda {
namespace {

constexpr std::int64_t kLongRow = 2048;  // rows at least this long get a whole block

template <typename T>
struct Plus {
  using Acc = T;
  __device__ static constexpr T init() { return T(0); }
  __device__ static T combine(T a, T b) { return a + b; }
};
template <typename T>
struct SumR : Plus<std::conditional_t<std::is_floating_point_v<T>, double, T>> {};
template <typename T>
struct MaxR {  // NaN wins
  using Acc = T;
  __device__ static constexpr T init() {
    if constexpr (std::is_floating_point_v<T>)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  __device__ static T combine(T a, T b) { return (b > a || b != b) ? b : a; }
};
template <typename T>
struct ProdR {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  __device__ static constexpr Acc init() { return Acc(1); }
  __device__ static Acc combine(Acc a, Acc b) { return a * b; }
};
template <typename T>
struct TimesR {  // prod_grad's product of non-zero elements: in T, as the CPU's
  using Acc = T;
  __device__ static constexpr T init() { return T(1); }
  __device__ static T combine(T a, T b) { return a * b; }
};
template <typename T>
struct Greater {  // softmax's row max (NaN is left to the exp)
  using Acc = T;
  __device__ static T combine(T a, T b) { return b > a ? b : a; }
};

// R::combine over the Lanes consecutive threads of a row; every lane gets
// the result. Lanes == kThreads: all threads of the block must call it.
template <int Lanes, typename R>
__device__ typename R::Acc lanes_combine(typename R::Acc v) {
  using Acc = typename R::Acc;
  if constexpr (Lanes == 1) {
    return v;
  } else {
    for (int o = 16; o > 0; o >>= 1) v = R::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
    if constexpr (Lanes == 32) {
      return v;
    } else {
      static_assert(Lanes == kThreads);
      __shared__ Acc part[kThreads / 32];
      if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
      __syncthreads();
      Acc r = part[0];
      for (int w = 1; w < kThreads / 32; ++w) r = R::combine(r, part[w]);
      __syncthreads();  // part is reused by the next call
      return r;
    }
  }
}

// The rows of this thread: Lanes threads per row, rows strided over the grid.
template <int Lanes>
__device__ std::int64_t first_row() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x / Lanes) + threadIdx.x / Lanes;
}
template <int Lanes>
__device__ std::int64_t row_step() {
  return static_cast<std::int64_t>(gridDim.x) * (blockDim.x / Lanes);
}
template <int Lanes>
__device__ int lane() {
  return static_cast<int>(threadIdx.x % Lanes);
}

unsigned row_blocks(std::int64_t rows, int lanes) {
  const std::int64_t per_block = kThreads / lanes;
  return blocks_for(((rows + per_block - 1) / per_block) * kThreads);
}

// Threads per row for rows of `len` elements.
int lanes_for(std::int64_t len) { return len >= kLongRow ? kThreads : len < 8 ? 1 : 32; }

// ---- reductions ----

__device__ std::int64_t kept_offset(const ReduceWalk& w, std::int64_t o) {
  std::int64_t off = 0;
  for (int d = w.kept_rank - 1; d >= 0; --d) {
    off += (o % w.kept_dims[d]) * w.kept_strides[d];
    o /= w.kept_dims[d];
  }
  return off;
}
__device__ std::int64_t red_offset(const ReduceWalk& w, std::int64_t k) {
  if (w.red_rank == 1) return k * w.red_strides[0];  // k < red_dims[0]: no division
  std::int64_t off = 0;
  for (int d = w.red_rank - 1; d >= 0; --d) {
    off += (k % w.red_dims[d]) * w.red_strides[d];
    k /= w.red_dims[d];
  }
  return off;
}
__device__ std::int64_t out_index(const ReduceMap& m, std::int64_t i) {
  std::int64_t o = 0;
  for (int d = m.rank - 1; d >= 0; --d) {
    o += (i % m.dims[d]) * m.out_strides[d];
    i /= m.dims[d];
  }
  return o;
}

// Loads: the value a reduction combines for input offset `off` of output o.
template <typename T, typename Acc>
struct LoadX {
  const T* x;
  __device__ Acc operator()(std::int64_t off, std::int64_t) const {
    return static_cast<Acc>(x[off]);
  }
};
template <typename T>
struct LoadTie {  // max_grad: 1 where x equals its group's max
  const T* x;
  const T* m;
  __device__ std::int64_t operator()(std::int64_t off, std::int64_t o) const {
    return x[off] == m[o] ? 1 : 0;
  }
};
template <typename T>
struct LoadNonzero {  // prod_grad: x, with 1 for zeros
  const T* x;
  __device__ T operator()(std::int64_t off, std::int64_t) const {
    return x[off] == T(0) ? T(1) : x[off];
  }
};
template <typename T>
struct LoadZero {  // prod_grad: 1 where x is 0
  const T* x;
  __device__ std::int64_t operator()(std::int64_t off, std::int64_t) const {
    return x[off] == T(0);
  }
};
// Stores: out[o] = the combined value (mean: divided by the count, in T).
template <typename T, typename Acc>
struct Store {
  T* out;
  std::int64_t divisor;  // -1: none; mean over no elements: 0 / 0, NaN as on the CPU
  __device__ void operator()(std::int64_t o, Acc v) const {
    out[o] = divisor >= 0 ? static_cast<T>(v) / static_cast<T>(divisor) : static_cast<T>(v);
  }
};

template <typename R, int Lanes, typename Load, typename St>
__global__ void reduce_rows(ReduceWalk w, Load load, St store) {
  for (std::int64_t o = first_row<Lanes>(); o < w.outputs; o += row_step<Lanes>()) {
    const std::int64_t base = kept_offset(w, o);
    typename R::Acc acc = R::init();
    for (std::int64_t k = lane<Lanes>(); k < w.count; k += Lanes)
      acc = R::combine(acc, load(base + red_offset(w, k), o));
    acc = lanes_combine<Lanes, R>(acc);
    if (lane<Lanes>() == 0) store(o, acc);
  }
}

template <typename R, typename Load, typename St>
void reduce_with(const ReduceWalk& w, Load load, St store, cudaStream_t s) {
  const int lanes = lanes_for(w.count);
  const unsigned blocks = row_blocks(w.outputs, lanes);
  if (lanes == 1)
    reduce_rows<R, 1><<<blocks, kThreads, 0, s>>>(w, load, store);
  else if (lanes == 32)
    reduce_rows<R, 32><<<blocks, kThreads, 0, s>>>(w, load, store);
  else
    reduce_rows<R, kThreads><<<blocks, kThreads, 0, s>>>(w, load, store);
}

template <typename T>
__global__ void sum_grad(const T* d, T* dx, std::int64_t n, ReduceMap m, T scale, bool scaled) {
  KILN_GRID_STRIDE(i, n) {
    const T v = d[out_index(m, i)];
    dx[i] = scaled ? v * scale : v;
  }
}

template <typename T>
__global__ void max_grad(const T* x, const T* mx, const T* d, const std::int64_t* ties, T* dx,
                         std::int64_t n, ReduceMap m) {
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t o = out_index(m, i);
    dx[i] = x[i] == mx[o] ? d[o] / static_cast<T>(ties[o]) : T(0);
  }
}

template <typename T>
__global__ void prod_grad(const T* x, const T* d, const T* nonzero, const std::int64_t* zeros,
                          T* dx, std::int64_t n, ReduceMap m) {
  KILN_GRID_STRIDE(i, n) {
    const std::int64_t o = out_index(m, i);
    T others;
    if (zeros[o] == 0)
      others = nonzero[o] / x[i];
    else if (zeros[o] == 1 && x[i] == T(0))
      others = nonzero[o];
    else
      others = T(0);
    dx[i] = d[o] * others;
  }
}

// ---- softmax, cross-entropy ----

template <typename T, bool Log, int Lanes>
__global__ void softmax_rows(const T* x, T* y, std::int64_t rows, std::int64_t c,
                             std::int64_t inner) {
  for (std::int64_t r = first_row<Lanes>(); r < rows; r += row_step<Lanes>()) {
    const std::int64_t base = (r / inner) * c * inner + r % inner;
    const T* xr = x + base;
    T* yr = y + base;
    T m = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes)
      m = Greater<T>::combine(m, xr[j * inner]);
    m = lanes_combine<Lanes, Greater<T>>(m);
    if (m == -std::numeric_limits<T>::infinity()) m = 0;  // a row of -inf: avoid (-inf) - (-inf)
    T s = 0;
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) s += std::exp(xr[j * inner] - m);
    s = lanes_combine<Lanes, Plus<T>>(s);
    if constexpr (Log) {
      const T lse = m + std::log(s);
      for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) yr[j * inner] = xr[j * inner] - lse;
    } else {
      const T inv = T(1) / s;
      for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes)
        yr[j * inner] = std::exp(xr[j * inner] - m) * inv;
    }
  }
}

template <typename T, bool Log, int Lanes>
__global__ void softmax_grad_rows(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t c,
                                  std::int64_t inner) {
  for (std::int64_t r = first_row<Lanes>(); r < rows; r += row_step<Lanes>()) {
    const std::int64_t base = (r / inner) * c * inner + r % inner;
    T acc = 0;
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) {
      const std::int64_t i = base + j * inner;
      acc += Log ? dy[i] : dy[i] * y[i];  // Σ dout or Σ dout · out
    }
    acc = lanes_combine<Lanes, Plus<T>>(acc);
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) {
      const std::int64_t i = base + j * inner;
      dx[i] = Log ? dy[i] - std::exp(y[i]) * acc : y[i] * (dy[i] - acc);
    }
  }
}

template <typename T, typename L, int Lanes>
__global__ void cross_entropy_rows(const T* x, const L* label, T* sm, T* loss, std::int64_t n,
                                   std::int64_t c, std::int64_t ignore) {
  for (std::int64_t r = first_row<Lanes>(); r < n; r += row_step<Lanes>()) {
    const T* xr = x + r * c;
    T* sr = sm + r * c;
    T m = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) m = Greater<T>::combine(m, xr[j]);
    m = lanes_combine<Lanes, Greater<T>>(m);
    if (m == -std::numeric_limits<T>::infinity()) m = 0;
    T s = 0;
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) s += std::exp(xr[j] - m);
    s = lanes_combine<Lanes, Plus<T>>(s);
    const T inv = T(1) / s;
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) sr[j] = std::exp(xr[j] - m) * inv;
    if (lane<Lanes>() == 0) {
      const std::int64_t l = static_cast<std::int64_t>(label[r]);
      // -log softmax[l] = log Σ exp(x - m) - (x[l] - m)
      loss[r] = l == ignore ? T(0) : std::log(s) - (xr[l] - m);
    }
  }
}

template <typename T, typename L>
__global__ void cross_entropy_grad(const T* sm, const L* label, const T* dloss, T* dx,
                                   std::int64_t n, std::int64_t c, std::int64_t ignore) {
  KILN_GRID_STRIDE(i, n * c) {
    const std::int64_t r = i / c, j = i % c;
    const std::int64_t l = static_cast<std::int64_t>(label[r]);
    if (l == ignore) {
      dx[i] = T(0);
    } else {
      const T g = dloss[r];
      T v = g * sm[i];
      if (j == l) v -= g;
      dx[i] = v;
    }
  }
}

// One read of each row: every lane keeps a running max m and the sum of
// exp(x - m) over its elements, rescaled when m grows (the online softmax);
// the lanes' sums are then rescaled to the row's max and added.
template <typename S, typename L, int Lanes>
__global__ void cross_entropy_lse_rows(const S* x, const L* label, Widened<S>* loss,
                                       Widened<S>* lse, std::int64_t n, std::int64_t c,
                                       std::int64_t ignore) {
  using T = Widened<S>;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = first_row<Lanes>(); r < n; r += row_step<Lanes>()) {
    const S* xr = x + r * c;
    T m = kNegInf, s = 0;
    for (std::int64_t j = lane<Lanes>(); j < c; j += Lanes) {
      const T v = widened(xr[j]);
      if (v > m) {
        s = s * std::exp(m - v) + T(1);
        m = v;
      } else if (v != kNegInf) {
        s += std::exp(v - m);
      }
    }
    T base = lanes_combine<Lanes, Greater<T>>(m);
    if (base == kNegInf) base = 0;  // a row of -inf: avoid (-inf) - (-inf)
    s = m == kNegInf ? T(0) : s * std::exp(m - base);
    s = lanes_combine<Lanes, Plus<T>>(s);
    if (lane<Lanes>() == 0) {
      const T log_s = std::log(s);
      lse[r] = base + log_s;
      const std::int64_t l = static_cast<std::int64_t>(label[r]);
      loss[r] = l == ignore ? T(0) : log_s - (widened(xr[l]) - base);
    }
  }
}

// dx may be x (cross_entropy_grad_): each element is read, then written,
// by one thread.
template <typename S, typename L>
__global__ void cross_entropy_lse_grad(const S* x, const Widened<S>* lse, const L* label,
                                       const Widened<S>* dloss, S* dx, std::int64_t n,
                                       std::int64_t c, std::int64_t ignore) {
  using T = Widened<S>;
  KILN_GRID_STRIDE(i, n * c) {
    const std::int64_t r = i / c, j = i % c;
    const std::int64_t l = static_cast<std::int64_t>(label[r]);
    if (l == ignore) {
      dx[i] = narrowed<S>(T(0));
    } else {
      const T g = dloss[r];
      T v = g * std::exp(widened(x[i]) - lse[r]);
      if (j == l) v -= g;
      dx[i] = narrowed<S>(v);
    }
  }
}

// ---- layer_norm / rms_norm ----

template <typename T, bool Rms, int Lanes>
__global__ void norm_rows(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                          std::int64_t m, std::int64_t n, T eps, T inv_n) {
  for (std::int64_t r = first_row<Lanes>(); r < m; r += row_step<Lanes>()) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T mu = 0;
    if constexpr (!Rms) {
      T s = 0;
      for (std::int64_t j = lane<Lanes>(); j < n; j += Lanes) s += xr[j];
      mu = lanes_combine<Lanes, Plus<T>>(s) * inv_n;
    }
    T ss = 0;
    for (std::int64_t j = lane<Lanes>(); j < n; j += Lanes) ss += (xr[j] - mu) * (xr[j] - mu);
    const T rs = T(1) / std::sqrt(lanes_combine<Lanes, Plus<T>>(ss) * inv_n + eps);
    for (std::int64_t j = lane<Lanes>(); j < n; j += Lanes)
      yr[j] = Rms ? xr[j] * rs * w[j] : (xr[j] - mu) * rs * w[j] + b[j];
    if (lane<Lanes>() == 0) {
      if constexpr (!Rms) mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)), g = dy · w (rms_norm: no mean(g)).
template <typename T, bool Rms, int Lanes>
__global__ void norm_grad_rows(const T* x, const T* dy, const T* w, const T* mean, const T* rstd,
                               T* dx, std::int64_t m, std::int64_t n, T inv_n) {
  for (std::int64_t r = first_row<Lanes>(); r < m; r += row_step<Lanes>()) {
    const T* xr = x + r * n;
    const T* dyr = dy + r * n;
    const T mu = Rms ? T(0) : mean[r], rs = rstd[r];
    T sg = 0, sgx = 0;
    for (std::int64_t j = lane<Lanes>(); j < n; j += Lanes) {
      const T g = dyr[j] * w[j];
      sg += g;
      sgx += g * (xr[j] - mu);
    }
    sg = lanes_combine<Lanes, Plus<T>>(sg);
    sgx = lanes_combine<Lanes, Plus<T>>(sgx);
    const T a = Rms ? T(0) : sg * inv_n;
    const T c = sgx * rs * inv_n;
    for (std::int64_t j = lane<Lanes>(); j < n; j += Lanes)
      dx[r * n + j] = rs * (dyr[j] * w[j] - a - (xr[j] - mu) * rs * c);
  }
}

// dw[j] = Σ_rows dy · x̂ and db[j] = Σ_rows dy in two steps, so that a
// tall [m, n] (4096 × 768 in a GPT) keeps every SM busy: first each block
// sums one chunk of rows for 32 neighbouring columns (threadIdx.x a column,
// so a warp reads 32 neighbouring addresses; threadIdx.y one of 8 row
// strides, combined through shared memory in a fixed order), then one
// thread per column adds the chunks' partials in order. Deterministic.
constexpr int kNormColumns = 32, kNormRowStrides = 8;
constexpr std::int64_t kNormChunkRows = 32, kNormMaxChunks = 1024;

// Each of the K sums v[k] of column threadIdx.x over the block's
// kNormRowStrides row strides (threadIdx.y), added in stride order through
// shared memory; the totals are valid in row stride 0 only. Every thread
// of the block must call it.
template <typename T, int K>
__device__ void add_row_strides(T (&v)[K]) {
  __shared__ T part[K][kNormRowStrides][kNormColumns + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int k = 0; k < K; ++k) part[k][ty][tx] = v[k];
  __syncthreads();
  if (ty != 0) return;
  for (int k = 0; k < K; ++k) {
    T t = 0;
    for (int r = 0; r < kNormRowStrides; ++r) t += part[k][r][tx];
    v[k] = t;
  }
}

template <typename T, bool Rms>
__global__ void norm_grad_partials(const T* x, const T* dy, const T* mean, const T* rstd, T* pw, T* pb,
                                   std::int64_t m, std::int64_t n, std::int64_t rows_per_chunk) {
  const int ty = threadIdx.y;
  const std::int64_t j = std::int64_t(blockIdx.x) * kNormColumns + threadIdx.x;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = r0 + rows_per_chunk < m ? r0 + rows_per_chunk : m;
  T sums[2] = {0, 0};  // dy · x̂, dy
  if (j < n)
    for (std::int64_t r = r0 + ty; r < r1; r += kNormRowStrides) {
      const std::int64_t i = r * n + j;
      sums[0] += dy[i] * ((x[i] - (Rms ? T(0) : mean[r])) * rstd[r]);
      if constexpr (!Rms) sums[1] += dy[i];
    }
  add_row_strides(sums);
  if (ty != 0 || j >= n) return;
  pw[std::int64_t(blockIdx.y) * n + j] = sums[0];
  if constexpr (!Rms) pb[std::int64_t(blockIdx.y) * n + j] = sums[1];
}

template <typename T, bool Rms>
__global__ void norm_grad_finish(const T* pw, const T* pb, T* dw, T* db, std::int64_t chunks, std::int64_t n) {
  KILN_GRID_STRIDE(j, n) {
    T sw = 0, sb = 0;
    for (std::int64_t c = 0; c < chunks; ++c) {
      sw += pw[c * n + j];
      if constexpr (!Rms) sb += pb[c * n + j];
    }
    dw[j] = sw;
    if constexpr (!Rms) db[j] = sb;
  }
}

template <typename T, bool Rms>
void launch_norm_grad_columns(const T* x, const T* dy, const T* mean, const T* rstd, T* dw, T* db, T* scratch,
                              std::int64_t m, std::int64_t n, cudaStream_t s) {
  const std::int64_t chunks = norm_grad_chunks(m);
  T* pw = scratch;
  T* pb = scratch + chunks * n;
  if (chunks > 0) {
    const std::int64_t rows_per_chunk = (m + chunks - 1) / chunks;
    const dim3 grid(static_cast<unsigned>((n + kNormColumns - 1) / kNormColumns), static_cast<unsigned>(chunks));
    norm_grad_partials<T, Rms>
        <<<grid, dim3(kNormColumns, kNormRowStrides), 0, s>>>(x, dy, mean, rstd, pw, pb, m, n, rows_per_chunk);
  }
  norm_grad_finish<T, Rms><<<blocks_for(n), kThreads, 0, s>>>(pw, pb, dw, db, chunks, n);
}

// f32 rows of at most 1024 columns held in registers, a warp per row: lane
// l holds V neighbouring columns at each of C slots, slot c's first being
// column V · (l + 32c) (one float4 load or store per slot when V is 4,
// which needs n a multiple of 4 and 16-byte aligned rows). V = 1 sums in
// the strided kernels' order (norm_rows, the old backward), so gives their
// bits; V = 4 moves the same bytes in a quarter of the instructions.
template <int V>
struct HeldCols {
  float v[V];
};

// Columns j .. j + V - 1 of row (n a multiple of V); `fill` past n.
template <int V>
__device__ HeldCols<V> load_cols(const float* row, int j, int n, float fill) {
  if (j >= n) {
    HeldCols<V> c;
#pragma unroll
    for (int e = 0; e < V; ++e) c.v[e] = fill;
    return c;
  }
  if constexpr (V == 4) {
    const float4 q = *reinterpret_cast<const float4*>(row + j);
    return {{q.x, q.y, q.z, q.w}};
  } else {
    return {{row[j]}};
  }
}

template <int V>
__device__ void store_cols(float* row, int j, int n, const HeldCols<V>& c) {
  if (j >= n) return;
  if constexpr (V == 4)
    *reinterpret_cast<float4*>(row + j) = make_float4(c.v[0], c.v[1], c.v[2], c.v[3]);
  else
    row[j] = c.v[0];
}

// The forward on held rows: x read once, mean and variance from registers.
template <bool Rms, int V, int C>
__global__ void __launch_bounds__(kThreads)
    norm_rows_held(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                   std::int64_t m, int n, float eps, float inv_n) {
  const int ln = lane<32>();
  for (std::int64_t r = first_row<32>(); r < m; r += row_step<32>()) {
    HeldCols<V> v[C];
    float s = 0.f, ss = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      v[c] = load_cols<V>(x + r * n, V * (ln + 32 * c), n, 0.f);
      for (int e = 0; e < V; ++e) s += v[c].v[e];
    }
    const float mu = Rms ? 0.f : lanes_combine<32, Plus<float>>(s) * inv_n;
#pragma unroll
    for (int c = 0; c < C; ++c)
      for (int e = 0; e < V && V * (ln + 32 * c) < n; ++e) ss += (v[c].v[e] - mu) * (v[c].v[e] - mu);
    const float rs = 1.f / std::sqrt(lanes_combine<32, Plus<float>>(ss) * inv_n + eps);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int j = V * (ln + 32 * c);
      const HeldCols<V> wv = load_cols<V>(w, j, n, 0.f);
      HeldCols<V> bv = {};
      if constexpr (!Rms) bv = load_cols<V>(b, j, n, 0.f);
      for (int e = 0; e < V; ++e) v[c].v[e] = Rms ? v[c].v[e] * rs * wv.v[e] : (v[c].v[e] - mu) * rs * wv.v[e] + bv.v[e];
      store_cols<V>(y + r * n, j, n, v[c]);
    }
    if (ln == 0) {
      if constexpr (!Rms) mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// The backward's row pass and the parameter gradients' partials in one read
// of x and dy: block b takes the rows of chunk b (warp k every
// kNormWarps-th row from the chunk's k-th), each lane adding dy · x̂ and dy
// for its columns; the warps then add their sums in warp order through
// shared memory into chunk b's partials (pw, pb: [chunks, n]).
// Deterministic.
constexpr int kNormWarps = kThreads / 32;

// Each warp's column sums aw and ab added in warp order into pw and pb
// (pb null: rms_norm).
template <int V, int C>
__device__ void store_chunk_partials(const HeldCols<V> (&aw)[C], const HeldCols<V> (&ab)[C], float* pw, float* pb,
                                     int n) {
  __shared__ float sw[32 * V * C], sb[32 * V * C];
  const int warp = threadIdx.x / 32, ln = threadIdx.x % 32;
  for (int k = 0; k < kNormWarps; ++k) {
    if (warp == k) {
#pragma unroll
      for (int c = 0; c < C; ++c)
        for (int e = 0; e < V; ++e) {
          const int i = V * (ln + 32 * c) + e;
          sw[i] = k == 0 ? aw[c].v[e] : sw[i] + aw[c].v[e];
          sb[i] = k == 0 ? ab[c].v[e] : sb[i] + ab[c].v[e];
        }
    }
    __syncthreads();
  }
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    pw[j] = sw[j];
    if (pb) pb[j] = sb[j];
  }
}

template <bool Rms, int V, int C>
__global__ void __launch_bounds__(kThreads)
    norm_grad_fused(const float* x, const float* dy, const float* w, const float* mean, const float* rstd,
                    float* dx, float* pw, float* pb, std::int64_t m, int n, std::int64_t rows_per_chunk,
                    float inv_n) {
  const int ln = threadIdx.x % 32;
  HeldCols<V> aw[C] = {}, ab[C] = {};
  const std::int64_t r0 = std::int64_t(blockIdx.x) * rows_per_chunk;
  const std::int64_t r1 = r0 + rows_per_chunk < m ? r0 + rows_per_chunk : m;
  for (std::int64_t r = r0 + threadIdx.x / 32; r < r1; r += kNormWarps) {
    const float mu = Rms ? 0.f : mean[r], rs = rstd[r];
    HeldCols<V> xc[C], g[C];  // x - mean, dy
    float sg = 0.f, sgx = 0.f;  // the row's sums
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int j = V * (ln + 32 * c);
      const HeldCols<V> wv = load_cols<V>(w, j, n, 0.f);
      g[c] = load_cols<V>(dy + r * n, j, n, 0.f);
      xc[c] = load_cols<V>(x + r * n, j, n, mu);
      for (int e = 0; e < V; ++e) {
        xc[c].v[e] -= mu;
        sg += g[c].v[e] * wv.v[e];
        sgx += g[c].v[e] * wv.v[e] * xc[c].v[e];
      }
    }
    sg = lanes_combine<32, Plus<float>>(sg);
    sgx = lanes_combine<32, Plus<float>>(sgx);
    const float a = Rms ? 0.f : sg * inv_n, k = sgx * rs * inv_n;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int j = V * (ln + 32 * c);
      const HeldCols<V> wv = load_cols<V>(w, j, n, 0.f);
      HeldCols<V> d;
      for (int e = 0; e < V; ++e) {
        d.v[e] = rs * (g[c].v[e] * wv.v[e] - a - xc[c].v[e] * rs * k);
        aw[c].v[e] += g[c].v[e] * (xc[c].v[e] * rs);
        ab[c].v[e] += g[c].v[e];
      }
      store_cols<V>(dx + r * n, j, n, d);
    }
  }
  store_chunk_partials<V, C>(aw, ab, pw + std::int64_t(blockIdx.x) * n, Rms ? nullptr : pb + std::int64_t(blockIdx.x) * n,
                             n);
}

// dw and db from the chunks' partials: a block per 32 columns, each of its
// 8 row strides adding every 8th chunk, then the strides added in order.
template <bool Rms>
__global__ void norm_grad_finish_columns(const float* pw, const float* pb, float* dw, float* db,
                                         std::int64_t chunks, std::int64_t n) {
  const int ty = threadIdx.y;
  const std::int64_t j = std::int64_t(blockIdx.x) * kNormColumns + threadIdx.x;
  float sums[2] = {0.f, 0.f};  // dw's, db's
  if (j < n)
    for (std::int64_t c = ty; c < chunks; c += kNormRowStrides) {
      sums[0] += pw[c * n + j];
      if constexpr (!Rms) sums[1] += pb[c * n + j];
    }
  add_row_strides(sums);
  if (ty != 0 || j >= n) return;
  dw[j] = sums[0];
  if constexpr (!Rms) db[j] = sums[1];
}

// Calls f.template operator()<V, C>() with the held-row layout for f32
// rows of n <= 1024 columns: V = 4 when n is a multiple of 4 and the rows
// are `aligned` to 16 bytes, else 1; C the fewest of four slot counts that
// cover n. False (f not called) past 1024 columns.
template <typename F>
bool with_held_rows(std::int64_t n, bool aligned, F&& f) {
  if (n > 1024) return false;
  if (aligned && n % 4 == 0) {
    if (n <= 256) f.template operator()<4, 2>();
    else if (n <= 512) f.template operator()<4, 4>();
    else if (n <= 768) f.template operator()<4, 6>();
    else f.template operator()<4, 8>();
  } else {
    if (n <= 256) f.template operator()<1, 8>();
    else if (n <= 512) f.template operator()<1, 16>();
    else if (n <= 768) f.template operator()<1, 24>();
    else f.template operator()<1, 32>();
  }
  return true;
}

// Whether every pointer is aligned to `bytes`.
bool all_aligned(std::size_t bytes, std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0) return false;
  return true;
}

// Whether f32 rows of n columns took the held-row forward (n <= 1024).
template <bool Rms>
bool norm_held_f32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                   std::int64_t m, std::int64_t n, float eps, float inv_n, cudaStream_t s) {
  return with_held_rows(n, all_aligned(16, {x, w, b, y}), [&]<int V, int C>() {
    norm_rows_held<Rms, V, C>
        <<<row_blocks(m, 32), kThreads, 0, s>>>(x, w, b, y, mean, rstd, m, static_cast<int>(n), eps, inv_n);
  });
}

// Whether f32 rows of n columns took the fused backward (n <= 1024, m > 0):
// one block per chunk of norm_grad_chunks(m), the partials in scratch, then
// the finish.
template <bool Rms>
bool norm_grad_fused_f32(const float* x, const float* dy, const float* w, const float* mean, const float* rstd,
                         float* dx, float* dw, float* db, float* scratch, std::int64_t m, std::int64_t n,
                         float inv_n, cudaStream_t s) {
  if (m <= 0) return false;
  const std::int64_t chunks = norm_grad_chunks(m);
  float *pw = scratch, *pb = scratch + chunks * n;
  const bool fused = with_held_rows(n, all_aligned(16, {x, dy, w, dx}), [&]<int V, int C>() {
    norm_grad_fused<Rms, V, C><<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(
        x, dy, w, mean, rstd, dx, pw, pb, m, static_cast<int>(n), (m + chunks - 1) / chunks, inv_n);
  });
  if (!fused) return false;
  const unsigned column_blocks = static_cast<unsigned>((n + kNormColumns - 1) / kNormColumns);
  norm_grad_finish_columns<Rms>
      <<<column_blocks, dim3(kNormColumns, kNormRowStrides), 0, s>>>(pw, pb, dw, db, chunks, n);
  return true;
}

// Sums over the rows of a row-major [rows, cols] (a bias gradient): the
// same two steps, partials in Acc (f64 for f32, as reduce_rows sums, and
// for bf16 / f16, read widened); `divisor` >= 0 divides as Store does
// (mean).
template <typename T, typename Acc>
__global__ void column_partials(const T* x, Acc* part, std::int64_t rows, std::int64_t cols,
                                std::int64_t rows_per_chunk) {
  const int ty = threadIdx.y;
  const std::int64_t j = std::int64_t(blockIdx.x) * kNormColumns + threadIdx.x;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  Acc sum[1] = {0};
  if (j < cols)
#pragma unroll 4
    for (std::int64_t r = r0 + ty; r < r1; r += kNormRowStrides) sum[0] += static_cast<Acc>(widened(x[r * cols + j]));
  add_row_strides(sum);
  if (ty != 0 || j >= cols) return;
  part[std::int64_t(blockIdx.y) * cols + j] = sum[0];
}

template <typename T, typename Acc>
__global__ void column_finish(const Acc* part, T* out, std::int64_t chunks, std::int64_t cols,
                              std::int64_t divisor) {
  KILN_GRID_STRIDE(j, cols) {
    Acc t = 0;
    for (std::int64_t c = 0; c < chunks; ++c) t += part[c * cols + j];
    using W = Widened<T>;  // bf16 / f16: rounded through f32, as half_via_f32 does
    const W v = divisor >= 0 ? static_cast<W>(t) / static_cast<W>(divisor) : static_cast<W>(t);
    out[j] = narrowed<T>(v);
  }
}

// ---- batch_norm: x as [N, C, S], per-channel sums over N and S ----
//
// A channel's N·S elements are cut into chunks of kBnChunk: block (q, c) of
// batch_norm_partials (batch_norm_grad_partials) reduces chunk q of channel
// c to a partial in scratch, each thread its elements in turn and then the
// block's threads in a fixed tree; batch_norm_finish (batch_norm_grad_finish)
// combines a channel's partials, again in a fixed order. No atomics: the
// same bits on every run, and the same for x in bf16 / f16 as in f32 (the
// order depends on S only). y and dx are then written group by group, the
// channel's constants read from scratch. x, y, dy, dx are stored as X (T,
// or bf16 / f16 with T f32): read through widened, written through
// narrowed<X>.

constexpr std::int64_t kBnChunk = 4096;                             // elements of a channel per block
constexpr int kBnPerThread = static_cast<int>(kBnChunk / kThreads);  // 16
constexpr std::int64_t kBnConstants = 5;  // per-channel constants in scratch, ahead of the partials

std::int64_t bn_chunks(std::int64_t count) { return (count + kBnChunk - 1) / kBnChunk; }

// n / d for 0 <= n < 2^63 and a d >= 1 fixed at launch, by a multiply-high
// and a shift (Granlund and Montgomery's round-up multiplier
// m = ⌊2^64 (2^shift - d) / d⌋ + 1, shift = ⌈log2 d⌉): no 64-bit division
// per element.
struct FastDiv {
  std::uint64_t m = 1;
  int shift = 0;
  __device__ std::int64_t operator()(std::int64_t n) const {
    const auto u = static_cast<std::uint64_t>(n);
    return static_cast<std::int64_t>((__umul64hi(u, m) + u) >> shift);
  }
};
FastDiv fast_div(std::int64_t d) {
  __extension__ typedef unsigned __int128 U;
  const auto ud = static_cast<std::uint64_t>(d);
  FastDiv f;
  while ((std::uint64_t{1} << f.shift) < ud) ++f.shift;
  f.m = static_cast<std::uint64_t>(((U{1} << 64) * ((U{1} << f.shift) - ud)) / ud + 1);
  return f;
}

// A channel's elements as the reductions walk them: element e (< N·S) of
// channel ch at (e / S)·C·S + ch·S + e % S.
struct BnShape {
  std::int64_t c, s, cs, count, chunks;  // cs = C·S, count = N·S
  FastDiv per_s;
  __device__ std::int64_t offset(std::int64_t ch, std::int64_t e) const {
    const std::int64_t n = per_s(e);
    return n * cs + ch * s + (e - n * s);
  }
};
BnShape bn_shape(std::int64_t n, std::int64_t c, std::int64_t s) {
  return {c, s, c * s, n * s, bn_chunks(n * s), fast_div(s > 0 ? s : 1)};
}
// Blocks (chunk, channel) of the partials kernels (each loops over what
// passes the grid's limits).
dim3 bn_grid(const BnShape& g) {
  return dim3(blocks_over(g.chunks), static_cast<unsigned>(g.c < 65535 ? g.c : 65535));
}

// Group i (V elements of one plane n·C + c, S a multiple of V)'s channel c.
struct BnPlanes {
  FastDiv per_plane, per_image;  // by S / V, by C
  std::int64_t c;
  __device__ std::int64_t channel(std::int64_t i) const {
    const std::int64_t p = per_plane(i);
    return p - per_image(p) * c;
  }
};
BnPlanes bn_planes(std::int64_t c, std::int64_t s, int v) { return {fast_div(s / v), fast_div(c), c}; }

// V elements read or written at once (packed: p aligned to the group).
template <typename X, int V>
struct alignas(sizeof(X) * V) BnPack {
  X v[V];
};
template <int V, typename T, typename X>
__device__ void bn_load(const X* p, bool packed, T (&out)[V]) {
  if (packed) {
    const BnPack<X, V> w = *reinterpret_cast<const BnPack<X, V>*>(p);
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = widened(w.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = widened(p[e]);
  }
}
template <int V, typename T, typename X>
__device__ void bn_store(X* p, const T (&in)[V]) {  // p aligned to the group
  BnPack<X, V> w;
#pragma unroll
  for (int e = 0; e < V; ++e) w.v[e] = narrowed<X>(in[e]);
  *reinterpret_cast<BnPack<X, V>*>(p) = w;
}

// Products and sums each rounded on its own, never contracted into an fma:
// the pre-activation is the same bits in the forward kernel that writes
// act(z) and in the gradient kernels that recompute z, and the CPU's.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }

// Channel c's pre-activation z = x · k + off, k = invstd · scale,
// off = bias - mean · k (the CPU kernels' affine_of).
template <typename T>
__device__ T bn_factor(T scale, T invstd) {
  return mul_rn(invstd, scale);
}
template <typename T>
__device__ T bn_offset(T bias, T mean, T k) {
  return sub_rn(bias, mul_rn(mean, k));
}
template <typename T>
__device__ T bn_pre(T x, T k, T off) {
  return add_rn(mul_rn(x, k), off);
}

// act(z), and what of d the activation's gradient passes at z, as the CPU
// kernels compute them: kiln.relu's (z > 0; its gradient reads relu(z) > 0)
// and kiln.clip's to [0, 6] (max first, then min; its gradient passes
// 0 <= z <= 6, both ends included). NaN: relu 0, relu6 NaN, both
// gradients 0.
template <BatchNormAct A, typename T>
__device__ T bn_activate(T z) {
  if constexpr (A == BatchNormAct::Relu) {
    return ReluMath::forward(z);
  } else if constexpr (A == BatchNormAct::Relu6) {
    const T v = z < T(0) ? T(0) : z;
    return v > T(6) ? T(6) : v;
  } else {
    return z;
  }
}
template <BatchNormAct A, typename T>
__device__ T bn_passed(T z, T d) {
  if constexpr (A == BatchNormAct::Relu) {
    return ReluMath::backward(ReluMath::forward(z), d);
  } else if constexpr (A == BatchNormAct::Relu6) {
    const T below = z >= T(0) ? d : T(0);
    return z <= T(6) ? below : T(0);
  } else {
    return d;
  }
}

// ---- batch_norm's forward kernels ----

// The forward's per-channel operands and results; k and off are y's factor
// and offset (scratch).
template <typename T>
struct BnStats {
  const T *scale, *bias;
  T *run_mean, *run_var, *smean, *sinv, *k, *off;
  T eps, mom;
};

// Chunk q of channel c: its mean and Σ (x - mean)², both from the values
// the block holds in registers (one read of x, V elements of a plane at a
// time), into part[2 (c · chunks + q)] and the next.
template <typename T, typename X, int V>
__global__ void batch_norm_partials(const X* x, T* part, BnShape g, bool packed) {
  constexpr int kGroups = kBnPerThread / V;
  for (std::int64_t c = blockIdx.y; c < g.c; c += gridDim.y)
    for (std::int64_t q = blockIdx.x; q < g.chunks; q += gridDim.x) {
      const std::int64_t e0 = q * kBnChunk, len = g.count - e0 < kBnChunk ? g.count - e0 : kBnChunk;
      T v[kGroups][V];
#pragma unroll
      for (int i = 0; i < kGroups; ++i) {
        const std::int64_t e = (std::int64_t(i) * kThreads + threadIdx.x) * V;
        if (e < len) bn_load<V>(x + g.offset(c, e0 + e), packed, v[i]);
      }
      T sum = T(0);
#pragma unroll
      for (int i = 0; i < kGroups; ++i)
        if ((std::int64_t(i) * kThreads + threadIdx.x) * V < len)
          for (int e = 0; e < V; ++e) sum += v[i][e];
      const T mean = lanes_combine<kThreads, Plus<T>>(sum) / static_cast<T>(len);
      T sq = T(0);
#pragma unroll
      for (int i = 0; i < kGroups; ++i)
        if ((std::int64_t(i) * kThreads + threadIdx.x) * V < len)
          for (int e = 0; e < V; ++e) sq += (v[i][e] - mean) * (v[i][e] - mean);
      sq = lanes_combine<kThreads, Plus<T>>(sq);
      if (threadIdx.x == 0) {
        part[2 * (c * g.chunks + q)] = mean;
        part[2 * (c * g.chunks + q) + 1] = sq;
      }
    }
}

// n elements' mean and Σ (x - mean)², and two such merged (Chan, Golub and
// LeVeque's pairwise update; an empty side leaves the other as it is).
template <typename T>
struct BnMoments {
  std::int64_t n;
  T mean, m2;
};
template <typename T>
__device__ BnMoments<T> merged(const BnMoments<T>& a, const BnMoments<T>& b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const std::int64_t n = a.n + b.n;
  const T d = b.mean - a.mean, wb = static_cast<T>(b.n) / static_cast<T>(n);
  return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * static_cast<T>(a.n) * wb};
}

// y's factor and offset of channel c from its mean and inverse std.
template <typename T>
__device__ void bn_affine(const BnStats<T>& st, std::int64_t c, T mean, T inv) {
  const T k = bn_factor(st.scale[c], inv);
  st.k[c] = k;
  st.off[c] = bn_offset(st.bias[c], mean, k);
}

// Channel c's statistics from its chunks' partials: thread t merges chunks
// t, t + kThreads, ... in turn, then the threads merge pairwise in shared
// memory (a fixed tree); thread 0 writes the batch's mean and inverse std,
// the running statistics and y's factor and offset.
template <typename T>
__global__ void batch_norm_finish(const T* part, BnShape g, BnStats<T> st, T inv_count, T unbias) {
  __shared__ std::int64_t sn[kThreads];
  __shared__ T smu[kThreads], sm2[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  for (std::int64_t c = blockIdx.x; c < g.c; c += gridDim.x) {
    BnMoments<T> a{0, T(0), T(0)};
    for (std::int64_t q = t; q < g.chunks; q += kThreads) {
      const std::int64_t n = g.count - q * kBnChunk < kBnChunk ? g.count - q * kBnChunk : kBnChunk;
      a = merged(a, {n, part[2 * (c * g.chunks + q)], part[2 * (c * g.chunks + q) + 1]});
    }
    sn[t] = a.n;
    smu[t] = a.mean;
    sm2[t] = a.m2;
    __syncthreads();
    for (int h = kThreads / 2; h > 0; h /= 2) {
      if (t < h) {
        const BnMoments<T> m = merged<T>({sn[t], smu[t], sm2[t]}, {sn[t + h], smu[t + h], sm2[t + h]});
        sn[t] = m.n;
        smu[t] = m.mean;
        sm2[t] = m.m2;
      }
      __syncthreads();
    }
    if (t == 0) {
      const T mean = smu[0], v = sm2[0] * inv_count, mom = st.mom;
      const T inv = T(1) / std::sqrt(v + st.eps);
      st.smean[c] = mean;
      st.sinv[c] = inv;
      st.run_mean[c] = mom * st.run_mean[c] + (T(1) - mom) * mean;
      st.run_var[c] = mom * st.run_var[c] + (T(1) - mom) * v * unbias;
      bn_affine(st, c, mean, inv);
    }
    __syncthreads();  // sn, smu, sm2 are reused by the next channel
  }
}

// is_test: the statistics are the running ones.
template <typename T>
__global__ void batch_norm_test_stats(BnStats<T> st, std::int64_t c) {
  KILN_GRID_STRIDE(k, c) {
    const T inv = T(1) / std::sqrt(st.run_var[k] + st.eps);
    st.smean[k] = st.run_mean[k];
    st.sinv[k] = inv;
    bn_affine(st, k, st.run_mean[k], inv);
  }
}

// y = act(x · k + off) over `groups` groups of V elements, x and y aligned
// to a group.
template <typename T, typename X, BatchNormAct A, int V>
__global__ void batch_norm_apply(const X* x, const T* kk, const T* koff, X* y, std::int64_t groups,
                                 BnPlanes p) {
  KILN_GRID_STRIDE(i, groups) {
    const std::int64_t c = p.channel(i);
    const T k = kk[c], off = koff[c];
    T v[V];
    bn_load<V>(x + i * V, true, v);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = bn_activate<A>(bn_pre(v[e], k, off));
    bn_store<V>(y + i * V, v);
  }
}

// ---- batch_norm's gradient kernels ----

// The gradient's per-channel operands (bias null for BatchNormAct::None),
// and the constants of dx it writes to scratch: m = scale · invstd,
// mdy = mean(g), q = mean(g · x̂) · invstd, and the pre-activation's k, off.
template <typename T>
struct BnGradIn {
  const T *scale, *bias, *mean, *invstd;
};
template <typename T>
struct BnDx {
  T *m, *mdy, *q, *k, *off;
};

// Chunk q of channel c: Σ g and Σ g · (x - mean), g what the activation
// passes of dy, into part[2 (c · chunks + q)] and the next (loads first,
// V elements of a plane at a time, then the sums in a fixed order).
template <typename T, typename X, BatchNormAct A, int V>
__global__ void batch_norm_grad_partials(const X* x, const X* dy, BnGradIn<T> in, T* part, BnShape g,
                                         bool packed) {
  constexpr int kGroups = kBnPerThread / V;
  for (std::int64_t c = blockIdx.y; c < g.c; c += gridDim.y)
    for (std::int64_t q = blockIdx.x; q < g.chunks; q += gridDim.x) {
      const std::int64_t e0 = q * kBnChunk, len = g.count - e0 < kBnChunk ? g.count - e0 : kBnChunk;
      T xv[kGroups][V], dv[kGroups][V];
#pragma unroll
      for (int i = 0; i < kGroups; ++i) {
        const std::int64_t e = (std::int64_t(i) * kThreads + threadIdx.x) * V;
        if (e >= len) continue;
        const std::int64_t off = g.offset(c, e0 + e);
        bn_load<V>(x + off, packed, xv[i]);
        bn_load<V>(dy + off, packed, dv[i]);
      }
      const T mu = in.mean[c];
      T k = T(0), off = T(0);
      if constexpr (A != BatchNormAct::None) {
        k = bn_factor(in.scale[c], in.invstd[c]);
        off = bn_offset(in.bias[c], mu, k);
      }
      T sg = T(0), sgx = T(0);
#pragma unroll
      for (int i = 0; i < kGroups; ++i)
        if ((std::int64_t(i) * kThreads + threadIdx.x) * V < len)
          for (int e = 0; e < V; ++e) {
            const T gi = bn_passed<A>(bn_pre(xv[i][e], k, off), dv[i][e]);
            sg += gi;
            sgx += gi * (xv[i][e] - mu);
          }
      sg = lanes_combine<kThreads, Plus<T>>(sg);
      sgx = lanes_combine<kThreads, Plus<T>>(sgx);
      if (threadIdx.x == 0) {
        part[2 * (c * g.chunks + q)] = sg;
        part[2 * (c * g.chunks + q) + 1] = sgx;
      }
    }
}

// Channel c's dbias = Σ g and dscale = Σ g · (x - mean) · invstd from its
// chunks' partials (thread t adds chunks t, t + kThreads, ... in turn, then
// lanes_combine), and dx's constants.
template <typename T>
__global__ void batch_norm_grad_finish(const T* part, BnShape g, BnGradIn<T> in, T* dscale, T* dbias, BnDx<T> d,
                                       T inv_count) {
  for (std::int64_t c = blockIdx.x; c < g.c; c += gridDim.x) {
    T sg = T(0), sgx = T(0);
    for (std::int64_t q = threadIdx.x; q < g.chunks; q += kThreads) {
      sg += part[2 * (c * g.chunks + q)];
      sgx += part[2 * (c * g.chunks + q) + 1];
    }
    sg = lanes_combine<kThreads, Plus<T>>(sg);
    sgx = lanes_combine<kThreads, Plus<T>>(sgx);
    if (threadIdx.x != 0) continue;
    const T invstd = in.invstd[c], ds = sgx * invstd;
    dbias[c] = sg;
    dscale[c] = ds;
    d.m[c] = in.scale[c] * invstd;
    d.mdy[c] = sg * inv_count;
    d.q[c] = ds * inv_count * invstd;
    if (in.bias) {
      d.k[c] = bn_factor(in.scale[c], invstd);
      d.off[c] = bn_offset(in.bias[c], in.mean[c], d.k[c]);
    }
  }
}

// dx = m · g (is_test) or m · (g - mdy - (x - mean) · q) over `groups`
// groups of V elements, x, dy and dx aligned to a group; x unread when
// is_test and act None.
template <typename T, typename X, BatchNormAct A, int V>
__global__ void batch_norm_dx(const X* x, const X* dy, const T* mean, BnDx<T> d, X* dx, std::int64_t groups,
                              BnPlanes p, bool is_test) {
  KILN_GRID_STRIDE(i, groups) {
    const std::int64_t c = p.channel(i);
    T xv[V] = {}, gv[V];
    bn_load<V>(dy + i * V, true, gv);
    if (A != BatchNormAct::None || !is_test) bn_load<V>(x + i * V, true, xv);
    if constexpr (A != BatchNormAct::None) {
      const T k = d.k[c], off = d.off[c];
#pragma unroll
      for (int e = 0; e < V; ++e) gv[e] = bn_passed<A>(bn_pre(xv[e], k, off), gv[e]);
    }
    const T m = d.m[c];
    if (is_test) {
#pragma unroll
      for (int e = 0; e < V; ++e) gv[e] = m * gv[e];
    } else {
      const T mdy = d.mdy[c], q = d.q[c], mu = mean[c];
#pragma unroll
      for (int e = 0; e < V; ++e) gv[e] = m * (gv[e] - mdy - (xv[e] - mu) * q);
    }
    bn_store<V>(dx + i * V, gv);
  }
}

// body(std::integral_constant<BatchNormAct, act>{}): act as a template argument.
template <typename Body>
void with_batch_norm_act(BatchNormAct act, Body&& body) {
  using C = BatchNormAct;
  switch (act) {
    case C::Relu: return body(std::integral_constant<C, C::Relu>{});
    case C::Relu6: return body(std::integral_constant<C, C::Relu6>{});
    case C::None: break;
  }
  body(std::integral_constant<C, C::None>{});
}

}  // namespace

// ---- launchers ----

template <typename T>
void launch_reduce(ReduceKind kind, const T* x, T* out, const ReduceWalk& w, cudaStream_t s) {
  if (w.outputs == 0) return;
  switch (kind) {
    case ReduceKind::Sum:
    case ReduceKind::Mean: {
      using Acc = typename SumR<T>::Acc;
      const std::int64_t div = kind == ReduceKind::Mean ? w.count : -1;  // mean: f32 / f64 only
      reduce_with<SumR<T>>(w, LoadX<T, Acc>{x}, Store<T, Acc>{out, div}, s);
      break;
    }
    case ReduceKind::Max:
      reduce_with<MaxR<T>>(w, LoadX<T, T>{x}, Store<T, T>{out, -1}, s);
      break;
    case ReduceKind::Prod: {
      using Acc = typename ProdR<T>::Acc;
      reduce_with<ProdR<T>>(w, LoadX<T, Acc>{x}, Store<T, Acc>{out, -1}, s);
      break;
    }
  }
}

template <typename T>
void launch_reduce_grad(ReduceKind kind, const T* x, const T* out, const T* dout, T* dx,
                        std::int64_t n, const ReduceWalk& w, const ReduceMap& map, void* scratch,
                        cudaStream_t s) {
  if (n == 0) return;
  auto* counts = static_cast<std::int64_t*>(scratch);
  switch (kind) {
    case ReduceKind::Sum:
      sum_grad<<<blocks_for(n), kThreads, 0, s>>>(dout, dx, n, map, T(1), false);
      break;
    case ReduceKind::Mean:
      sum_grad<<<blocks_for(n), kThreads, 0, s>>>(dout, dx, n, map, T(1) / static_cast<T>(w.count),
                                                  true);
      break;
    case ReduceKind::Max:
      reduce_with<Plus<std::int64_t>>(w, LoadTie<T>{x, out},
                                      Store<std::int64_t, std::int64_t>{counts, -1}, s);
      max_grad<<<blocks_for(n), kThreads, 0, s>>>(x, out, dout, counts, dx, n, map);
      break;
    case ReduceKind::Prod: {
      T* nonzero = reinterpret_cast<T*>(counts + w.outputs);
      reduce_with<Plus<std::int64_t>>(w, LoadZero<T>{x},
                                      Store<std::int64_t, std::int64_t>{counts, -1}, s);
      reduce_with<TimesR<T>>(w, LoadNonzero<T>{x}, Store<T, T>{nonzero, -1}, s);
      prod_grad<<<blocks_for(n), kThreads, 0, s>>>(x, dout, nonzero, counts, dx, n, map);
      break;
    }
  }
}

template <typename T>
void launch_softmax(bool log, const T* x, T* y, std::int64_t outer, std::int64_t c,
                    std::int64_t inner, cudaStream_t s) {
  const std::int64_t rows = outer * inner;
  if (rows == 0 || c == 0) return;
  const int lanes = inner > 1 ? 1 : lanes_for(c);
  const unsigned b = row_blocks(rows, lanes);
  if (log) {
    if (lanes == 1)
      softmax_rows<T, true, 1><<<b, kThreads, 0, s>>>(x, y, rows, c, inner);
    else if (lanes == 32)
      softmax_rows<T, true, 32><<<b, kThreads, 0, s>>>(x, y, rows, c, inner);
    else
      softmax_rows<T, true, kThreads><<<b, kThreads, 0, s>>>(x, y, rows, c, inner);
  } else {
    if (lanes == 1)
      softmax_rows<T, false, 1><<<b, kThreads, 0, s>>>(x, y, rows, c, inner);
    else if (lanes == 32)
      softmax_rows<T, false, 32><<<b, kThreads, 0, s>>>(x, y, rows, c, inner);
    else
      softmax_rows<T, false, kThreads><<<b, kThreads, 0, s>>>(x, y, rows, c, inner);
  }
}

template <typename T>
void launch_softmax_grad(bool log, const T* y, const T* dy, T* dx, std::int64_t outer,
                         std::int64_t c, std::int64_t inner, cudaStream_t s) {
  const std::int64_t rows = outer * inner;
  if (rows == 0 || c == 0) return;
  const int lanes = inner > 1 ? 1 : lanes_for(c);
  const unsigned b = row_blocks(rows, lanes);
  if (log) {
    if (lanes == 1)
      softmax_grad_rows<T, true, 1><<<b, kThreads, 0, s>>>(y, dy, dx, rows, c, inner);
    else if (lanes == 32)
      softmax_grad_rows<T, true, 32><<<b, kThreads, 0, s>>>(y, dy, dx, rows, c, inner);
    else
      softmax_grad_rows<T, true, kThreads><<<b, kThreads, 0, s>>>(y, dy, dx, rows, c, inner);
  } else {
    if (lanes == 1)
      softmax_grad_rows<T, false, 1><<<b, kThreads, 0, s>>>(y, dy, dx, rows, c, inner);
    else if (lanes == 32)
      softmax_grad_rows<T, false, 32><<<b, kThreads, 0, s>>>(y, dy, dx, rows, c, inner);
    else
      softmax_grad_rows<T, false, kThreads><<<b, kThreads, 0, s>>>(y, dy, dx, rows, c, inner);
  }
}

template <typename T, typename L>
void launch_cross_entropy(const T* x, const L* label, T* sm, T* loss, std::int64_t n,
                          std::int64_t c, std::int64_t ignore, cudaStream_t s) {
  if (n == 0 || c == 0) return;
  const unsigned b = row_blocks(n, c >= kLongRow ? kThreads : 32);
  if (c >= kLongRow)
    cross_entropy_rows<T, L, kThreads><<<b, kThreads, 0, s>>>(x, label, sm, loss, n, c, ignore);
  else
    cross_entropy_rows<T, L, 32><<<b, kThreads, 0, s>>>(x, label, sm, loss, n, c, ignore);
}

template <typename T, typename L>
void launch_cross_entropy_grad(const T* sm, const L* label, const T* dloss, T* dx, std::int64_t n,
                               std::int64_t c, std::int64_t ignore, cudaStream_t s) {
  if (n == 0 || c == 0) return;
  cross_entropy_grad<<<blocks_for(n * c), kThreads, 0, s>>>(sm, label, dloss, dx, n, c, ignore);
}

template <typename S, typename L>
void cross_entropy_lse(const S* x, const L* label, Widened<S>* loss,
                       Widened<S>* lse, std::int64_t n, std::int64_t c, std::int64_t ignore,
                       cudaStream_t s) {
  if (n == 0 || c == 0) return;
  const unsigned b = row_blocks(n, c >= kLongRow ? kThreads : 32);
  if (c >= kLongRow)
    cross_entropy_lse_rows<S, L, kThreads><<<b, kThreads, 0, s>>>(x, label, loss, lse, n, c, ignore);
  else
    cross_entropy_lse_rows<S, L, 32><<<b, kThreads, 0, s>>>(x, label, loss, lse, n, c, ignore);
}

template <typename S, typename L>
void cross_entropy_lse_grad_launch(const S* x, const Widened<S>* lse, const L* label,
                                   const Widened<S>* dloss, S* dx, std::int64_t n,
                                   std::int64_t c, std::int64_t ignore, cudaStream_t s) {
  if (n == 0 || c == 0) return;
  cross_entropy_lse_grad<<<blocks_for(n * c), kThreads, 0, s>>>(x, lse, label, dloss, dx, n, c, ignore);
}

template <typename T, typename L>
void launch_cross_entropy_lse(const T* x, const L* label, T* loss, T* lse, std::int64_t n,
                              std::int64_t c, std::int64_t ignore, cudaStream_t s) {
  cross_entropy_lse(x, label, loss, lse, n, c, ignore, s);
}

template <typename T, typename L>
void launch_cross_entropy_lse_grad(const T* x, const T* lse, const L* label, const T* dloss, T* dx,
                                   std::int64_t n, std::int64_t c, std::int64_t ignore,
                                   cudaStream_t s) {
  cross_entropy_lse_grad_launch(x, lse, label, dloss, dx, n, c, ignore, s);
}

template <typename L>
void launch_cross_entropy_lse_half(DataType dt, const void* x, const L* label, float* loss, float* lse,
                                   std::int64_t n, std::int64_t c, std::int64_t ignore, cudaStream_t s) {
  if (dt == DataType::BFloat16)
    cross_entropy_lse(static_cast<const __nv_bfloat16*>(x), label, loss, lse, n, c, ignore, s);
  else
    cross_entropy_lse(static_cast<const __half*>(x), label, loss, lse, n, c, ignore, s);
}

template <typename L>
void launch_cross_entropy_lse_grad_half(DataType dt, const void* x, const float* lse, const L* label,
                                        const float* dloss, void* dx, std::int64_t n, std::int64_t c,
                                        std::int64_t ignore, cudaStream_t s) {
  if (dt == DataType::BFloat16)
    cross_entropy_lse_grad_launch(static_cast<const __nv_bfloat16*>(x), lse, label, dloss,
                                  static_cast<__nv_bfloat16*>(dx), n, c, ignore, s);
  else
    cross_entropy_lse_grad_launch(static_cast<const __half*>(x), lse, label, dloss, static_cast<__half*>(dx), n,
                                  c, ignore, s);
}

template void launch_cross_entropy_lse_half<std::int32_t>(DataType, const void*, const std::int32_t*, float*,
                                                          float*, std::int64_t, std::int64_t, std::int64_t,
                                                          cudaStream_t);
template void launch_cross_entropy_lse_half<std::int64_t>(DataType, const void*, const std::int64_t*, float*,
                                                          float*, std::int64_t, std::int64_t, std::int64_t,
                                                          cudaStream_t);
template void launch_cross_entropy_lse_grad_half<std::int32_t>(DataType, const void*, const float*,
                                                               const std::int32_t*, const float*, void*,
                                                               std::int64_t, std::int64_t, std::int64_t,
                                                               cudaStream_t);
template void launch_cross_entropy_lse_grad_half<std::int64_t>(DataType, const void*, const float*,
                                                               const std::int64_t*, const float*, void*,
                                                               std::int64_t, std::int64_t, std::int64_t,
                                                               cudaStream_t);

template <typename T>
void launch_norm(bool rms, const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                 std::int64_t m, std::int64_t n, T eps, T inv_n, cudaStream_t s) {
  if (m == 0) return;
  if constexpr (std::is_same_v<T, float>)
    if (rms ? norm_held_f32<true>(x, w, b, y, mean, rstd, m, n, eps, inv_n, s)
            : norm_held_f32<false>(x, w, b, y, mean, rstd, m, n, eps, inv_n, s))
      return;
  const bool wide = n >= kLongRow;
  const unsigned g = row_blocks(m, wide ? kThreads : 32);
  if (rms) {
    if (wide)
      norm_rows<T, true, kThreads><<<g, kThreads, 0, s>>>(x, w, b, y, mean, rstd, m, n, eps, inv_n);
    else
      norm_rows<T, true, 32><<<g, kThreads, 0, s>>>(x, w, b, y, mean, rstd, m, n, eps, inv_n);
  } else {
    if (wide)
      norm_rows<T, false, kThreads>
          <<<g, kThreads, 0, s>>>(x, w, b, y, mean, rstd, m, n, eps, inv_n);
    else
      norm_rows<T, false, 32><<<g, kThreads, 0, s>>>(x, w, b, y, mean, rstd, m, n, eps, inv_n);
  }
}

std::int64_t norm_grad_chunks(std::int64_t m) {
  const std::int64_t chunks = (m + kNormChunkRows - 1) / kNormChunkRows;
  return chunks < kNormMaxChunks ? chunks : kNormMaxChunks;
}

bool is_column_walk(const ReduceWalk& w) {
  return w.red_rank == 1 && w.kept_rank == 1 && w.kept_strides[0] == 1 && w.red_strides[0] == w.kept_dims[0] &&
         w.count >= 2 * kNormChunkRows;
}

template <typename T>
std::size_t column_sum_scratch(std::int64_t rows, std::int64_t cols) {
  return sizeof(typename SumR<T>::Acc) * static_cast<std::size_t>(norm_grad_chunks(rows) * cols);
}

template <typename T, typename Acc>
void column_sum_with(const T* x, T* out, std::int64_t rows, std::int64_t cols, bool mean, void* scratch,
                     cudaStream_t s) {
  const std::int64_t chunks = norm_grad_chunks(rows);
  auto* part = static_cast<Acc*>(scratch);
  const dim3 grid(static_cast<unsigned>((cols + kNormColumns - 1) / kNormColumns), static_cast<unsigned>(chunks));
  column_partials<T, Acc><<<grid, dim3(kNormColumns, kNormRowStrides), 0, s>>>(x, part, rows, cols,
                                                                                (rows + chunks - 1) / chunks);
  column_finish<T, Acc><<<blocks_for(cols), kThreads, 0, s>>>(part, out, chunks, cols, mean ? rows : -1);
}

template <typename T>
void launch_column_sum(const T* x, T* out, std::int64_t rows, std::int64_t cols, bool mean, void* scratch,
                       cudaStream_t s) {
  column_sum_with<T, typename SumR<T>::Acc>(x, out, rows, cols, mean, scratch, s);
}

void launch_column_sum_half(DataType dt, const void* x, void* out, std::int64_t rows, std::int64_t cols,
                            void* scratch, cudaStream_t s) {
  if (dt == DataType::BFloat16)
    column_sum_with<__nv_bfloat16, double>(static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(out),
                                           rows, cols, false, scratch, s);
  else
    column_sum_with<__half, double>(static_cast<const __half*>(x), static_cast<__half*>(out), rows, cols, false,
                                    scratch, s);
}

template <typename T>
void launch_norm_grad(bool rms, const T* x, const T* dy, const T* w, const T* mean, const T* rstd,
                      T* dx, T* dw, T* db, T* scratch, std::int64_t m, std::int64_t n, T inv_n,
                      cudaStream_t s) {
  if (n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    const bool fused = rms ? norm_grad_fused_f32<true>(x, dy, w, mean, rstd, dx, dw, db, scratch, m, n, inv_n, s)
                           : norm_grad_fused_f32<false>(x, dy, w, mean, rstd, dx, dw, db, scratch, m, n, inv_n, s);
    if (fused) return;
  }
  if (m > 0) {
    const bool wide = n >= kLongRow;
    const unsigned g = row_blocks(m, wide ? kThreads : 32);
    if (rms) {
      if (wide)
        norm_grad_rows<T, true, kThreads>
            <<<g, kThreads, 0, s>>>(x, dy, w, mean, rstd, dx, m, n, inv_n);
      else
        norm_grad_rows<T, true, 32><<<g, kThreads, 0, s>>>(x, dy, w, mean, rstd, dx, m, n, inv_n);
    } else {
      if (wide)
        norm_grad_rows<T, false, kThreads>
            <<<g, kThreads, 0, s>>>(x, dy, w, mean, rstd, dx, m, n, inv_n);
      else
        norm_grad_rows<T, false, 32><<<g, kThreads, 0, s>>>(x, dy, w, mean, rstd, dx, m, n, inv_n);
    }
  }
  if (rms)
    launch_norm_grad_columns<T, true>(x, dy, mean, rstd, dw, db, scratch, m, n, s);
  else
    launch_norm_grad_columns<T, false>(x, dy, mean, rstd, dw, db, scratch, m, n, s);
}

namespace {

// The elements of a group of batch_norm_apply / batch_norm_dx: the most of
// one 16-byte access that divide S and to whose bytes every pointer is
// aligned, else 1.
template <typename X>
int bn_width(std::int64_t s, std::initializer_list<const void*> ptrs) {
  for (int v = static_cast<int>(16 / sizeof(X)); v > 1; v /= 2)
    if (s % v == 0 && all_aligned(v * sizeof(X), ptrs)) return v;
  return 1;
}
// body(std::integral_constant<int, v>{}) for a v of bn_width<X>.
template <typename X, typename Body>
void with_bn_width(int v, Body&& body) {
  if constexpr (sizeof(X) == 2)
    if (v == 8) return body(std::integral_constant<int, 8>{});
  if constexpr (sizeof(X) <= 4)
    if (v == 4) return body(std::integral_constant<int, 4>{});
  if (v == 2) return body(std::integral_constant<int, 2>{});
  body(std::integral_constant<int, 1>{});
}
// body(std::integral_constant<int, v>{}) for the partials' group: 4
// elements when S is a multiple of 4, else 1, whatever X (bf16 / f16 sum
// in f32's order).
template <typename Body>
void with_bn_group(std::int64_t s, Body&& body) {
  if (s % 4 == 0) return body(std::integral_constant<int, 4>{});
  body(std::integral_constant<int, 1>{});
}

// launch_batch_norm with x and y stored as X: the statistics (training:
// the chunks' partials, then their merge), then y.
template <typename T, typename X>
void batch_norm_launch(const X* x, const T* scale, const T* bias, T* run_mean, T* run_var, T* smean, T* sinv,
                       X* y, T* scratch, std::int64_t n, std::int64_t c, std::int64_t s, T eps, T momentum,
                       bool is_test, BatchNormAct act, cudaStream_t st) {
  if (c == 0) return;
  const BnStats<T> bs{scale, bias, run_mean, run_var, smean, sinv, scratch, scratch + c, eps, momentum};
  if (is_test) {
    batch_norm_test_stats<<<blocks_for(c), kThreads, 0, st>>>(bs, c);
  } else {
    const BnShape g = bn_shape(n, c, s);
    T* part = scratch + kBnConstants * c;
    const bool packed = all_aligned(4 * sizeof(X), {x});
    with_bn_group(s, [&](auto v) {
      batch_norm_partials<T, X, decltype(v)::value><<<bn_grid(g), kThreads, 0, st>>>(x, part, g, packed);
    });
    const T inv_count = g.count ? T(1) / static_cast<T>(g.count) : T(0);
    const T unbias = g.count > 1 ? static_cast<T>(g.count) / static_cast<T>(g.count - 1) : T(1);
    batch_norm_finish<T><<<blocks_over(c), kThreads, 0, st>>>(part, g, bs, inv_count, unbias);
  }
  const std::int64_t total = n * c * s;
  if (total == 0) return;
  with_batch_norm_act(act, [&](auto a) {
    constexpr BatchNormAct A = decltype(a)::value;
    with_bn_width<X>(bn_width<X>(s, {x, y}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      batch_norm_apply<T, X, A, V>
          <<<blocks_for(total / V), kThreads, 0, st>>>(x, bs.k, bs.off, y, total / V, bn_planes(c, s, V));
    });
  });
}

// launch_batch_norm_grad with x, dy and dx stored as X: the chunks'
// partial sums, their totals and dx's constants, then dx.
template <typename T, typename X>
void batch_norm_grad_launch(const X* x, const T* scale, const T* bias, const T* mean, const T* invstd,
                            const X* dy, X* dx, T* dscale, T* dbias, T* scratch, std::int64_t n, std::int64_t c,
                            std::int64_t s, bool is_test, BatchNormAct act, cudaStream_t st) {
  if (c == 0) return;
  const BnShape g = bn_shape(n, c, s);
  const std::int64_t total = n * c * s;
  const T inv_count = g.count ? T(1) / static_cast<T>(g.count) : T(0);
  const BnGradIn<T> in{scale, bias, mean, invstd};
  const BnDx<T> d{scratch, scratch + c, scratch + 2 * c, scratch + 3 * c, scratch + 4 * c};
  T* part = scratch + kBnConstants * c;
  const bool packed = all_aligned(4 * sizeof(X), {x, dy});
  with_batch_norm_act(act, [&](auto a) {
    constexpr BatchNormAct A = decltype(a)::value;
    with_bn_group(s, [&](auto v) {
      batch_norm_grad_partials<T, X, A, decltype(v)::value>
          <<<bn_grid(g), kThreads, 0, st>>>(x, dy, in, part, g, packed);
    });
    batch_norm_grad_finish<T><<<blocks_over(c), kThreads, 0, st>>>(part, g, in, dscale, dbias, d, inv_count);
    if (total == 0) return;
    with_bn_width<X>(bn_width<X>(s, {x, dy, dx}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      batch_norm_dx<T, X, A, V><<<blocks_for(total / V), kThreads, 0, st>>>(x, dy, mean, d, dx, total / V,
                                                                            bn_planes(c, s, V), is_test);
    });
  });
}

// body(X{}): X the storage type of dtype xd, T's own or (T f32) bf16 / f16.
template <typename T, typename Body>
void with_storage(DataType xd, Body&& body) {
  if constexpr (std::is_same_v<T, float>) {
    if (xd == DataType::BFloat16) return body(__nv_bfloat16{});
    if (xd == DataType::Float16) return body(__half{});
  }
  body(T{});
}

}  // namespace

template <typename T>
void launch_batch_norm(DataType xd, const void* x, const T* scale, const T* bias, T* run_mean, T* run_var,
                       T* smean, T* sinv, void* y, T* scratch, std::int64_t n, std::int64_t c, std::int64_t s,
                       T eps, T momentum, bool is_test, BatchNormAct act, cudaStream_t st) {
  with_storage<T>(xd, [&](auto v) {
    using X = decltype(v);
    batch_norm_launch<T, X>(static_cast<const X*>(x), scale, bias, run_mean, run_var, smean, sinv,
                            static_cast<X*>(y), scratch, n, c, s, eps, momentum, is_test, act, st);
  });
}

template <typename T>
void launch_batch_norm_grad(DataType xd, const void* x, const T* scale, const T* bias, const T* mean,
                            const T* invstd, const void* dy, void* dx, T* dscale, T* dbias, T* scratch,
                            std::int64_t n, std::int64_t c, std::int64_t s, bool is_test,
                            BatchNormAct act, cudaStream_t st) {
  with_storage<T>(xd, [&](auto v) {
    using X = decltype(v);
    batch_norm_grad_launch<T, X>(static_cast<const X*>(x), scale, bias, mean, invstd, static_cast<const X*>(dy),
                                 static_cast<X*>(dx), dscale, dbias, scratch, n, c, s, is_test, act, st);
  });
}

std::int64_t batch_norm_scratch(std::int64_t n, std::int64_t c, std::int64_t s) {
  return c * (kBnConstants + 2 * bn_chunks(n * s));
}

// ---- explicit instantiations: the dtypes reduce.cc registers ----

#define KILN_REDUCE(T)                                                                                \
  template void launch_reduce<T>(ReduceKind, const T*, T*, const ReduceWalk&, cudaStream_t);         \
  template std::size_t column_sum_scratch<T>(std::int64_t, std::int64_t);                            \
  template void launch_column_sum<T>(const T*, T*, std::int64_t, std::int64_t, bool, void*, cudaStream_t);
KILN_REDUCE(float)
KILN_REDUCE(double)
KILN_REDUCE(std::int32_t)
KILN_REDUCE(std::int64_t)

#define KILN_FLOAT_FAMILIES(T)                                                                    \
  template void launch_reduce_grad<T>(ReduceKind, const T*, const T*, const T*, T*, std::int64_t, \
                                      const ReduceWalk&, const ReduceMap&, void*, cudaStream_t);  \
  template void launch_softmax<T>(bool, const T*, T*, std::int64_t, std::int64_t, std::int64_t,   \
                                  cudaStream_t);                                                  \
  template void launch_softmax_grad<T>(bool, const T*, const T*, T*, std::int64_t, std::int64_t,  \
                                       std::int64_t, cudaStream_t);                               \
  template void launch_cross_entropy<T, std::int32_t>(const T*, const std::int32_t*, T*, T*,      \
                                                      std::int64_t, std::int64_t, std::int64_t,   \
                                                      cudaStream_t);                              \
  template void launch_cross_entropy<T, std::int64_t>(const T*, const std::int64_t*, T*, T*,      \
                                                      std::int64_t, std::int64_t, std::int64_t,   \
                                                      cudaStream_t);                              \
  template void launch_cross_entropy_grad<T, std::int32_t>(                                       \
      const T*, const std::int32_t*, const T*, T*, std::int64_t, std::int64_t, std::int64_t,      \
      cudaStream_t);                                                                              \
  template void launch_cross_entropy_grad<T, std::int64_t>(                                       \
      const T*, const std::int64_t*, const T*, T*, std::int64_t, std::int64_t, std::int64_t,      \
      cudaStream_t);                                                                              \
  template void launch_cross_entropy_lse<T, std::int32_t>(const T*, const std::int32_t*, T*, T*,  \
                                                          std::int64_t, std::int64_t,             \
                                                          std::int64_t, cudaStream_t);            \
  template void launch_cross_entropy_lse<T, std::int64_t>(const T*, const std::int64_t*, T*, T*,  \
                                                          std::int64_t, std::int64_t,             \
                                                          std::int64_t, cudaStream_t);            \
  template void launch_cross_entropy_lse_grad<T, std::int32_t>(                                   \
      const T*, const T*, const std::int32_t*, const T*, T*, std::int64_t, std::int64_t,          \
      std::int64_t, cudaStream_t);                                                                \
  template void launch_cross_entropy_lse_grad<T, std::int64_t>(                                   \
      const T*, const T*, const std::int64_t*, const T*, T*, std::int64_t, std::int64_t,          \
      std::int64_t, cudaStream_t);                                                                \
  template void launch_norm<T>(bool, const T*, const T*, const T*, T*, T*, T*, std::int64_t,      \
                               std::int64_t, T, T, cudaStream_t);                                 \
  template void launch_norm_grad<T>(bool, const T*, const T*, const T*, const T*, const T*, T*,   \
                                    T*, T*, T*, std::int64_t, std::int64_t, T, cudaStream_t);     \
  template void launch_batch_norm<T>(DataType, const void*, const T*, const T*, T*, T*, T*, T*,  \
                                     void*, T*, std::int64_t, std::int64_t, std::int64_t, T, T,   \
                                     bool, BatchNormAct, cudaStream_t);                           \
  template void launch_batch_norm_grad<T>(DataType, const void*, const T*, const T*, const T*,    \
                                          const T*, const void*, void*, T*, T*, T*, std::int64_t, \
                                          std::int64_t, std::int64_t, bool, BatchNormAct,         \
                                          cudaStream_t);
KILN_FLOAT_FAMILIES(float)
KILN_FLOAT_FAMILIES(double)

}  // namespace kiln::cuda
