// CPU kernels of sum / mean / max / prod over axes. The input's dims are collapsed
// into alternating kept / reduced groups (kiln/kernel/reduce_plan.h, shared
// with the CUDA kernels), then walked recursively: a reduced innermost
// group is a contiguous reduction (8 independent accumulators; f32 sums
// accumulate in f64), a kept innermost group is a vectorizable
// out[i] ⊕= in[i] row update.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "column_means.h"
#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/kernel/reduce_plan.h"
#include <vector>
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::cpu {
namespace {

template <typename T>
struct SumR {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  static constexpr T init() { return T(0); }
  static Acc combine(Acc a, Acc b) { return a + b; }
};

template <typename T>
struct MaxR {  // NaN wins
  using Acc = T;
  static constexpr T init() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static Acc combine(Acc a, Acc b) { return (b > a || b != b) ? b : a; }
};

template <typename T>
struct ProdR {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  static constexpr T init() { return T(1); }
  static Acc combine(Acc a, Acc b) { return a * b; }
};

using Group = ReduceGroup;

template <typename T, typename R>
void reduce_contiguous(const T* in, std::int64_t n, T* out) {
  using Acc = typename R::Acc;
  Acc acc[8];
  for (auto& a : acc) a = static_cast<Acc>(R::init());
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] = R::combine(acc[k], static_cast<Acc>(in[i + k]));
  for (; i < n; ++i) acc[0] = R::combine(acc[0], static_cast<Acc>(in[i]));
  Acc r = static_cast<Acc>(*out);
  for (int k = 0; k < 8; ++k) r = R::combine(r, acc[k]);
  *out = static_cast<T>(r);
}

// Walks groups g[0..m): the group `split` levels down only over [b, e),
// every other over its extent (split < 0: none restricted).
template <typename T, typename R>
void reduce_rec(const Group* g, int m, const T* in, T* out, int split, std::int64_t b,
                std::int64_t e) {
  const Group& cur = g[0];
  const std::int64_t lo = split == 0 ? b : 0, hi = split == 0 ? e : cur.extent;
  if (m == 1) {
    if (cur.reduced) {
      reduce_contiguous<T, R>(in, cur.extent, out);
    } else {
      T* __restrict po = out;
      const T* __restrict pi = in;
      for (std::int64_t i = lo; i < hi; ++i) po[i] = static_cast<T>(R::combine(po[i], pi[i]));
    }
    return;
  }
  for (std::int64_t i = lo; i < hi; ++i)
    reduce_rec<T, R>(g + 1, m - 1, in + i * cur.in_stride,
                     cur.reduced ? out : out + i * cur.out_stride, split - 1, b, e);
}

// acc[j] ⊕= src[r * cols + j] over `rows` rows, vectorized across the
// columns at the CPU's widest SIMD level. Four rows at a time are combined
// pairwise before they reach acc: one acc update (a store the next row's
// load waits on) per four rows, ~2x the row-at-a-time loop's speed.
template <typename T, typename R>
struct ColumnRows {
  using Acc = typename R::Acc;
  KILN_SIMD_INLINE static void run(const T* __restrict src, Acc* __restrict acc, std::int64_t rows,
                                   std::int64_t cols) {
    std::int64_t r = 0;
    for (; r + 4 <= rows; r += 4, src += 4 * cols) {
      const T* __restrict s1 = src + cols;
      const T* __restrict s2 = src + 2 * cols;
      const T* __restrict s3 = src + 3 * cols;
      for (std::int64_t j = 0; j < cols; ++j)
        acc[j] = R::combine(acc[j], R::combine(R::combine(static_cast<Acc>(src[j]), static_cast<Acc>(s1[j])),
                                               R::combine(static_cast<Acc>(s2[j]), static_cast<Acc>(s3[j]))));
    }
    for (; r < rows; ++r, src += cols)
      for (std::int64_t j = 0; j < cols; ++j) acc[j] = R::combine(acc[j], static_cast<Acc>(src[j]));
  }
};

// How reduce_columns splits each of `outer` blocks of `rows` rows: into
// `chunks` chunks of `chunk_rows` rows (the last may be shorter), from the
// shape alone.
struct ColumnChunks {
  std::int64_t chunks, chunk_rows;
};
ColumnChunks column_chunks(std::int64_t outer, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kChunkElems = 4096, kMostItems = 64;
  const std::int64_t fit = (rows * cols + kChunkElems - 1) / kChunkElems;
  const std::int64_t chunks = std::clamp<std::int64_t>(kMostItems / outer, 1, std::max<std::int64_t>(fit, 1));
  return {chunks, (rows + chunks - 1) / chunks};
}

// Rows of `cols` contiguous elements reduced into one row, for each of
// `outer` independent blocks of `rows` rows (NHWC pooling, a bias
// gradient). The rows go in chunks whose size follows from the shape
// alone (column_chunks), each chunk into an Acc partial row, after
// prepare(chunk, elements) has run over it, and each column's partials are
// combined in chunk order: the same bits at any thread count, and the
// threads split the rows (reading what the previous op wrote on their
// core) instead of every thread walking every row.
template <typename T, typename R, typename Prepare>
void reduce_columns(T* in, std::int64_t outer, std::int64_t rows, std::int64_t cols, T* out, Prepare prepare) {
  using Acc = typename R::Acc;
  const ColumnChunks split = column_chunks(outer, rows, cols);
  // Plain locals: the lambda below captures them, which clang 14 cannot do
  // with structured bindings.
  const std::int64_t chunks = split.chunks, chunk_rows = split.chunk_rows;
  Acc* part = scratch<Acc>(outer * chunks * cols);
  const std::int64_t chunk_bytes = chunk_rows * cols * std::int64_t(sizeof(T));
  parallel_for(outer * chunks, items_per_range(chunk_bytes), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t r0 = std::min(rows, (i % chunks) * chunk_rows);
      const std::int64_t r1 = std::min(rows, r0 + chunk_rows);
      T* src = in + ((i / chunks) * rows + r0) * cols;
      prepare(src, (r1 - r0) * cols);
      Acc* __restrict acc = part + i * cols;
      std::fill(acc, acc + cols, static_cast<Acc>(R::init()));
      simd_dispatch<ColumnRows<T, R>>(src, acc, r1 - r0, cols);
    }
  });
  for (std::int64_t o = 0; o < outer; ++o) {
    Acc* __restrict acc = part + o * chunks * cols;
    for (std::int64_t c = 1; c < chunks; ++c)
      for (std::int64_t j = 0; j < cols; ++j) acc[j] = R::combine(acc[j], acc[c * cols + j]);
    for (std::int64_t j = 0; j < cols; ++j) out[o * cols + j] = static_cast<T>(acc[j]);
  }
}

// reduce_rec over all of g, split across the kernel's threads along a
// kept group: the outermost with an item per thread (whole rows each),
// else the widest. Each output is one thread's, summed in the order one
// thread would sum it, so any thread count gives the same bits.
// [kept] reduced kept: reduce_columns.
template <typename T, typename R>
void reduce_groups(const Group* g, int m, const T* in, T* out, std::int64_t numel) {
  if (m >= 2 && m <= 3 && !g[m - 1].reduced && g[m - 2].reduced && (m == 2 || !g[0].reduced))
    return reduce_columns<T, R>(const_cast<T*>(in), m == 3 ? g[0].extent : 1, g[m - 2].extent, g[m - 1].extent, out,
                                [](const T*, std::int64_t) {});  // reads in only
  int split = -1;
  for (int k = 0; k < m && (split < 0 || g[split].extent < intra_op_threads()); ++k)
    if (!g[k].reduced && (split < 0 || g[k].extent > g[split].extent)) split = k;
  if (split < 0) return reduce_rec<T, R>(g, m, in, out, -1, 0, 0);
  const std::int64_t bytes = numel / g[split].extent * std::int64_t(sizeof(T));
  parallel_for(g[split].extent, items_per_range(bytes), [&](std::int64_t b, std::int64_t e) {
    reduce_rec<T, R>(g, m, in, out, split, b, e);
  });
}

enum class Kind { Sum, Mean, Max, Prod };

template <Kind kind, typename OpT, typename T>
void reduce_kernel(KernelContext& ctx) {
  using R = std::conditional_t<kind == Kind::Max, MaxR<T>,
                               std::conditional_t<kind == Kind::Prod, ProdR<T>, SumR<T>>>;
  const auto& a = ctx.attrs<OpT>();
  const Tensor& x = typed_input<T>(ctx, 0);
  const std::string_view op = ctx.op()->name();
  const Dims& xd = x.dims();
  if (a.axis.empty() && !a.keepdim && x.numel() > 0) {
    // Every element into a scalar: the general path below with its one
    // contiguous group (the same sums in the same order), without the axis
    // list and the group plan — a loss's mean runs here every step.
    // Summed before the output is allocated: no copy of x to keep it alive.
    const std::int64_t n = x.numel();
    T r = R::init();
    reduce_contiguous<T, R>(x.data<T>(), n, &r);
    if constexpr (kind == Kind::Mean) r /= static_cast<T>(n);
    ctx.alloc_output(0, Dims(), x.dtype()).template data<T>()[0] = r;
    return;
  }
  auto axes = normalize_reduce_axes(op, a.axis, xd.rank());
  Dims od;
  {
    std::int64_t buf[Dims::kMaxRank];
    int r = 0;
    for (int i = 0; i < xd.rank(); ++i) {
      bool red = std::binary_search(axes.begin(), axes.end(), i);
      if (!red) buf[r++] = xd[i];
      else if (a.keepdim) buf[r++] = 1;
    }
    od = Dims(std::span<const std::int64_t>(buf, r));
  }
  std::int64_t count = 1;  // elements per output element
  for (int ax : axes) count *= xd[ax];

  const Tensor src = x;  // keeps the input alive while the output is (re)allocated
  Tensor& out = ctx.alloc_output(0, od, src.dtype());
  T* po = out.data<T>();
  const std::int64_t on = od.numel();
  if (on == 0) return;
  if (count == 0) {
    if constexpr (kind == Kind::Max)
      throw_error(ErrorKind::InvalidArgument, "op '", op,
                  "' reduces over an empty axis (input [", xd.to_string(), "])");
    const T fill = kind == Kind::Mean   ? std::numeric_limits<T>::quiet_NaN()
                   : kind == Kind::Prod ? T(1)
                                        : T(0);
    std::fill(po, po + on, fill);
    return;
  }
  std::fill(po, po + on, R::init());
  Group g[Dims::kMaxRank];
  const int m = collapse_reduce_groups(xd, axes, g);
  const T* pi = src.data<T>();
  if (m == 0) {
    po[0] = static_cast<T>(R::combine(po[0], pi[0]));
  } else {
    reduce_groups<T, R>(g, m, pi, po, src.numel());
  }
  if constexpr (kind == Kind::Mean) {
    const T c = static_cast<T>(count);
    for (std::int64_t i = 0; i < on; ++i) po[i] /= c;
  }
}

template <typename T>
struct SumK {
  static void run(KernelContext& ctx) { reduce_kernel<Kind::Sum, SumOp, T>(ctx); }
};
template <typename T>
struct MeanK {
  static void run(KernelContext& ctx) { reduce_kernel<Kind::Mean, MeanOp, T>(ctx); }
};
template <typename T>
struct MaxK {
  static void run(KernelContext& ctx) { reduce_kernel<Kind::Max, MaxOp, T>(ctx); }
};
template <typename T>
struct ProdK {
  static void run(KernelContext& ctx) { reduce_kernel<Kind::Prod, ProdOp, T>(ctx); }
};

}  // namespace

KILN_REGISTER_KERNELS(SumOp, Cpu, SumK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(MeanOp, Cpu, MeanK, float, double);
KILN_REGISTER_KERNELS(MaxOp, Cpu, MaxK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(ProdOp, Cpu, ProdK, float, double, std::int32_t, std::int64_t);

}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {


// Calls f(i, o) for every flat index i of x in order, o being the flat index
// of the reduced element it belongs to.
template <typename F>
void for_each_reduced(const Dims& xd, const std::vector<int>& axes, F&& f) {
  const int r = xd.rank();
  const std::int64_t n = xd.numel();
  if (n == 0) return;
  std::int64_t os[Dims::kMaxRank] = {};
  std::int64_t s = 1;
  for (int i = r - 1; i >= 0; --i) {
    if (std::binary_search(axes.begin(), axes.end(), i)) continue;
    os[i] = s;
    s *= xd[i];
  }
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t o = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, o);
    for (int d = r - 1; d >= 0; --d) {
      o += os[d];
      if (++idx[d] < xd[d]) break;
      o -= os[d] * xd[d];
      idx[d] = 0;
    }
  }
}

// Inputs 1..nd (dout, and max's out) must hold one element per reduced
// element, laid out as the forward op's output (keepdim or not: the same
// order). Error names the op and the input.
void check_reduced_inputs(const KernelContext& ctx, const Dims& xd, const std::vector<int>& axes,
                          bool keepdim, std::uint32_t nd) {
  std::int64_t buf[Dims::kMaxRank];
  int r = 0;
  for (int i = 0; i < xd.rank(); ++i) {
    const bool red = std::binary_search(axes.begin(), axes.end(), i);
    if (!red) buf[r++] = xd[i];
    else if (keepdim) buf[r++] = 1;
  }
  const Dims want(std::span<const std::int64_t>(buf, r));
  for (std::uint32_t k = 1; k <= nd; ++k)
    if (ctx.input(k).dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' input #", k, " [",
                  ctx.input(k).dims().to_string(), "] must have x's reduced shape [", want.to_string(),
                  "]");
}

// prod's gradient: per group the product of its non-zero elements and its
// zero count; an element's gradient is dout times the product of the others.
template <typename T>
void prod_grad(const T* px, const T* pd, T* pdx, const Dims& xd, const std::vector<int>& axes,
               std::int64_t groups) {
  thread_local std::vector<T> nonzero;  // grown once per thread, then reused
  thread_local std::vector<std::int64_t> zeros;
  if (static_cast<std::int64_t>(nonzero.size()) < groups) {
    nonzero.resize(static_cast<std::size_t>(groups));
    zeros.resize(static_cast<std::size_t>(groups));
  }
  std::fill(nonzero.begin(), nonzero.begin() + groups, T(1));
  std::fill(zeros.begin(), zeros.begin() + groups, 0);
  for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) {
    const auto k = static_cast<std::size_t>(o);
    if (px[i] == T(0))
      ++zeros[k];
    else
      nonzero[k] *= px[i];
  });
  for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) {
    const auto k = static_cast<std::size_t>(o);
    T others;
    if (zeros[k] == 0)
      others = nonzero[k] / px[i];
    else if (zeros[k] == 1 && px[i] == T(0))
      others = nonzero[k];
    else
      others = T(0);
    pdx[i] = pd[o] * others;
  });
}

// max's gradient: dout split evenly among each group's maxima (pm: the
// forward's output).
template <typename T>
void max_grad(const T* px, const T* pm, const T* pd, T* pdx, const Dims& xd,
              const std::vector<int>& axes, std::int64_t groups) {
  thread_local std::vector<std::int64_t> ties;  // grown once per thread, then reused
  if (static_cast<std::int64_t>(ties.size()) < groups) ties.resize(static_cast<std::size_t>(groups));
  std::fill(ties.begin(), ties.begin() + groups, 0);
  for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) {
    if (px[i] == pm[o]) ++ties[static_cast<std::size_t>(o)];
  });
  for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) {
    pdx[i] = px[i] == pm[o] ? pd[o] / static_cast<T>(ties[static_cast<std::size_t>(o)]) : T(0);
  });
}

template <Kind kind, typename OpT, typename T>
void reduce_grad(KernelContext& ctx) {
  const auto& a = ctx.attrs<OpT>();
  const Tensor x = typed_input<T>(ctx, 0);
  const std::uint32_t nd = ctx.num_inputs() - 1;
  const Tensor dout = typed_input<T>(ctx, nd);
  const Dims& xd = x.dims();
  auto axes = normalize_reduce_axes(ctx.op()->name(), a.axis, xd.rank());
  std::int64_t count = 1, groups = 1;
  for (int i = 0; i < xd.rank(); ++i)
    (std::binary_search(axes.begin(), axes.end(), i) ? count : groups) *= xd[i];
  check_reduced_inputs(ctx, xd, axes, a.keepdim, nd);
  Tensor& dx = ctx.alloc_output(0, xd, x.dtype());
  T* pdx = dx.data<T>();
  const T* pd = dout.data<T>();
  if constexpr (kind == Kind::Sum) {
    for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) { pdx[i] = pd[o]; });
  } else if constexpr (kind == Kind::Mean) {
    const T inv = T(1) / static_cast<T>(count);
    for_each_reduced(xd, axes, [&](std::int64_t i, std::int64_t o) { pdx[i] = pd[o] * inv; });
  } else if constexpr (kind == Kind::Prod) {
    prod_grad(x.data<T>(), pd, pdx, xd, axes, groups);
  } else {
    const Tensor out = typed_input<T>(ctx, 1);
    max_grad(x.data<T>(), out.data<T>(), pd, pdx, xd, axes, groups);
  }
}

template <typename T>
struct SumGradK {
  static void run(KernelContext& ctx) { reduce_grad<Kind::Sum, GradOf<SumOp>, T>(ctx); }
};
template <typename T>
struct MeanGradK {
  static void run(KernelContext& ctx) { reduce_grad<Kind::Mean, GradOf<MeanOp>, T>(ctx); }
};
template <typename T>
struct MaxGradK {
  static void run(KernelContext& ctx) { reduce_grad<Kind::Max, GradOf<MaxOp>, T>(ctx); }
};
template <typename T>
struct ProdGradK {
  static void run(KernelContext& ctx) { reduce_grad<Kind::Prod, GradOf<ProdOp>, T>(ctx); }
};

}  // namespace

KILN_REGISTER_KERNELS(GradOf<SumOp>, Cpu, SumGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MeanOp>, Cpu, MeanGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MaxOp>, Cpu, MaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<ProdOp>, Cpu, ProdGradK, float, double);

}  // namespace kiln::cpu

namespace kiln::cpu {

void mean_over_rows(float* in, std::int64_t outer, std::int64_t rows, std::int64_t cols, float* out,
                    void (*prepare)(float* block, std::int64_t elements)) {
  reduce_columns<float, SumR<float>>(in, outer, rows, cols, out, prepare);
  const float count = static_cast<float>(rows);
  for (std::int64_t i = 0; i < outer * cols; ++i) out[i] /= count;
}

}  // namespace kiln::cpu
