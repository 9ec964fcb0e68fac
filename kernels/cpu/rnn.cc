// CPU kernels of kiln.rnn, kiln.gru and kiln.lstm (f32, f64). Per
// direction: the input projection of every step, X [seq·batch, input] ·
// Wᵀ, is one GEMM; then each step makes one GEMM of the hidden state
// against Rᵀ (a GRU without linear_before_reset makes a second one, of
// r ∘ h against R's h block, once r is known) and the gate math row by
// row, one gate's contiguous slice at a time. Batch entries past their
// sequence length keep their state and write zeros into Y.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "cpu_blas.h"
#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/rnn_ops.h"

namespace kiln::cpu {
namespace {

using rnn::Activation;
using rnn::Cell;

// c = op(a) · op(b) + beta · c, row-major.
template <typename T>
void gemm(bool ta, bool tb, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc) {
  cpu::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

// c [m, n] = a [m, k] · b [n, k]ᵀ; zeros when k is 0.
template <typename T>
void matmul_bt(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda,
               const T* b, std::int64_t ldb, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  gemm(false, true, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), a,
       static_cast<int>(lda), b, static_cast<int>(ldb), T(0), c, static_cast<int>(ldc));
}

// Sigmoid and tanh, the activations of nearly every cell, in f32 through
// vector_math.h's polynomial forms so that their loops vectorize (libm's
// calls were ~40 % of an LSTM's time); f64 stays libm's.
template <typename T>
struct SigmoidLoop {
  KILN_SIMD_INLINE static void run(T* __restrict v, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) v[i] = T(1) / (T(1) + fast_exp(-v[i]));
  }
};
template <typename T>
struct TanhLoop {
  KILN_SIMD_INLINE static void run(T* __restrict v, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) v[i] = fast_tanh(v[i]);
  }
};

// v[0..n) = act(clip(v)), in place.
template <typename T>
void activate(const Activation& a, double clip, T* __restrict v, std::int64_t n) {
  if (clip > 0) {
    const T lo = static_cast<T>(-clip), hi = static_cast<T>(clip);
    for (std::int64_t i = 0; i < n; ++i) v[i] = std::min(std::max(v[i], lo), hi);
  }
  const T alpha = static_cast<T>(a.alpha), beta = static_cast<T>(a.beta);
  using K = Activation::Kind;
  switch (a.kind) {
    case K::Sigmoid:
      simd_dispatch<SigmoidLoop<T>>(v, n);
      break;
    case K::Tanh:
      simd_dispatch<TanhLoop<T>>(v, n);
      break;
    case K::Relu:
      for (std::int64_t i = 0; i < n; ++i) v[i] = std::max(v[i], T(0));
      break;
    case K::HardSigmoid:
      for (std::int64_t i = 0; i < n; ++i)
        v[i] = std::min(T(1), std::max(T(0), alpha * v[i] + beta));
      break;
    case K::LeakyRelu:
      for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] >= 0 ? v[i] : alpha * v[i];
      break;
    case K::Affine:
      for (std::int64_t i = 0; i < n; ++i) v[i] = alpha * v[i] + beta;
      break;
    case K::ScaledTanh:
      for (std::int64_t i = 0; i < n; ++i) v[i] = alpha * std::tanh(beta * v[i]);
      break;
    case K::Elu:
      for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] >= 0 ? v[i] : alpha * (std::exp(v[i]) - 1);
      break;
    case K::ThresholdedRelu:
      for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] > alpha ? v[i] : T(0);
      break;
    case K::Softsign:
      for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] / (T(1) + std::abs(v[i]));
      break;
    case K::Softplus:
      // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
      for (std::int64_t i = 0; i < n; ++i)
        v[i] = std::max(v[i], T(0)) + std::log1p(std::exp(-std::abs(v[i])));
      break;
  }
}

// The run-time dims, checked against the tensors (InferMeta may have seen -1).
struct RunDims {
  std::int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gh = 0;
};

[[noreturn]] void operand_error(const KernelContext& ctx, const char* what, int i,
                                const Tensor& t, const std::string& want) {
  throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " (input #", i,
              ") is [", t.dims().to_string(), "], expected ", want);
}

void require_shape(const KernelContext& ctx, const char* what, int i,
                   std::initializer_list<std::int64_t> want) {
  const Tensor& t = ctx.input(static_cast<std::uint32_t>(i));
  bool ok = t.rank() == static_cast<int>(want.size());
  std::size_t k = 0;
  for (auto w : want) ok = ok && t.dims()[static_cast<int>(k++)] == w;
  if (!ok) {
    std::string s = "[";
    k = 0;
    for (auto w : want) s += (k++ ? ", " : "") + std::to_string(w);
    operand_error(ctx, what, i, t, s + "]");
  }
}

RunDims run_dims(const KernelContext& ctx, const rnn::Config& c) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 3) operand_error(ctx, "X", 0, x, "[seq, batch, input]");
  RunDims d;
  d.seq = x.dims()[0];
  d.batch = x.dims()[1];
  d.input = x.dims()[2];
  d.hidden = c.hidden_size;
  d.dirs = c.num_directions;
  d.gh = c.gates() * d.hidden;
  require_shape(ctx, "W", 1, {d.dirs, d.gh, d.input});
  require_shape(ctx, "R", 2, {d.dirs, d.gh, d.hidden});
  if (c.b >= 0) require_shape(ctx, "B", c.b, {d.dirs, 2 * d.gh});
  if (c.sequence_lens >= 0) require_shape(ctx, "sequence_lens", c.sequence_lens, {d.batch});
  if (c.initial_h >= 0) require_shape(ctx, "initial_h", c.initial_h, {d.dirs, d.batch, d.hidden});
  if (c.initial_c >= 0) require_shape(ctx, "initial_c", c.initial_c, {d.dirs, d.batch, d.hidden});
  if (c.p >= 0) require_shape(ctx, "P", c.p, {d.dirs, 3 * d.hidden});
  for (std::int64_t v : {d.seq * d.batch, d.gh, d.input, d.hidden})
    if (v > INT_MAX)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has a matrix dim of ",
                  v, ", beyond what the BLAS takes (", INT_MAX, ")");
  return d;
}

// The sequence length of each batch entry, checked to lie in [0, seq].
void read_lengths(const KernelContext& ctx, const rnn::Config& c, const RunDims& d,
                  std::int64_t* len) {
  if (c.sequence_lens < 0) {
    std::fill(len, len + d.batch, d.seq);
    return;
  }
  const Tensor& t = ctx.input(static_cast<std::uint32_t>(c.sequence_lens));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    std::int64_t v = 0;
    if (t.dtype() == DataType::Int32) v = t.data<std::int32_t>()[b];
    else if (t.dtype() == DataType::Int64) v = t.data<std::int64_t>()[b];
    else
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' sequence_lens must be int32 or int64, got ", to_string(t.dtype()));
    if (v < 0 || v > d.seq)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' sequence_lens[", b,
                  "] is ", v, ", outside [0, ", d.seq, "] (X's sequence length)");
    len[b] = v;
  }
}

// What one direction's gate math reads besides the row's own state: the
// config, its activations, R's bias and the peepholes (null when absent).
template <typename T>
struct Direction {
  const rnn::Config& c;
  const Activation* act;
  const T* rb;
  const T* pd;
  std::int64_t H, GH;
};

// A state's start: the given initial values, or zeros when none were given.
template <typename T>
void initial_state(const T* given, T* state, std::int64_t n) {
  if (given) std::memcpy(state, given, sizeof(T) * static_cast<std::size_t>(n));
  else std::fill(state, state + n, T(0));
}

// Every step's input projection X·Wᵀ plus W's bias (and R's, except GRU's h
// block, which linear_before_reset may put inside r ∘ (...)), into xw [S·N, GH].
template <typename T>
void project_inputs(const rnn::Config& c, std::int64_t rows, std::int64_t I, std::int64_t H,
                    std::int64_t GH, const T* px, const T* wd, const T* wb, const T* rb, T* xw) {
  matmul_bt<T>(rows, GH, I, px, I, wd, I, xw, GH);
  if (!wb) return;
  const std::int64_t rb_end = c.cell == Cell::Gru ? 2 * H : GH;
  for (std::int64_t row = 0; row < rows; ++row) {
    T* xr = xw + row * GH;
    for (std::int64_t j = 0; j < GH; ++j) xr[j] += wb[j];
    for (std::int64_t j = 0; j < rb_end; ++j) xr[j] += rb[j];
  }
}

// n values copied to `pre` unless it is null: the grad kernel's record of
// an activation's input.
template <typename T>
void record(T* pre, const T* v, std::int64_t n) {
  if (pre) std::memcpy(pre, v, sizeof(T) * static_cast<std::size_t>(n));
}

// The row functions below take `pre`: null, or where the grad kernel's
// recompute records the row's activation inputs (Tape's layout).

// One Elman row: Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + biases).
template <typename T>
void rnn_row(const Direction<T>& a, T* g, const T* xg, T* hb, T* pre) {
  for (std::int64_t j = 0; j < a.H; ++j) g[j] += xg[j];
  record(pre, g, a.H);
  activate(a.act[0], a.c.clip, g, a.H);
  std::memcpy(hb, g, sizeof(T) * static_cast<std::size_t>(a.H));
}

// One GRU row's z and r gates; with linear_before_reset its new state too
// (into hb and yb), otherwise rt ∘ Ht-1 into rhb for gru_late_h.
template <typename T>
void gru_row(const Direction<T>& a, T* g, const T* xg, T* hb, T* yb, T* rhb, T* pre) {
  const std::int64_t H = a.H;
  T* z = g;
  T* rg = g + H;
  for (std::int64_t j = 0; j < 2 * H; ++j) g[j] += xg[j];
  record(pre, g, 2 * H);
  activate(a.act[0], a.c.clip, z, 2 * H);  // z and r share f
  if (a.c.linear_before_reset) {
    T* hh = g + 2 * H;
    for (std::int64_t j = 0; j < H; ++j) {
      const T rec = hh[j] + (a.rb ? a.rb[2 * H + j] : T(0));
      if (pre) pre[3 * H + j] = rec;
      hh[j] = xg[2 * H + j] + rg[j] * rec;
    }
    record(pre ? pre + 2 * H : nullptr, hh, H);
    activate(a.act[1], a.c.clip, hh, H);
    for (std::int64_t j = 0; j < H; ++j) hb[j] = (1 - z[j]) * hh[j] + z[j] * hb[j];
    std::memcpy(yb, hb, sizeof(T) * H);
  } else {
    for (std::int64_t j = 0; j < H; ++j) rhb[j] = rg[j] * hb[j];
  }
}

// One LSTM row: gates (with peepholes), the cell state cb and the new hb.
template <typename T>
void lstm_row(const Direction<T>& a, T* g, const T* xg, T* hb, T* cb, T* pre) {
  const std::int64_t H = a.H;
  const rnn::Config& c = a.c;
  T* gi = g;
  T* go = g + H;
  T* gf = g + 2 * H;
  T* gc = g + 3 * H;
  for (std::int64_t j = 0; j < a.GH; ++j) g[j] += xg[j];
  if (a.pd)
    for (std::int64_t j = 0; j < H; ++j) {
      gi[j] += a.pd[j] * cb[j];
      gf[j] += a.pd[2 * H + j] * cb[j];
    }
  record(pre, gi, H);
  record(pre ? pre + 2 * H : nullptr, gf, 2 * H);  // f and c
  activate(a.act[0], c.clip, gi, H);
  if (c.input_forget)
    for (std::int64_t j = 0; j < H; ++j) gf[j] = 1 - gi[j];
  else
    activate(a.act[0], c.clip, gf, H);
  activate(a.act[1], c.clip, gc, H);
  for (std::int64_t j = 0; j < H; ++j) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
  if (a.pd)
    for (std::int64_t j = 0; j < H; ++j) go[j] += a.pd[H + j] * cb[j];
  record(pre ? pre + H : nullptr, go, H);
  record(pre ? pre + 4 * H : nullptr, cb, H);
  activate(a.act[0], c.clip, go, H);
  std::memcpy(gc, cb, sizeof(T) * H);  // h(clip(Ct)), in gc's slice: the state stays unclipped
  activate(a.act[2], c.clip, gc, H);
  for (std::int64_t j = 0; j < H; ++j) hb[j] = go[j] * gc[j];
}

// GRU without linear_before_reset, after every row's gates: (rt ∘ Ht-1) ·
// Rhᵀ for every row, then the h block and new state of the active rows.
template <typename T>
void gru_late_h(const Direction<T>& a, std::int64_t N, std::int64_t t, const std::int64_t* len,
                const T* rd, const T* xt, const T* rh, T* hr, T* h, T* yt, T* pre,
                std::int64_t pre_width) {
  const std::int64_t H = a.H, GH = a.GH;
  T* hhr = hr + 2 * H;  // [N, H] at stride GH
  matmul_bt<T>(N, H, H, rh, H, rd + 2 * H * H, H, hhr, GH);
  for (std::int64_t b = 0; b < N; ++b) {
    if (t >= len[b]) continue;
    T* g = hr + b * GH;
    const T* xg = xt + b * GH;
    T* hh = g + 2 * H;
    for (std::int64_t j = 0; j < H; ++j) hh[j] += xg[2 * H + j] + (a.rb ? a.rb[2 * H + j] : T(0));
    record(pre ? pre + b * pre_width + 2 * H : nullptr, hh, H);
    activate(a.act[1], a.c.clip, hh, H);
    T* hb = h + b * H;
    const T* z = g;
    for (std::int64_t j = 0; j < H; ++j) hb[j] = (1 - z[j]) * hh[j] + z[j] * hb[j];
    std::memcpy(yt + b * H, hb, sizeof(T) * H);
  }
}

// Where the grad kernel's recompute records one direction's forward (null
// pre: nothing is recorded). Per time index t and batch row b, at row t·N
// + b: the activation inputs (before clipping) in pre [S·N, width] — rnn:
// a; gru: z, r, h, then Ht-1·Rhᵀ + Rbh (linear_before_reset); lstm: i, o,
// f, c, then Ct (h's input) — and the states the step started from in h,
// c [S·N, H].
template <typename T>
struct Tape {
  T* pre = nullptr;
  T* h = nullptr;
  T* c = nullptr;
  std::int64_t width = 0;
};

// The tape's row width of a cell.
inline std::int64_t tape_width(const rnn::Config& c, std::int64_t H) {
  return c.gates() * H + (c.cell == Cell::Rnn ? 0 : H);
}

// One direction's steps, from the states in h (and cs) and the projected
// inputs xw; step t's Y goes to y + t·y_stride (a stride of 0 reuses one
// [N, H] block). hr [N, GH] and rh [N, H] are scratch.
template <typename T>
void run_direction(const Direction<T>& a, bool reverse, std::int64_t S, std::int64_t N,
                   const std::int64_t* len, const T* xw, const T* rd, T* h, T* cs, T* hr, T* rh,
                   T* y, std::int64_t y_stride, const Tape<T>& tape) {
  const std::int64_t H = a.H, GH = a.GH;
  const rnn::Config& c = a.c;
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int64_t t = reverse ? S - 1 - s : s;
    const T* xt = xw + t * N * GH;
    T* yt = y + t * y_stride;
    T* pre_t = tape.pre ? tape.pre + t * N * tape.width : nullptr;
    if (tape.pre) {
      std::memcpy(tape.h + t * N * H, h, sizeof(T) * N * H);
      if (c.cell == Cell::Lstm) std::memcpy(tape.c + t * N * H, cs, sizeof(T) * N * H);
    }
    // Ht-1 · Rᵀ (for GRU without linear_before_reset, the z and r blocks only).
    const bool late_h = c.cell == Cell::Gru && !c.linear_before_reset;
    matmul_bt<T>(N, late_h ? 2 * H : GH, H, h, H, rd, H, hr, GH);
    for (std::int64_t b = 0; b < N; ++b) {
      T* hb = h + b * H;
      T* yb = yt + b * H;
      if (t >= len[b]) {
        std::fill(yb, yb + H, T(0));
        continue;
      }
      T* g = hr + b * GH;  // the gate pre-activations, in place
      const T* xg = xt + b * GH;
      T* pre = pre_t ? pre_t + b * tape.width : nullptr;
      switch (c.cell) {
        case Cell::Rnn: rnn_row(a, g, xg, hb, pre); break;
        case Cell::Gru: gru_row(a, g, xg, hb, yb, rh + b * H, pre); break;
        case Cell::Lstm: lstm_row(a, g, xg, hb, cs + b * H, pre); break;
      }
      if (c.cell != Cell::Gru) std::memcpy(yb, hb, sizeof(T) * H);
    }
    if (late_h) gru_late_h(a, N, t, len, rd, xt, rh, hr, h, yt, pre_t, tape.width);
  }
}

template <typename T>
void recurrent(KernelContext& ctx, const rnn::Config& c) {
  const RunDims d = run_dims(ctx, c);
  const std::int64_t S = d.seq, N = d.batch, I = d.input, H = d.hidden, GH = d.gh;
  const int per_cell = c.cell == Cell::Rnn ? 1 : c.cell == Cell::Gru ? 2 : 3;
  const Tensor& x = typed_input<T>(ctx, 0);
  const Tensor& w = typed_input<T>(ctx, 1);
  const Tensor& r = typed_input<T>(ctx, 2);
  auto optional = [&](int i) -> const T* {  // an operand left out is -1
    return i >= 0 ? typed_input<T>(ctx, static_cast<std::uint32_t>(i)).template data<T>() : nullptr;
  };
  const T *pb = optional(c.b), *ph0 = optional(c.initial_h), *pc0 = optional(c.initial_c),
          *pp = optional(c.p);

  const std::int64_t y_dims[] = {S, d.dirs, N, H};
  Tensor& y = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(y_dims, 4)), x.dtype());
  Tensor& yh = ctx.alloc_output(1, Dims(std::span<const std::int64_t>(y_dims + 1, 3)), x.dtype());
  T* py = y.data<T>();
  T* pyh = yh.data<T>();
  T* pyc = nullptr;
  if (c.cell == Cell::Lstm)
    pyc = ctx.alloc_output(2, Dims(std::span<const std::int64_t>(y_dims + 1, 3)), x.dtype())
              .template data<T>();
  if (N == 0 || H == 0) return;

  std::int64_t* len = scratch<std::int64_t>(N);
  read_lengths(ctx, c, d, len);
  // One scratch: xw [S·N, GH] | hr [N, GH] | h [N, H] | cs [N, H] | rh [N, H]
  T* buf = scratch<T>(S * N * GH + N * GH + 3 * N * H);
  T* xw = buf;
  T* hr = xw + S * N * GH;
  T* h = hr + N * GH;
  T* cs = h + N * H;
  T* rh = cs + N * H;
  const T* px = x.data<T>();

  for (std::int64_t dir = 0; dir < d.dirs; ++dir) {
    const bool reverse = c.reverse_only || dir == 1;
    const Activation* act = c.activations.data() + dir * per_cell;
    const T* wd = w.data<T>() + dir * GH * I;
    const T* rd = r.data<T>() + dir * GH * H;
    const T* wb = pb ? pb + dir * 2 * GH : nullptr;
    const T* rb = pb ? wb + GH : nullptr;
    const T* pd = pp ? pp + dir * 3 * H : nullptr;
    project_inputs<T>(c, S * N, I, H, GH, px, wd, wb, rb, xw);
    const Direction<T> dirn{c, act, rb, pd, H, GH};
    initial_state(ph0 ? ph0 + dir * N * H : nullptr, h, N * H);
    if (c.cell == Cell::Lstm) initial_state(pc0 ? pc0 + dir * N * H : nullptr, cs, N * H);
    run_direction(dirn, reverse, S, N, len, xw, rd, h, cs, hr, rh, py + dir * N * H,
                  d.dirs * N * H, Tape<T>{});
    std::memcpy(pyh + dir * N * H, h, sizeof(T) * N * H);
    if (pyc) std::memcpy(pyc + dir * N * H, cs, sizeof(T) * N * H);
  }
}

// ---- backpropagation through time ----

// c = op(a) · op(b) + beta · c over row-major matrices; with k = 0, c = beta · c.
template <typename T>
void gemm_acc(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
              std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  gemm(ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), a,
       static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// post = act(clip(pre)) (as the forward computes it) and slope = d post /
// d pre: the activation's derivative at clip(pre), 0 where clip clamped it.
template <typename T>
void activate_with_slope(const Activation& a, double clip, const T* pre, T* post, T* slope,
                         std::int64_t n) {
  std::memcpy(post, pre, sizeof(T) * static_cast<std::size_t>(n));
  activate(a, clip, post, n);
  const T alpha = static_cast<T>(a.alpha), beta = static_cast<T>(a.beta);
  const T lo = static_cast<T>(-clip), hi = static_cast<T>(clip);
  using K = Activation::Kind;
  for (std::int64_t i = 0; i < n; ++i) {
    const T v = clip > 0 ? std::min(std::max(pre[i], lo), hi) : pre[i];
    const T y = post[i];
    T d = 0;
    switch (a.kind) {
      case K::Sigmoid: d = y * (1 - y); break;
      case K::Tanh: d = 1 - y * y; break;
      case K::Relu: d = v > 0 ? T(1) : T(0); break;
      case K::HardSigmoid: {
        const T u = alpha * v + beta;
        d = u > 0 && u < 1 ? alpha : T(0);
        break;
      }
      case K::LeakyRelu: d = v >= 0 ? T(1) : alpha; break;
      case K::Affine: d = alpha; break;
      case K::ScaledTanh: {
        const T th = std::tanh(beta * v);
        d = alpha * beta * (1 - th * th);
        break;
      }
      case K::Elu: d = v >= 0 ? T(1) : alpha * std::exp(v); break;
      case K::ThresholdedRelu: d = v > alpha ? T(1) : T(0); break;
      case K::Softsign: {
        const T q = 1 + std::abs(v);
        d = 1 / (q * q);
        break;
      }
      case K::Softplus: d = 1 / (1 + std::exp(-v)); break;
    }
    slope[i] = clip > 0 && (pre[i] < lo || pre[i] > hi) ? T(0) : d;
  }
}

// What one direction's backward reads and writes, besides the tape.
template <typename T>
struct GradDirection {
  const Direction<T>& a;
  const T* rd;   // R of the direction [GH, H]
  T* dpd;        // dP of the direction [3H], accumulated (null without peepholes)
};

// LSTM row t, b: from dh (dY included) and dc (in: d Ct; out: d Ct-1), the
// gate gradients dg [GH] (i, o, f, c) and the peepholes' dP.
template <typename T>
void lstm_row_grad(const GradDirection<T>& gd, const T* pre, const T* cprev, T* post, T* sl,
                   const T* dh, T* dc, T* dg) {
  const Direction<T>& a = gd.a;
  const std::int64_t H = a.H;
  const rnn::Config& c = a.c;
  activate_with_slope(a.act[0], c.clip, pre, post, sl, H);              // i
  activate_with_slope(a.act[0], c.clip, pre + H, post + H, sl + H, H);  // o
  if (!c.input_forget)  // f
    activate_with_slope(a.act[0], c.clip, pre + 2 * H, post + 2 * H, sl + 2 * H, H);
  activate_with_slope(a.act[1], c.clip, pre + 3 * H, post + 3 * H, sl + 3 * H, H);  // c
  activate_with_slope(a.act[2], c.clip, pre + 4 * H, post + 4 * H, sl + 4 * H, H);  // h(Ct)
  const T* pd = a.pd;
  for (std::int64_t j = 0; j < H; ++j) {
    const T i = post[j], o = post[H + j], f = c.input_forget ? 1 - i : post[2 * H + j];
    const T g = post[3 * H + j], hc = post[4 * H + j], ct = pre[4 * H + j], cp = cprev[j];
    const T dao = dh[j] * hc * sl[H + j];
    T dct = dc[j] + dh[j] * o * sl[4 * H + j];
    if (pd) dct += dao * pd[H + j];
    T di = dct * g;
    const T df = dct * cp;
    T dcp = dct * f;
    T daf = 0;
    if (c.input_forget) di -= df;
    else daf = df * sl[2 * H + j];
    const T dai = di * sl[j];
    if (pd) {
      dcp += dai * pd[j] + daf * pd[2 * H + j];
      gd.dpd[j] += dai * cp;
      gd.dpd[H + j] += dao * ct;
      gd.dpd[2 * H + j] += daf * cp;
    }
    dg[j] = dai;
    dg[H + j] = dao;
    dg[2 * H + j] = daf;
    dg[3 * H + j] = dct * i * sl[3 * H + j];
    dc[j] = dcp;
  }
}

// One direction's gradients of x (accumulated over directions), W, R and B
// from its gate gradients dg [S·N, GH] (GRU: dgh / hrec, its h block of R),
// over all steps at once.
template <typename T>
void weight_grads(bool gru, std::int64_t dir, std::int64_t SN, std::int64_t I, std::int64_t H,
                  std::int64_t GH, const T* dg, const T* dgh, const T* hp, const T* hrec,
                  const T* px, const T* wd, T* dx, T* dw, T* dr, T* db) {
  gemm_acc<T>(false, false, SN, I, GH, dg, GH, wd, I, dir ? T(1) : T(0), dx, I);
  gemm_acc<T>(true, false, GH, I, SN, dg, GH, px, I, T(0), dw + dir * GH * I, I);
  T* drd = dr + dir * GH * H;
  if (gru) {
    gemm_acc<T>(true, false, 2 * H, H, SN, dg, GH, hp, H, T(0), drd, H);
    gemm_acc<T>(true, false, H, H, SN, dgh, H, hrec, H, T(0), drd + 2 * H * H, H);
  } else {
    gemm_acc<T>(true, false, GH, H, SN, dg, GH, hp, H, T(0), drd, H);
  }
  if (!db) return;
  T* dwb = db + dir * 2 * GH;
  T* drb = dwb + GH;
  for (std::int64_t row = 0; row < SN; ++row)
    for (std::int64_t j = 0; j < GH; ++j) dwb[j] += dg[row * GH + j];
  const std::int64_t shared = gru ? 2 * H : GH;
  std::memcpy(drb, dwb, sizeof(T) * static_cast<std::size_t>(shared));
  if (gru)
    for (std::int64_t row = 0; row < SN; ++row)
      for (std::int64_t j = 0; j < H; ++j) drb[2 * H + j] += dgh[row * H + j];
}

// One backward run's scratch, carved from one buffer: xw [S·N, GH] (then
// the gate gradients dG) | pre [S·N, TW] | hp, cp [S·N, H] (states before
// each step) | dgh, hrec [S·N, H] (GRU's h block of R: its gradient rows and
// inputs) | hr [N, GH] | h, cs, rh, ys, dh, dc, dhn, drh [N, H] | post,
// slope [N, TW].
template <typename T>
struct BpttScratch {
  T *xw, *pre, *hp, *cp, *dgh, *hrec, *hr, *h, *cs, *rh, *ys, *dh, *dc, *dhn, *drh, *post, *slope;
  std::int64_t N, H, GH, TW;

  BpttScratch(std::int64_t SN, std::int64_t n, std::int64_t gh, std::int64_t tw, std::int64_t hidden)
      : N(n), H(hidden), GH(gh), TW(tw) {
    xw = scratch<T>(SN * (GH + TW + 4 * H) + N * (GH + 8 * H + 2 * TW));
    pre = xw + SN * GH;
    hp = pre + SN * TW;
    cp = hp + SN * H;
    dgh = cp + SN * H;
    hrec = dgh + SN * H;
    hr = hrec + SN * H;
    h = hr + N * GH;
    cs = h + N * H;
    rh = cs + N * H;
    ys = rh + N * H;
    dh = ys + N * H;
    dc = dh + N * H;
    dhn = dc + N * H;
    drh = dhn + N * H;
    post = drh + N * H;
    slope = post + N * TW;
  }
};

// Row `row` (= t·N + b) of a step: its gate gradients dgb [GH] from dh
// (the gradient reaching its state, dY added), and in dhn the share of the
// previous state that does not go through R (GRU's z; 0 otherwise).
template <typename T>
void row_grad(const GradDirection<T>& gd, BpttScratch<T>& s, std::int64_t row, std::int64_t b, T* dgb) {
  const rnn::Config& c = gd.a.c;
  const Activation* act = gd.a.act;
  const std::int64_t H = s.H, TW = s.TW;
  const T* pr = s.pre + row * TW;
  T* po = s.post + b * TW;
  T* sl = s.slope + b * TW;
  const T* dhb = s.dh + b * H;
  T* dhnb = s.dhn + b * H;
  switch (c.cell) {
    case Cell::Rnn:
      activate_with_slope(act[0], c.clip, pr, po, sl, H);
      for (std::int64_t j = 0; j < H; ++j) dgb[j] = dhb[j] * sl[j];
      std::fill(dhnb, dhnb + H, T(0));
      break;
    case Cell::Lstm:
      lstm_row_grad(gd, pr, s.cp + row * H, po, sl, dhb, s.dc + b * H, dgb);
      std::fill(dhnb, dhnb + H, T(0));
      break;
    case Cell::Gru: {
      activate_with_slope(act[0], c.clip, pr, po, sl, 2 * H);  // z, r
      activate_with_slope(act[1], c.clip, pr + 2 * H, po + 2 * H, sl + 2 * H, H);
      const T* hpb = s.hp + row * H;
      T* dghb = s.dgh + row * H;
      T* hrecb = s.hrec + row * H;
      for (std::int64_t j = 0; j < H; ++j) {
        const T z = po[j], hh = po[2 * H + j];
        const T dah = dhb[j] * (1 - z) * sl[2 * H + j];
        dgb[j] = dhb[j] * (hpb[j] - hh) * sl[j];
        dgb[2 * H + j] = dah;
        dhnb[j] = z * dhb[j];
        if (c.linear_before_reset) {
          const T rr = po[H + j];
          dgb[H + j] = dah * pr[3 * H + j] * sl[H + j];
          dghb[j] = dah * rr;
          hrecb[j] = hpb[j];
        } else {
          dghb[j] = dah;  // r's gradient waits for (dG_h · Rh)
        }
      }
      break;
    }
  }
}

// After every row of step t: dhn += the gradient through R (GRU with the
// reset before R: r's gradient from d(rt ∘ Ht-1) = dG_h · Rh first).
template <typename T>
void state_grads(const GradDirection<T>& gd, BpttScratch<T>& s, const std::int64_t* len, std::int64_t t,
                 T* dgt) {
  const rnn::Config& c = gd.a.c;
  const bool gru = c.cell == Cell::Gru;
  const std::int64_t N = s.N, H = s.H, GH = s.GH, TW = s.TW, H2 = 2 * H;
  const T* rd = gd.rd;
  if (gru && !c.linear_before_reset) {
    gemm_acc<T>(false, false, N, H, H, dgt + H2, GH, rd + H2 * H, H, T(0), s.drh, H);
    for (std::int64_t b = 0; b < N; ++b) {
      if (t >= len[b]) continue;
      const std::int64_t row = t * N + b;
      const T* hpb = s.hp + row * H;
      const T* po = s.post + b * TW;
      const T* sl = s.slope + b * TW;
      for (std::int64_t j = 0; j < H; ++j) {
        const T rr = po[H + j], g = s.drh[b * H + j];
        dgt[b * GH + H + j] = g * hpb[j] * sl[H + j];
        s.dhn[b * H + j] += g * rr;
        s.hrec[row * H + j] = rr * hpb[j];
      }
    }
  }
  if (gru) {
    gemm_acc<T>(false, false, N, H, H2, dgt, GH, rd, H, T(1), s.dhn, H);
    if (c.linear_before_reset)
      gemm_acc<T>(false, false, N, H, H, s.dgh + t * N * H, H, rd + H2 * H, H, T(1), s.dhn, H);
  } else {
    gemm_acc<T>(false, false, N, H, GH, dgt, GH, rd, H, T(1), s.dhn, H);
  }
}

// Backward in time over one direction's tape: the gate gradients dG (in
// s.xw), and in s.dh / s.dc the gradients reaching the initial states.
template <typename T>
void backward_in_time(const GradDirection<T>& gd, BpttScratch<T>& s, bool reverse, std::int64_t S,
                      std::int64_t D, std::int64_t dir, const std::int64_t* len, const T* dy) {
  const bool gru = gd.a.c.cell == Cell::Gru;
  const std::int64_t N = s.N, H = s.H, GH = s.GH;
  for (std::int64_t step = S - 1; step >= 0; --step) {
    const std::int64_t t = reverse ? S - 1 - step : step;
    const T* dyt = dy + (t * D + dir) * N * H;
    T* dgt = s.xw + t * N * GH;
    for (std::int64_t b = 0; b < N; ++b) {
      T* dgb = dgt + b * GH;
      T* dhb = s.dh + b * H;
      const std::int64_t row = t * N + b;
      if (t >= len[b]) {  // padding: no gradient in, the state's passes through
        std::fill(dgb, dgb + GH, T(0));
        if (gru) {
          std::fill(s.dgh + row * H, s.dgh + (row + 1) * H, T(0));
          std::fill(s.hrec + row * H, s.hrec + (row + 1) * H, T(0));
        }
        std::memcpy(s.dhn + b * H, dhb, sizeof(T) * H);
        continue;
      }
      for (std::int64_t j = 0; j < H; ++j) dhb[j] += dyt[b * H + j];
      row_grad(gd, s, row, b, dgb);
    }
    state_grads(gd, s, len, t, dgt);
    std::swap(s.dh, s.dhn);
  }
}

template <typename T>
void recurrent_grad(KernelContext& ctx, const rnn::Config& c) {
  const RunDims d = run_dims(ctx, c);
  const std::int64_t S = d.seq, N = d.batch, I = d.input, H = d.hidden, GH = d.gh;
  const std::int64_t D = d.dirs, TW = tape_width(c, H);
  const int per_cell = c.cell == Cell::Rnn ? 1 : c.cell == Cell::Gru ? 2 : 3;
  const bool lstm = c.cell == Cell::Lstm, gru = c.cell == Cell::Gru;
  const Tensor& x = typed_input<T>(ctx, 0);
  const Tensor& w = typed_input<T>(ctx, 1);
  const Tensor& r = typed_input<T>(ctx, 2);
  auto optional = [&](int i) -> const T* {
    return i >= 0 ? typed_input<T>(ctx, static_cast<std::uint32_t>(i)).template data<T>() : nullptr;
  };
  const T *pb = optional(c.b), *ph0 = optional(c.initial_h), *pc0 = optional(c.initial_c),
          *pp = optional(c.p);
  // The results' gradients follow the forward's operands.
  const int idy = c.num_operands;
  require_shape(ctx, "dY", idy, {S, D, N, H});
  require_shape(ctx, "dY_h", idy + 1, {D, N, H});
  if (lstm) require_shape(ctx, "dY_c", idy + 2, {D, N, H});
  const T* dy = typed_input<T>(ctx, static_cast<std::uint32_t>(idy)).template data<T>();
  const T* dyh = typed_input<T>(ctx, static_cast<std::uint32_t>(idy + 1)).template data<T>();
  const T* dyc = lstm ? typed_input<T>(ctx, static_cast<std::uint32_t>(idy + 2)).template data<T>()
                      : nullptr;

  // One result per operand but sequence_lens, shaped like it.
  T* out[8] = {};
  std::uint32_t k = 0;
  for (int i = 0; i < c.num_operands; ++i) {
    if (i == c.sequence_lens) continue;
    const Tensor& in = ctx.input(static_cast<std::uint32_t>(i));
    out[i] = ctx.alloc_output(k++, in.dims(), in.dtype()).template data<T>();
    std::fill(out[i], out[i] + in.numel(), T(0));
  }
  T *dx = out[0], *dw = out[1], *dr = out[2];
  T* db = c.b >= 0 ? out[c.b] : nullptr;
  T* dh0 = c.initial_h >= 0 ? out[c.initial_h] : nullptr;
  T* dc0 = c.initial_c >= 0 ? out[c.initial_c] : nullptr;
  T* dp = c.p >= 0 ? out[c.p] : nullptr;
  if (N == 0 || H == 0) return;

  std::int64_t* len = scratch<std::int64_t>(N);
  read_lengths(ctx, c, d, len);
  const std::int64_t SN = S * N;
  BpttScratch<T> s(SN, N, GH, TW, H);
  const T* px = x.data<T>();
  for (std::int64_t dir = 0; dir < D; ++dir) {
    const bool reverse = c.reverse_only || dir == 1;
    const T* wd = w.data<T>() + dir * GH * I;
    const T* rd = r.data<T>() + dir * GH * H;
    const T* wb = pb ? pb + dir * 2 * GH : nullptr;
    const T* rb = pb ? wb + GH : nullptr;
    const Direction<T> dirn{c, c.activations.data() + dir * per_cell, rb, pp ? pp + dir * 3 * H : nullptr, H,
                            GH};
    const GradDirection<T> gd{dirn, rd, dp ? dp + dir * 3 * H : nullptr};

    // The forward again, recording the tape.
    project_inputs<T>(c, SN, I, H, GH, px, wd, wb, rb, s.xw);
    initial_state(ph0 ? ph0 + dir * N * H : nullptr, s.h, N * H);
    if (lstm) initial_state(pc0 ? pc0 + dir * N * H : nullptr, s.cs, N * H);
    run_direction(dirn, reverse, S, N, len, s.xw, rd, s.h, s.cs, s.hr, s.rh, s.ys, 0,
                  Tape<T>{s.pre, s.hp, s.cp, TW});

    std::memcpy(s.dh, dyh + dir * N * H, sizeof(T) * N * H);
    if (lstm) initial_state(dyc + dir * N * H, s.dc, N * H);
    backward_in_time(gd, s, reverse, S, D, dir, len, dy);
    if (dh0) std::memcpy(dh0 + dir * N * H, s.dh, sizeof(T) * N * H);
    if (dc0) std::memcpy(dc0 + dir * N * H, s.dc, sizeof(T) * N * H);

    weight_grads<T>(gru, dir, SN, I, H, GH, s.xw, s.dgh, s.hp, s.hrec, px, wd, dx, dw, dr, db);
  }
}

template <typename OpT>
struct RecurrentGradKernels {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      recurrent_grad<T>(ctx, rnn::config_of(OpT::name, ctx.attrs<OpT>()));
    }
  };
};

template <typename OpT>
struct RecurrentKernels {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      recurrent<T>(ctx, rnn::config_of(OpT::name, ctx.attrs<OpT>()));
    }
  };
};

}  // namespace

KILN_REGISTER_KERNELS(RnnOp, Cpu, RecurrentKernels<RnnOp>::K, float, double);
KILN_REGISTER_KERNELS(GruOp, Cpu, RecurrentKernels<GruOp>::K, float, double);
KILN_REGISTER_KERNELS(LstmOp, Cpu, RecurrentKernels<LstmOp>::K, float, double);
KILN_REGISTER_KERNELS(RecurrentGradOp<RnnOp>, Cpu, RecurrentGradKernels<RnnOp>::K, float, double);
KILN_REGISTER_KERNELS(RecurrentGradOp<GruOp>, Cpu, RecurrentGradKernels<GruOp>::K, float, double);
KILN_REGISTER_KERNELS(RecurrentGradOp<LstmOp>, Cpu, RecurrentGradKernels<LstmOp>::K, float,
                      double);

}  // namespace kiln::cpu
