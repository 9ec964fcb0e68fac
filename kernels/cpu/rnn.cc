// CPU kernels of kiln.rnn, kiln.gru and kiln.lstm (f32, f64). Per
// direction: the input projection of every step, X [seq·batch, input] ·
// Wᵀ, is one GEMM; then each step makes one GEMM of the hidden state
// against Rᵀ (a GRU without linear_before_reset makes a second one, of
// r ∘ h against R's h block, once r is known) and the gate math row by
// row, one gate's contiguous slice at a time. Batch entries past their
// sequence length keep their state and write zeros into Y.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/rnn_ops.h"

namespace kiln::cpu {
namespace {

using rnn::Activation;
using rnn::Cell;

// c = op(a) · op(b) + beta · c, row-major.
void gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int m, int n, int k, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0, a, lda, b, ldb, beta, c, ldc);
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

// One Elman row: Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + biases).
template <typename T>
void rnn_row(const Direction<T>& a, T* g, const T* xg, T* hb) {
  for (std::int64_t j = 0; j < a.H; ++j) g[j] += xg[j];
  activate(a.act[0], a.c.clip, g, a.H);
  std::memcpy(hb, g, sizeof(T) * static_cast<std::size_t>(a.H));
}

// One GRU row's z and r gates; with linear_before_reset its new state too
// (into hb and yb), otherwise rt ∘ Ht-1 into rhb for gru_late_h.
template <typename T>
void gru_row(const Direction<T>& a, T* g, const T* xg, T* hb, T* yb, T* rhb) {
  const std::int64_t H = a.H;
  T* z = g;
  T* rg = g + H;
  for (std::int64_t j = 0; j < 2 * H; ++j) g[j] += xg[j];
  activate(a.act[0], a.c.clip, z, 2 * H);  // z and r share f
  if (a.c.linear_before_reset) {
    T* hh = g + 2 * H;
    for (std::int64_t j = 0; j < H; ++j) {
      const T rec = hh[j] + (a.rb ? a.rb[2 * H + j] : T(0));
      hh[j] = xg[2 * H + j] + rg[j] * rec;
    }
    activate(a.act[1], a.c.clip, hh, H);
    for (std::int64_t j = 0; j < H; ++j) hb[j] = (1 - z[j]) * hh[j] + z[j] * hb[j];
    std::memcpy(yb, hb, sizeof(T) * H);
  } else {
    for (std::int64_t j = 0; j < H; ++j) rhb[j] = rg[j] * hb[j];
  }
}

// One LSTM row: gates (with peepholes), the cell state cb and the new hb.
template <typename T>
void lstm_row(const Direction<T>& a, T* g, const T* xg, T* hb, T* cb) {
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
  activate(a.act[0], c.clip, gi, H);
  if (c.input_forget)
    for (std::int64_t j = 0; j < H; ++j) gf[j] = 1 - gi[j];
  else
    activate(a.act[0], c.clip, gf, H);
  activate(a.act[1], c.clip, gc, H);
  for (std::int64_t j = 0; j < H; ++j) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
  if (a.pd)
    for (std::int64_t j = 0; j < H; ++j) go[j] += a.pd[H + j] * cb[j];
  activate(a.act[0], c.clip, go, H);
  std::memcpy(gc, cb, sizeof(T) * H);  // h(clip(Ct)), in gc's slice: the state stays unclipped
  activate(a.act[2], c.clip, gc, H);
  for (std::int64_t j = 0; j < H; ++j) hb[j] = go[j] * gc[j];
}

// GRU without linear_before_reset, after every row's gates: (rt ∘ Ht-1) ·
// Rhᵀ for every row, then the h block and new state of the active rows.
template <typename T>
void gru_late_h(const Direction<T>& a, std::int64_t N, std::int64_t t, const std::int64_t* len,
                const T* rd, const T* xt, const T* rh, T* hr, T* h, T* yt) {
  const std::int64_t H = a.H, GH = a.GH;
  T* hhr = hr + 2 * H;  // [N, H] at stride GH
  matmul_bt<T>(N, H, H, rh, H, rd + 2 * H * H, H, hhr, GH);
  for (std::int64_t b = 0; b < N; ++b) {
    if (t >= len[b]) continue;
    T* g = hr + b * GH;
    const T* xg = xt + b * GH;
    T* hh = g + 2 * H;
    for (std::int64_t j = 0; j < H; ++j) hh[j] += xg[2 * H + j] + (a.rb ? a.rb[2 * H + j] : T(0));
    activate(a.act[1], a.c.clip, hh, H);
    T* hb = h + b * H;
    const T* z = g;
    for (std::int64_t j = 0; j < H; ++j) hb[j] = (1 - z[j]) * hh[j] + z[j] * hb[j];
    std::memcpy(yt + b * H, hb, sizeof(T) * H);
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

    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t t = reverse ? S - 1 - s : s;
      const T* xt = xw + t * N * GH;
      T* yt = py + (t * d.dirs + dir) * N * H;
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
        switch (c.cell) {
          case Cell::Rnn: rnn_row(dirn, g, xg, hb); break;
          case Cell::Gru: gru_row(dirn, g, xg, hb, yb, rh + b * H); break;
          case Cell::Lstm: lstm_row(dirn, g, xg, hb, cs + b * H); break;
        }
        if (c.cell != Cell::Gru) std::memcpy(yb, hb, sizeof(T) * H);
      }
      if (late_h) gru_late_h(dirn, N, t, len, rd, xt, rh, hr, h, yt);
    }
    std::memcpy(pyh + dir * N * H, h, sizeof(T) * N * H);
    if (pyc) std::memcpy(pyc + dir * N * H, cs, sizeof(T) * N * H);
  }
}

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

}  // namespace kiln::cpu
