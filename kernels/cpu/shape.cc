// CPU kernels of the tensor-making and shape ops: full, reshape (a view: the
// output shares the input's buffer), transpose, concat, split, slice, and the
// gradient plumbing reduce_as, reshape_as (a view), zeros_like, split_as,
// slice_grad. They move bytes, so one
// kernel serves every dtype (registered under DataType::Undefined).
// The run path allocates nothing but the output buffers.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "vector_math.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/kernel/full_attributes.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/support/half.h"

#ifdef KILN_HAS_SIMD_CLONES
#include <immintrin.h>
#endif

namespace kiln {
namespace {

using cpu::items_per_range;
using cpu::parallel_for;

std::int64_t axis_at_run(const KernelContext& ctx, std::int64_t axis, int rank,
                         const char* what = "axis") {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " ", axis,
                " is out of range for an input of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// Row-major element strides of `d`.
void strides_of(const Dims& d, std::int64_t* s) {
  std::int64_t acc = 1;
  for (int i = d.rank() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= d[i];
  }
}

char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw_data()); }
const char* bytes_of(const Tensor& t) { return static_cast<const char*>(t.raw_data()); }

// ---- reshape ----

void reshape_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<ReshapeOp>();
  const Tensor& x = ctx.input(0);
  if (a.shape.size() > static_cast<std::size_t>(Dims::kMaxRank))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' shape has rank ",
                a.shape.size(), ", beyond the maximum ", Dims::kMaxRank);
  std::int64_t d[Dims::kMaxRank];
  int infer_at = -1;
  std::int64_t known = 1;
  const int r = static_cast<int>(a.shape.size());
  for (int i = 0; i < r; ++i) {
    d[i] = a.shape[i];
    if (d[i] == 0) {
      if (i >= x.rank())
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' shape[", i,
                    "] = 0 copies an input dim, but the input ", x.type_string(), " has rank ",
                    x.rank());
      d[i] = x.dims()[i];
    }
    if (d[i] == -1) {
      if (infer_at >= 0)
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                    "' shape may hold one -1, got two");
      infer_at = i;
    } else if (d[i] < 0) {
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' shape dims must be >= -1, got ", d[i]);
    } else if (__builtin_mul_overflow(known, d[i], &known)) {
      throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' shape dims multiply beyond int64");
    }
  }
  const std::int64_t total = x.numel();
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot reshape ",
                  x.type_string(), " (", total, " elements) with a -1 beside dims multiplying to ",
                  known);
    d[infer_at] = total / known;
  } else if (known != total) {
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot reshape ",
                x.type_string(), " (", total, " elements) into ", known, " elements");
  }
  // A view: same buffer and offset (ViewLike, view_map {0, 0}).
  ctx.output(0) = x.reshape(Dims(std::span<const std::int64_t>(d, r)));
}

// ---- transpose ----

// Output rows [r0, r1) (a row: od's innermost dim) of a transpose whose
// output dim i steps the input by step[i] elements.
template <typename U>
void transpose_rows(const U* in, U* out, const Dims& od, const std::int64_t* step,
                    std::int64_t r0, std::int64_t r1) {
  const int r = od.rank();
  const std::int64_t inner = od[r - 1], inner_step = step[r - 1];
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t off = 0;
  for (std::int64_t i = r - 2, row = r0; i >= 0; --i) {  // the odometer at row r0
    idx[i] = row % od[i];
    row /= od[i];
    off += idx[i] * step[i];
  }
  out += r0 * inner;
  for (std::int64_t row = r0; row < r1; ++row) {
    const U* src = in + off;
    if (inner_step == 1) std::memcpy(out, src, static_cast<std::size_t>(inner) * sizeof(U));
    else for (std::int64_t j = 0; j < inner; ++j) out[j] = src[j * inner_step];
    out += inner;
    for (int i = r - 2; i >= 0; --i) {  // odometer over the outer output dims
      off += step[i];
      if (++idx[i] < od[i]) break;
      off -= step[i] * od[i];
      idx[i] = 0;
    }
  }
}

template <typename U>
void transpose_copy(const U* in, U* out, const Dims& od, const std::int64_t* step) {
  const std::int64_t inner = od[od.rank() - 1];
  parallel_for(od.numel() / inner, items_per_range(2 * inner * std::int64_t(sizeof(U))),
               [&](std::int64_t r0, std::int64_t r1) { transpose_rows(in, out, od, step, r0, r1); });
}

// Columns [c0, c1) of out [cols, R] = in [R, cols] for a few rows R (an
// image's channels into NHWC): R loads and R adjacent stores per column.
template <int R, typename U>
void interleave_rows(const U* __restrict in, U* __restrict out, std::int64_t cols,
                     std::int64_t c0, std::int64_t c1) {
  for (std::int64_t c = c0; c < c1; ++c)
    for (int r = 0; r < R; ++r) out[c * R + r] = in[r * cols + c];
}

#ifdef KILN_HAS_SIMD_CLONES
// The permute indices that interleave R = 2 or 3 rows 16 columns at a time:
// output vector j's lane l holds element e = 16 j + l of the interleaved
// row, row e % R's column e / R (of the 16 in the vectors). first: rows 0
// and 1 (a, b: indices 0-15, 16-31; row 2's lanes left at 0); second (R =
// 3): row 2 (d: 16-31) into those lanes of first's result.
template <int R>
struct InterleaveIndices {
  alignas(64) std::int32_t first[R][16], second[R][16];
};
template <int R>
constexpr InterleaveIndices<R> interleave_indices() {
  InterleaveIndices<R> ix{};
  for (int j = 0; j < R; ++j)
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * j + l, c = e / R, r = e % R;
      ix.first[j][l] = r == 0 ? c : r == 1 ? 16 + c : 0;
      ix.second[j][l] = r == 2 ? 16 + c : l;
    }
  return ix;
}

// interleave_rows<R> (R = 2 or 3) 16 columns at a time: R loads, R or 2R
// two-source permutes, R stores. 8x3x224x224 (an image batch into NHWC,
// one thread): 0.12 ms against the scalar loop's 0.7-0.8 in cache; 0.35
// against 0.67-0.84 in a model.
template <int R>
KILN_TARGET_AVX512 void interleave_rows_avx512(const std::uint32_t* in, std::uint32_t* out, std::int64_t cols,
                                               std::int64_t c0, std::int64_t c1) {
  static constexpr InterleaveIndices<R> ix = interleave_indices<R>();
  std::int64_t c = c0;
  for (; c + 16 <= c1; c += 16) {
    const __m512i a = _mm512_loadu_si512(in + c), b = _mm512_loadu_si512(in + cols + c);
    for (int j = 0; j < R; ++j) {
      __m512i v = _mm512_permutex2var_epi32(a, _mm512_load_si512(ix.first[j]), b);
      if constexpr (R == 3)
        v = _mm512_permutex2var_epi32(v, _mm512_load_si512(ix.second[j]), _mm512_loadu_si512(in + 2 * cols + c));
      _mm512_storeu_si512(out + R * c + 16 * j, v);
    }
  }
  interleave_rows<R>(in, out, cols, c, c1);
}
#endif

// Columns [c0, c1) of interleave_rows<R>, in AVX-512 for two rows (a
// ShuffleNet channel shuffle's pixel) and three (an RGB image) where the
// CPU has it.
template <int R, typename U>
void interleave_columns(const U* in, U* out, std::int64_t cols, std::int64_t c0, std::int64_t c1) {
#ifdef KILN_HAS_SIMD_CLONES
  if constexpr ((R == 2 || R == 3) && sizeof(U) == 4)
    if (cpu::cpu_simd_level() == cpu::SimdLevel::Avx512)
      return interleave_rows_avx512<R>(reinterpret_cast<const std::uint32_t*>(in),
                                       reinterpret_cast<std::uint32_t*>(out), cols, c0, c1);
#endif
  interleave_rows<R>(in, out, cols, c0, c1);
}

template <int R, typename U>
void swap_few_rows(const U* in, U* out, std::int64_t batch, std::int64_t cols) {
  parallel_for(batch * cols, items_per_range(2 * R * std::int64_t(sizeof(U))),
               [&](std::int64_t t0, std::int64_t t1) {
                 for (std::int64_t b = t0 / cols; b * cols < t1; ++b) {
                   const std::int64_t c0 = std::max(t0 - b * cols, std::int64_t{0});
                   const std::int64_t c1 = std::min(t1 - b * cols, cols);
                   interleave_columns<R>(in + b * R * cols, out + b * R * cols, cols, c0, c1);
                 }
               });
}

// out [b, cols, rows] = in [b, rows, cols], in 32x32 tiles (both sides
// touch whole cache lines), the tiles split across the kernel's threads;
// 1 to 4 rows as columns of R values.
template <typename U>
void swap_2d(const U* in, U* out, std::int64_t batch, std::int64_t rows, std::int64_t cols) {
  switch (rows) {
    case 1: return swap_few_rows<1>(in, out, batch, cols);
    case 2: return swap_few_rows<2>(in, out, batch, cols);
    case 3: return swap_few_rows<3>(in, out, batch, cols);
    case 4: return swap_few_rows<4>(in, out, batch, cols);
    default: break;
  }
  constexpr std::int64_t kTile = 32;
  const std::int64_t rt = (rows + kTile - 1) / kTile, ct = (cols + kTile - 1) / kTile;
  const std::int64_t tile_bytes = 2 * kTile * kTile * std::int64_t(sizeof(U));
  parallel_for(batch * rt * ct, items_per_range(tile_bytes), [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t b = t / (rt * ct), r0 = t / ct % rt * kTile, c0 = t % ct * kTile;
      const std::int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      const U* bi = in + b * rows * cols;
      U* bo = out + b * rows * cols;
      for (std::int64_t c = c0; c < c1; ++c)
        for (std::int64_t r = r0; r < r1; ++r) bo[c * rows + r] = bi[r * cols + c];
    }
  });
}

// A permutation that is a batch of 2-D transposes once runs of input axes
// that stay together are merged (NCHW <-> NHWC: [N, C, H·W] <-> [N, H·W, C]):
// {batch, rows, cols}, or all zeros.
std::array<std::int64_t, 3> as_swap_2d(const Dims& in, const std::int64_t* perm, int r) {
  std::int64_t start[Dims::kMaxRank], size[Dims::kMaxRank];  // runs, in output order
  int runs = 0;
  for (int i = 0; i < r; ++i) {
    if (i > 0 && perm[i] == perm[i - 1] + 1) {
      size[runs - 1] *= in[static_cast<int>(perm[i])];
      continue;
    }
    start[runs] = perm[i], size[runs] = in[static_cast<int>(perm[i])], ++runs;
  }
  if (runs == 2 && start[1] == 0) return {1, size[1], size[0]};
  if (runs == 3 && start[0] == 0 && start[2] < start[1]) return {size[0], size[2], size[1]};
  return {0, 0, 0};
}

void transpose_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<TransposeOp>();
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  if (static_cast<int>(a.perm.size()) != r)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' perm has ", a.perm.size(),
                " entries for an input of rank ", r, " (", x.type_string(), ")");
  std::int64_t in_stride[Dims::kMaxRank], step[Dims::kMaxRank], od[Dims::kMaxRank] = {};
  strides_of(x.dims(), in_stride);
  bool seen[Dims::kMaxRank] = {};
  bool identity = true;
  std::int64_t perm[Dims::kMaxRank];
  for (int i = 0; i < r; ++i) {
    std::int64_t p = perm[i] = axis_at_run(ctx, a.perm[i], r, "perm entry");
    if (seen[p])
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' perm is not a permutation (dim ", p, " appears twice)");
    seen[p] = true;
    identity = identity && p == i;
    od[i] = x.dims()[p];
    step[i] = in_stride[p];
  }
  Dims out_dims(std::span<const std::int64_t>(od, r));
  Tensor& out = ctx.alloc_output(0, out_dims, x.dtype());
  if (out.numel() == 0) return;
  if (identity || r <= 1) {
    std::memcpy(out.raw_data(), x.raw_data(), out.bytes());
    return;
  }
  if (const auto [b, rows, cols] = as_swap_2d(x.dims(), perm, r); b > 0 && size_of(x.dtype()) == 4)
    return swap_2d(static_cast<const std::uint32_t*>(x.raw_data()),
                   static_cast<std::uint32_t*>(out.raw_data()), b, rows, cols);
  // Output dims that read consecutive input axes walk the input as one dim.
  int m = 0;
  for (int i = 0; i < r; ++i) {
    if (i > 0 && perm[i] == perm[i - 1] + 1) {
      od[m - 1] *= od[i];
      step[m - 1] = step[i];
      continue;
    }
    od[m] = od[i], step[m] = step[i], ++m;
  }
  const Dims walk(std::span<const std::int64_t>(od, m));
  switch (size_of(x.dtype())) {
    case 1: transpose_copy(static_cast<const std::uint8_t*>(x.raw_data()),
                           static_cast<std::uint8_t*>(out.raw_data()), walk, step); break;
    case 2: transpose_copy(static_cast<const std::uint16_t*>(x.raw_data()),
                           static_cast<std::uint16_t*>(out.raw_data()), walk, step); break;
    case 4: transpose_copy(static_cast<const std::uint32_t*>(x.raw_data()),
                           static_cast<std::uint32_t*>(out.raw_data()), walk, step); break;
    case 8: transpose_copy(static_cast<const std::uint64_t*>(x.raw_data()),
                           static_cast<std::uint64_t*>(out.raw_data()), walk, step); break;
    default:
      throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no kernel for ",
                  to_string(x.dtype()));
  }
}

// ---- concat ----

void concat_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<ConcatOp>();
  const std::uint32_t n = ctx.num_inputs();
  if (n == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' needs at least one input");
  const Tensor& x0 = ctx.input(0);
  const int r = x0.rank();
  if (r == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot join rank-0 tensors");
  const std::int64_t axis = axis_at_run(ctx, a.axis, r);
  Dims od = x0.dims();
  od[axis] = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    bool ok = t.dtype() == x0.dtype() && t.rank() == r;
    for (int k = 0; ok && k < r; ++k) ok = k == axis || t.dims()[k] == x0.dims()[k];
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' input #", i, " ",
                  t.type_string(), " does not match input #0 ", x0.type_string(),
                  " (only dim ", axis, " may differ)");
    od[axis] += t.dims()[axis];
  }
  Tensor& out = ctx.alloc_output(0, od, x0.dtype());
  if (out.numel() == 0) return;
  std::int64_t outer = 1, inner = static_cast<std::int64_t>(size_of(x0.dtype()));
  for (int k = 0; k < axis; ++k) outer *= od[k];
  for (int k = axis + 1; k < r; ++k) inner *= od[k];
  const std::int64_t row = od[axis] * inner;  // bytes of one outer index of out
  parallel_for(outer, items_per_range(2 * row), [&](std::int64_t o0, std::int64_t o1) {
    char* dst = bytes_of(out) + o0 * row;
    for (std::int64_t o = o0; o < o1; ++o) {
      for (std::uint32_t i = 0; i < n; ++i) {
        const Tensor& t = ctx.input(i);
        const std::int64_t chunk = t.dims()[axis] * inner;
        if (chunk == 0) continue;
        std::memcpy(dst, bytes_of(t) + o * chunk, static_cast<std::size_t>(chunk));
        dst += chunk;
      }
    }
  });
}

// ---- split ----

void split_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<SplitOp>();
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  if (r == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot split a rank-0 tensor");
  const std::int64_t axis = axis_at_run(ctx, a.axis, r);
  const std::int64_t d = x.dims()[axis];
  const std::uint32_t parts = a.sections.empty() ? static_cast<std::uint32_t>(std::max<std::int64_t>(a.num, 0))
                                                 : static_cast<std::uint32_t>(a.sections.size());
  if (parts == 0 || parts != ctx.num_outputs())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' makes ", parts,
                " parts but has ", ctx.num_outputs(), " results");
  // The size of part i along the axis.
  std::int64_t rest = d;  // what the -1 section (if any) takes
  if (a.sections.empty()) {
    if (d % a.num != 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot split dim ", axis,
                  " of ", x.type_string(), " into ", a.num, " equal parts");
  } else {
    for (auto s : a.sections)
      if (s >= 0) rest -= s;
    bool has_rest = std::find(a.sections.begin(), a.sections.end(), -1) != a.sections.end();
    if (rest < 0 || (!has_rest && rest != 0))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' sections do not add up to dim ", axis, " of ", x.type_string());
  }
  auto part_size = [&](std::uint32_t i) {
    if (a.sections.empty()) return d / a.num;
    return a.sections[i] < 0 ? rest : a.sections[i];
  };
  std::int64_t outer = 1, inner = static_cast<std::int64_t>(size_of(x.dtype()));
  for (int k = 0; k < axis; ++k) outer *= x.dims()[k];
  for (int k = axis + 1; k < r; ++k) inner *= x.dims()[k];
  const std::int64_t row = d * inner;  // bytes of one outer index of x
  std::int64_t at = 0;                 // byte offset of the part within a row
  const char* src = x.numel() ? bytes_of(x) : nullptr;
  for (std::uint32_t i = 0; i < parts; ++i) {
    Dims od = x.dims();
    od[axis] = part_size(i);
    Tensor& out = ctx.alloc_output(i, od, x.dtype());
    const std::int64_t chunk = od[axis] * inner;
    if (out.numel() > 0) {
      char* dst = bytes_of(out);
      for (std::int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + o * chunk, src + o * row + at, static_cast<std::size_t>(chunk));
    }
    at += chunk;
  }
}

// ---- slice ----

// Copies `runs` runs of `run` bytes, run n from src + n · stride, packed
// into dst, the runs split across the threads. Short runs of whole words
// (an NHWC channel slice: a few dozen floats per pixel) go through a word
// loop, not a memcpy call each (vectorized: the kernels compile with
// GCC's dynamic vectorizer cost model, meson.build).
void copy_strided_runs(const char* src, std::int64_t stride, std::int64_t run, std::int64_t runs, char* dst) {
  using Word [[gnu::may_alias]] = std::uint32_t;
  parallel_for(runs, items_per_range(2 * run), [=](std::int64_t b, std::int64_t e) {
    if (run % 4 != 0 || run > 1024) {
      for (std::int64_t n = b; n < e; ++n)
        std::memcpy(dst + n * run, src + n * stride, static_cast<std::size_t>(run));
      return;
    }
    const std::int64_t words = run / 4;
    for (std::int64_t n = b; n < e; ++n) {
      Word* __restrict d = reinterpret_cast<Word*>(dst + n * run);
      const Word* __restrict s = reinterpret_cast<const Word*>(src + n * stride);
      for (std::int64_t i = 0; i < words; ++i) d[i] = s[i];
    }
  });
}

void slice_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<SliceOp>();
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' needs one start and one end per axis");
  const Dims& id = x.dims();
  Dims od = id;
  std::int64_t begin[Dims::kMaxRank] = {};
  for (std::size_t k = 0; k < a.axes.size(); ++k) {
    std::int64_t axis = axis_at_run(ctx, a.axes[k], r);
    auto [b, e] = slice_range(a.starts[k], a.ends[k], id[axis]);
    begin[axis] = b;
    od[axis] = e - b;
  }
  Tensor& out = ctx.alloc_output(0, od, x.dtype());
  if (out.numel() == 0) return;
  const std::int64_t es = static_cast<std::int64_t>(size_of(x.dtype()));
  // The innermost dims that are kept whole, plus the first cut one, make one
  // contiguous run of the input; iterate over the dims before it.
  int j = r - 1;
  while (j >= 0 && od[j] == id[j]) --j;
  if (j < 0) {
    std::memcpy(out.raw_data(), x.raw_data(), out.bytes());
    return;
  }
  std::int64_t is[Dims::kMaxRank];
  strides_of(id, is);
  const std::int64_t run = od[j] * is[j] * es;  // bytes
  std::int64_t base = 0;                        // element offset of the first run
  for (int k = 0; k <= j; ++k) base += begin[k] * is[k];
  std::int64_t runs = 1;
  for (int k = 0; k < j; ++k) runs *= od[k];
  const char* src = bytes_of(x);
  char* dst = bytes_of(out);
  bool whole_before = true;  // then run n starts n · (id[j] · is[j]) elements on
  for (int k = 0; k < j; ++k) whole_before = whole_before && od[k] == id[k];
  if (whole_before) return copy_strided_runs(src + base * es, id[j] * is[j] * es, run, runs, dst);
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t off = base;
  for (std::int64_t n = 0; n < runs; ++n) {
    std::memcpy(dst, src + off * es, static_cast<std::size_t>(run));
    dst += run;
    for (int k = j - 1; k >= 0; --k) {
      off += is[k];
      if (++idx[k] < od[k]) break;
      off -= is[k] * od[k];
      idx[k] = 0;
    }
  }
}

}  // namespace

KILN_REGISTER_KERNEL(ReshapeOp, Cpu, Undefined, reshape_kernel);
// Views change dims only, never data: the same kernels serve device tensors.
KILN_REGISTER_KERNEL(ReshapeOp, Cuda, Undefined, reshape_kernel);
KILN_REGISTER_KERNEL(TransposeOp, Cpu, Undefined, transpose_kernel);
KILN_REGISTER_KERNEL(ConcatOp, Cpu, Undefined, concat_kernel);
KILN_REGISTER_KERNEL(SplitOp, Cpu, Undefined, split_kernel);
KILN_REGISTER_KERNEL(SliceOp, Cpu, Undefined, slice_kernel);

}  // namespace kiln

namespace kiln::cpu {
namespace {

// full: every element = value. Kernel dtype = the output dtype (no inputs).
template <typename T>
struct FullK {
  static void run(KernelContext& ctx) {
    const auto& a = checked_full_attributes(ctx, data_type_of<T>);
    T v;
    if constexpr (std::is_same_v<T, bool>) {
      v = a.value != 0.0;
    } else if constexpr (std::is_integral_v<T>) {
      const double lo = static_cast<double>(std::numeric_limits<T>::min());
      const double hi = -lo;  // 2^(bits-1), exact
      if (!(a.value >= lo && a.value < hi))
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' value ", a.value,
                    " does not fit ", to_string(a.dtype));
      v = static_cast<T>(a.value);
    } else {
      v = static_cast<T>(a.value);
    }
    Tensor& out = ctx.alloc_output(0, Dims(a.shape), a.dtype);
    T* __restrict po = out.data<T>();
    const std::int64_t n = out.numel();
    for (std::int64_t i = 0; i < n; ++i) po[i] = v;
  }
};

// full in bf16 / f16: the value rounded once to the dtype, its bits filled.
template <DataType Dt>
void full_half_kernel(KernelContext& ctx) {
  const auto& a = checked_full_attributes(ctx, Dt);
  const std::uint16_t v = Dt == DataType::BFloat16 ? float_to_bfloat16(static_cast<float>(a.value))
                                                   : double_to_half(a.value);
  Tensor& out = ctx.alloc_output(0, Dims(a.shape), a.dtype);
  auto* po = static_cast<std::uint16_t*>(out.raw_data());
  std::fill(po, po + out.numel(), v);
}

// ---- reduce_as ----

// The sum of n contiguous elements in Acc: kLanes partial sums (they
// vectorize), the elements past the last whole group, then the lanes.
template <typename Acc, typename T>
KILN_SIMD_INLINE Acc sum_run(const T* __restrict row, std::int64_t n) {
  constexpr std::int64_t kLanes = 8;
  Acc lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) lane[l] += static_cast<Acc>(row[j + l]);
  Acc total = 0;
  for (; j < n; ++j) total += static_cast<Acc>(row[j]);
  for (std::int64_t l = 0; l < kLanes; ++l) total += lane[l];
  return total;
}

// a[j] += row[j] for j in [0, n).
template <typename Acc, typename T>
KILN_SIMD_INLINE void add_run(Acc* __restrict a, const T* __restrict row, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) a[j] += static_cast<Acc>(row[j]);
}

// acc[target index] += x over x's dims, the target aligned with x's
// trailing dims (a target dim of 1, or a leading dim of x, is summed). x's
// dims are merged into maximal runs that are all summed or all kept, so the
// innermost run is one contiguous stretch: summed into one number (in
// kLanes partial sums, which vectorize) or added onto a contiguous stretch of
// acc (a conv bias's [N, C, H·W] → [C] is N·C stretches of H·W).
template <typename T, typename Acc>
KILN_SIMD_INLINE void sum_groups(const T* px, const Dims& xd, const Dims& td, Acc* acc) {
  struct Run {
    std::int64_t n;
    bool summed;
    std::int64_t out_stride = 0;  // 0 for summed runs
  };
  const int rx = xd.rank(), lead = rx - td.rank();
  Run runs[Dims::kMaxRank];
  int nr = 0;
  for (int i = 0; i < rx; ++i) {
    if (xd[i] == 1) continue;
    const bool summed = i < lead || td[i - lead] == 1;
    if (nr > 0 && runs[nr - 1].summed == summed) runs[nr - 1].n *= xd[i];
    else runs[nr++] = Run{xd[i], summed};
  }
  std::int64_t s = 1;
  for (int k = nr - 1; k >= 0; --k)
    if (!runs[k].summed) {
      runs[k].out_stride = s;
      s *= runs[k].n;
    }
  const Run inner = runs[nr - 1];
  const std::int64_t outer = xd.numel() / inner.n;
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t o = 0;
  for (std::int64_t r = 0; r < outer; ++r) {
    const T* __restrict row = px + r * inner.n;
    if (inner.summed) acc[o] += sum_run<Acc>(row, inner.n);
    else add_run(acc + o, row, inner.n);
    for (int d = nr - 2; d >= 0; --d) {  // odometer over the outer runs
      o += runs[d].out_stride;
      if (++idx[d] < runs[d].n) break;
      o -= runs[d].out_stride * runs[d].n;
      idx[d] = 0;
    }
  }
}

// reduce_as's sums, compiled for each SIMD level (simd_dispatch): all of x
// into one number; x into acc by sum_groups; and acc[j] += x[r, j] over the
// rows r in order, for columns [j0, j1) of x as [rows, n] (a bias
// gradient's [B·L, N] → [N]: sum_groups' sums for that shape, the same
// bits, split by columns).
template <typename Acc, typename T>
struct SumAll {
  KILN_SIMD_INLINE static void run(const T* px, std::int64_t n, Acc* total) { *total = sum_run<Acc>(px, n); }
};
template <typename Acc, typename T>
struct SumGroups {
  KILN_SIMD_INLINE static void run(const T* px, Dims xd, Dims td, Acc* acc) { sum_groups(px, xd, td, acc); }
};
template <typename Acc, typename T>
struct ColumnSums {
  KILN_SIMD_INLINE static void run(const T* px, Acc* acc, std::int64_t rows, std::int64_t n, std::int64_t j0,
                                   std::int64_t j1) {
    for (std::int64_t r = 0; r < rows; ++r) add_run(acc + j0, px + r * n + j0, j1 - j0);
  }
};

constexpr std::int64_t kMinSplitColumns = 2048;

// Whether x (dims xd) sums into the target td as [rows, td.numel()] rows
// added together: td is x's trailing dims exactly (leading ones aside).
bool sums_whole_rows(const Dims& xd, const Dims& td) {
  const int lead = xd.rank() - td.rank();
  for (int i = 0; i < td.rank(); ++i)
    if (td[i] != xd[lead + i]) return false;
  return true;
}

// How reduce_as reads and writes elements of type T: as they are, f32 sums
// taken in f64 (as kiln.sum does).
template <typename T>
struct PlainSums {
  using Stored = T;
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  static const Tensor& input(const KernelContext& ctx) { return typed_input<T>(ctx, 0); }
  static T store(Acc a) { return static_cast<T>(a); }
};

// A bf16 or f16 element's bits, read as its value (exact in f32 and f64).
template <DataType D>
struct HalfValue {
  std::uint16_t bits;
  explicit operator double() const { return half_value<D>(bits); }
};

// bf16 and f16 read where they lie, summed in f64 and stored through f32
// as the f32 kernel's results on the widened x are, rounded once: its bits
// without an f32 copy of x (a bias gradient's [B·L, N] → [N]).
template <DataType D>
struct HalfSums {
  using Stored = HalfValue<D>;
  using Acc = double;
  static const Tensor& input(const KernelContext& ctx) { return input_of(ctx, 0, D); }
  static Stored store(double a) { return {rounded_half<D>(static_cast<float>(a))}; }
};

template <typename Sums>
struct ReduceAsK {
  using Stored = typename Sums::Stored;
  using Acc = typename Sums::Acc;

  static void run(KernelContext& ctx) {
    const Tensor& xin = Sums::input(ctx);
    const Dims td = ctx.input(1).dims();
    const Dims& xd = xin.dims();
    const int rx = xd.rank(), rt = td.rank(), lead = rx - rt;
    bool ok = rt <= rx;
    for (int i = 0; ok && i < rt; ++i) ok = td[i] == xd[lead + i] || td[i] == 1;
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot sum [",
                  xd.to_string(), "] down to [", td.to_string(),
                  "] (the target's dims must equal x's trailing dims or be 1)");
    const std::int64_t on = td.numel(), xn = xin.numel();
    if (on == 1 && xn > 1) {  // everything into one element (a bias of [1]): sum_groups' one run
      Acc total = 0;
      simd_dispatch<SumAll<Acc, Stored>>(elements(xin), xn, &total);
      *static_cast<Stored*>(ctx.alloc_output(0, td, xin.dtype()).raw_data()) = Sums::store(total);
      return;
    }
    const Tensor x = xin;  // a copy: alive while the output is (re)allocated
    Tensor& out = ctx.alloc_output(0, td, x.dtype());
    const Stored* px = elements(x);
    auto* po = static_cast<Stored*>(out.raw_data());
    if (on == xn) {  // nothing summed (only size-1 dims differ)
      if (xn) std::memcpy(po, px, static_cast<std::size_t>(xn) * sizeof(Stored));
      return;
    }
    Acc* acc = scratch<Acc>(on);  // f32 sums accumulate in f64, as kiln.sum does
    std::fill(acc, acc + on, Acc(0));
    if (xn > 0 && sums_whole_rows(xd, td)) {
      // Columns split across the kernel's threads, each summed over the rows
      // in order; at least kMinSplitColumns to a thread (in a GPT step on a
      // 2-core VM, two threads summing 256-1024 columns each of a row were
      // slower than one, 4096 each faster).
      const std::int64_t rows = xn / on;
      const std::int64_t per_range = std::max(kMinSplitColumns, items_per_range(rows * std::int64_t(sizeof(Stored))));
      parallel_for(on, per_range, [&](std::int64_t j0, std::int64_t j1) {
        simd_dispatch<ColumnSums<Acc, Stored>>(px, acc, rows, on, j0, j1);
      });
    } else if (xn > 0) {
      simd_dispatch<SumGroups<Acc, Stored>>(px, xd, td, acc);
    }
    for (std::int64_t j = 0; j < on; ++j) po[j] = Sums::store(acc[j]);
  }

  static const Stored* elements(const Tensor& t) { return static_cast<const Stored*>(t.raw_data()); }
};

// ---- reshape_as: a view (ViewLike {0, 0}), any dtype ----

void reshape_as_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Dims td = ctx.input(1).dims();
  if (td.numel() != x.numel())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot view [",
                x.dims().to_string(), "] (", x.numel(), " elements) as [", td.to_string(), "] (",
                td.numel(), " elements)");
  ctx.output(0) = x.reshape(td);
}

// ---- zeros_like: any dtype ----

void zeros_like_kernel(KernelContext& ctx) {
  const Dims d = ctx.input(0).dims();
  const DataType dt = ctx.input(0).dtype();
  Tensor& out = ctx.alloc_output(0, d, dt);
  if (out.bytes()) std::memset(out.raw_data(), 0, out.bytes());
}

std::int64_t grad_axis_at_run(const KernelContext& ctx, std::int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axis ", axis,
                " is out of range for an input of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// ---- split_as ----

template <typename T>
struct SplitAsK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor x = typed_input<T>(ctx, 0);
    const Dims& xd = x.dims();
    const std::int64_t axis = grad_axis_at_run(ctx, ctx.attrs<SplitAsOp>().axis, xd.rank());
    const std::uint32_t parts = ctx.num_inputs() - 1;
    if (parts != ctx.num_outputs())
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' has ", parts, " refs but ",
                  ctx.num_outputs(), " results (one result per ref)");
    std::int64_t total = 0;
    for (std::uint32_t p = 0; p < parts; ++p) {
      Dims rd = ctx.input(p + 1).dims();
      bool ok = rd.rank() == xd.rank();
      for (int k = 0; ok && k < xd.rank(); ++k) ok = k == axis || rd[k] == xd[k];
      if (!ok)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' ref #", p + 1, " [", rd.to_string(),
                    "] must match x [", xd.to_string(), "] in every dim but axis ", axis);
      total += rd[static_cast<int>(axis)];
    }
    if (total != xd[static_cast<int>(axis)])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' refs' dims along axis ", axis,
                  " add up to ", total, ", x [", xd.to_string(), "] has ",
                  xd[static_cast<int>(axis)]);
    std::int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; ++k) outer *= xd[k];
    for (int k = static_cast<int>(axis) + 1; k < xd.rank(); ++k) inner *= xd[k];
    const std::int64_t xrow = xd[static_cast<int>(axis)] * inner;
    const T* px = x.data<T>();
    std::int64_t offset = 0;
    for (std::uint32_t p = 0; p < parts; ++p) {
      const Dims pd = ctx.input(p + 1).dims();
      Tensor& out = ctx.alloc_output(p, pd, x.dtype());
      const std::int64_t prow = pd[static_cast<int>(axis)] * inner;
      T* po = out.data<T>();
      if (prow > 0)
        for (std::int64_t o = 0; o < outer; ++o)
          std::memcpy(po + o * prow, px + o * xrow + offset,
                      static_cast<std::size_t>(prow) * sizeof(T));
      offset += prow;
    }
  }
};

// ---- slice_grad ----

template <typename T>
struct SliceGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<SliceOp>>();
    const std::string_view op = ctx.op()->name();
    const Dims xd = ctx.input(0).dims();
    const Tensor dout = typed_input<T>(ctx, 1);
    if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size())
      throw_error(ErrorKind::InvalidArgument, "op '", op,
                  "' needs one start and one end per axis, got ", a.axes.size(), " axes, ",
                  a.starts.size(), " starts, ", a.ends.size(), " ends");
    std::int64_t begin[Dims::kMaxRank] = {};
    Dims want = xd;
    for (std::size_t k = 0; k < a.axes.size(); ++k) {
      const int ax = static_cast<int>(grad_axis_at_run(ctx, a.axes[k], xd.rank()));
      auto [b, e] = slice_range(a.starts[k], a.ends[k], xd[ax]);
      begin[ax] = b;
      want[ax] = e - b;
    }
    if (dout.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout [", dout.dims().to_string(),
                  "] must have the slice's shape [", want.to_string(), "]");
    Tensor& dx = ctx.alloc_output(0, xd, dout.dtype());
    T* pdx = dx.data<T>();
    const std::int64_t xn = xd.numel(), dn = want.numel();
    if (xn) std::memset(pdx, 0, static_cast<std::size_t>(xn) * sizeof(T));
    if (dn == 0) return;
    const int r = xd.rank();
    std::int64_t xs[Dims::kMaxRank];
    std::int64_t s = 1;
    for (int i = r - 1; i >= 0; --i) {
      xs[i] = s;
      s *= xd[i];
    }
    std::int64_t base = 0;
    for (int i = 0; i < r; ++i) base += begin[i] * xs[i];
    const T* pd = dout.data<T>();
    if (r == 0) {
      pdx[0] = pd[0];
      return;
    }
    // Rows along the last dim are contiguous in both.
    const std::int64_t n = want[r - 1];
    std::int64_t idx[Dims::kMaxRank] = {};
    std::int64_t off = base;
    for (std::int64_t i = 0; i < dn; i += n) {
      std::memcpy(pdx + off, pd + i, static_cast<std::size_t>(n) * sizeof(T));
      for (int d = r - 2; d >= 0; --d) {
        off += xs[d];
        if (++idx[d] < want[d]) break;
        off -= xs[d] * want[d];
        idx[d] = 0;
      }
    }
  }
};

}  // namespace

KILN_REGISTER_KERNELS(FullOp, Cpu, FullK, float, double, std::int8_t, std::int32_t, std::int64_t, bool);
KILN_REGISTER_KERNEL(FullOp, Cpu, BFloat16, full_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(FullOp, Cpu, Float16, full_half_kernel<DataType::Float16>);
template <typename T>
using PlainReduceAsK = ReduceAsK<PlainSums<T>>;
KILN_REGISTER_KERNELS(ReduceAsOp, Cpu, PlainReduceAsK, float, double);
[[maybe_unused]] const bool half_reduce_as_registered =
    (KernelRegistrar<ReduceAsOp>(PlaceKind::Cpu, DataType::BFloat16, &ReduceAsK<HalfSums<DataType::BFloat16>>::run,
                                 ReduceAsOp::name),
     KernelRegistrar<ReduceAsOp>(PlaceKind::Cpu, DataType::Float16, &ReduceAsK<HalfSums<DataType::Float16>>::run,
                                 ReduceAsOp::name),
     true);
KILN_REGISTER_KERNEL(ReshapeAsOp, Cpu, Undefined, reshape_as_kernel);
KILN_REGISTER_KERNEL(ReshapeAsOp, Cuda, Undefined, reshape_as_kernel);  // a view, as reshape
KILN_REGISTER_KERNEL(ZerosLikeOp, Cpu, Undefined, zeros_like_kernel);
KILN_REGISTER_KERNELS(SplitAsOp, Cpu, SplitAsK, float, double);
KILN_REGISTER_KERNELS(GradOf<SliceOp>, Cpu, SliceGradK, float, double);

}  // namespace kiln::cpu
