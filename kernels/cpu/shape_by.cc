// CPU kernels of the run-time shape ops (kiln/dialect/shape_ops.h): shape,
// numel, the views reshape_by / squeeze_by / unsqueeze_by, expand_by and
// tile (broadcast copies), strided_slice / slice_by and their gradients (a
// strided gather / scatter), split_by, sum_by, full_by and range. Each reads
// its small shape, bounds or axes operand on the host, checked: a wrong
// length, dtype or value is a kiln::Error naming the op.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu_kernel_util.h"
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/shape_ops.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cpu {
namespace {

constexpr int kMaxRank = Dims::kMaxRank;

// Input i as at most `max` integers (a 1-D i32/i64 tensor) into `out`; their count.
int read_ints(const KernelContext& ctx, std::uint32_t i, const char* what, std::int64_t* out,
              int max) {
  const Tensor& t = ctx.input(i);
  const std::string_view op = ctx.op()->name();
  if (t.rank() != 1 || (t.dtype() != DataType::Int64 && t.dtype() != DataType::Int32))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (input #", i,
                ") must be a 1-D i32 or i64 tensor, got ", t.type_string());
  if (t.place().kind != PlaceKind::Cpu && t.place().kind != PlaceKind::HostStream)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' reads its ", what, " (input #", i,
                ") on the host, got a tensor on ", t.place().to_string());
  const std::int64_t n = t.numel();
  if (n > max)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (input #", i, ") has ", n,
                " entries, at most ", max, " allowed");
  if (t.dtype() == DataType::Int64) {
    const std::int64_t* p = t.data<std::int64_t>();
    for (std::int64_t k = 0; k < n; ++k) out[k] = p[k];
  } else {
    const std::int32_t* p = t.data<std::int32_t>();
    for (std::int64_t k = 0; k < n; ++k) out[k] = p[k];
  }
  return static_cast<int>(n);
}

std::int64_t axis_at_run(const KernelContext& ctx, std::int64_t axis, int rank, const char* what = "axis") {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " ", axis,
                " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

Dims dims_of(const std::int64_t* d, int r) { return Dims(std::span<const std::int64_t>(d, r)); }
// "[2, -1]": integers read from an operand, for messages.
std::string list(const std::int64_t* d, int n) { return meta::dims_string(std::vector<std::int64_t>(d, d + n)); }

void strides_of(const Dims& d, std::int64_t* s) {
  std::int64_t acc = 1;
  for (int i = d.rank() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= d[i];
  }
}

// Rows [r0, r1) (a row: the innermost dim) of walk below.
template <typename U, bool Scatter>
void walk_rows(const U* src, U* dst, int r, const std::int64_t* od, const std::int64_t* stride,
               std::int64_t base, std::int64_t r0, std::int64_t r1) {
  const std::int64_t inner = od[r - 1], s = stride[r - 1];
  std::int64_t idx[2 * kMaxRank] = {};
  std::int64_t off = base;
  for (std::int64_t i = r - 2, row = r0; i >= 0; --i) {  // the odometer at row r0
    idx[i] = row % od[i];
    row /= od[i];
    off += idx[i] * stride[i];
  }
  for (std::int64_t j = r0 * inner; j < r1 * inner; j += inner) {
    if (s == 1) {
      if constexpr (Scatter) std::memcpy(dst + off, src + j, sizeof(U) * std::size_t(inner));
      else std::memcpy(dst + j, src + off, sizeof(U) * std::size_t(inner));
    } else {
      for (std::int64_t k = 0; k < inner; ++k) {
        if constexpr (Scatter) dst[off + k * s] = src[j + k];
        else dst[j + k] = src[off + k * s];
      }
    }
    for (int i = r - 2; i >= 0; --i) {  // odometer over the outer dims
      off += stride[i];
      if (++idx[i] < od[i]) break;
      off -= stride[i] * od[i];
      idx[i] = 0;
    }
  }
}

// Walks the dense index space `od` (rank r) in row-major order with a second
// offset that advances by `stride` per dim, starting at `base`: gather
// (dense[j] = strided[off]) or scatter (strided[off] = dense[j]). Distinct
// dense elements reach distinct strided ones, so the rows are split across
// the kernel's threads.
template <typename U, bool Scatter>
void walk(const U* src, U* dst, int r, const std::int64_t* od, const std::int64_t* stride,
          std::int64_t base) {
  std::int64_t n = 1;
  for (int i = 0; i < r; ++i) n *= od[i];
  if (n == 0) return;
  if (r == 0) {
    if constexpr (Scatter) dst[base] = src[0];
    else dst[0] = src[base];
    return;
  }
  const std::int64_t inner = od[r - 1];
  parallel_for(n / inner, items_per_range(2 * inner * std::int64_t(sizeof(U))),
               [&](std::int64_t r0, std::int64_t r1) {
                 walk_rows<U, Scatter>(src, dst, r, od, stride, base, r0, r1);
               });
}

template <bool Scatter>
void walk_bytes(const KernelContext& ctx, DataType dt, const void* src, void* dst, int r,
                const std::int64_t* od, const std::int64_t* stride, std::int64_t base) {
  switch (size_of(dt)) {
    case 1: walk<std::uint8_t, Scatter>(static_cast<const std::uint8_t*>(src), static_cast<std::uint8_t*>(dst), r, od, stride, base); break;
    case 2: walk<std::uint16_t, Scatter>(static_cast<const std::uint16_t*>(src), static_cast<std::uint16_t*>(dst), r, od, stride, base); break;
    case 4: walk<std::uint32_t, Scatter>(static_cast<const std::uint32_t*>(src), static_cast<std::uint32_t*>(dst), r, od, stride, base); break;
    case 8: walk<std::uint64_t, Scatter>(static_cast<const std::uint64_t*>(src), static_cast<std::uint64_t*>(dst), r, od, stride, base); break;
    default:
      throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no kernel for ", to_string(dt));
  }
}

// kiln::Error (OutOfRange) when dims read from an operand multiply beyond
// int64: the output buffer could not hold them.
void check_numel(const KernelContext& ctx, const std::int64_t* d, int r) {
  std::int64_t n = 1;
  for (int i = 0; i < r; ++i)
    if (__builtin_mul_overflow(n, d[i], &n))
      throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' result dims ", list(d, r),
                  " multiply beyond int64");
}

// kiln::Error unless the dims made at run time match the op's known_dims.
void check_known(const KernelContext& ctx, const std::vector<std::int64_t>& known,
                 const std::int64_t* d, int r) {
  if (known.empty()) return;
  bool ok = static_cast<int>(known.size()) == r;
  for (int i = 0; ok && i < r; ++i) ok = known[static_cast<std::size_t>(i)] < 0 || known[static_cast<std::size_t>(i)] == d[i];
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' made dims ", list(d, r),
                " at run time, the program expects ", meta::dims_string(known));
}

// ---- shape / numel ----

void shape_kernel(KernelContext& ctx) {
  const Dims d = ctx.input(0).dims();
  Tensor& out = ctx.alloc_output(0, Dims{d.rank()}, DataType::Int64);
  std::int64_t* p = out.data<std::int64_t>();
  for (int i = 0; i < d.rank(); ++i) p[i] = d[i];
}

void numel_kernel(KernelContext& ctx) {
  const std::int64_t n = ctx.input(0).numel();
  Tensor& out = ctx.alloc_output(0, Dims(), DataType::Int64);
  *out.data<std::int64_t>() = n;
}

// ---- reshape_by: a view ----

void reshape_by_kernel(KernelContext& ctx) {
  const auto& attrs = ctx.attrs<ReshapeByOp>();
  const bool allowzero = attrs.allowzero;
  const Tensor& x = ctx.input(0);
  const std::string_view op = ctx.op()->name();
  std::int64_t d[kMaxRank];
  const int r = read_ints(ctx, 1, "shape", d, kMaxRank);
  int infer_at = -1;
  std::int64_t known = 1;
  for (int i = 0; i < r; ++i) {
    if (d[i] == 0 && !allowzero) {
      if (i >= x.rank())
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' shape[", i,
                    "] = 0 copies an input dim, but the input ", x.type_string(), " has rank ", x.rank());
      d[i] = x.dims()[i];
    }
    if (d[i] == -1) {
      if (infer_at >= 0)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' shape may hold one -1, got two");
      infer_at = i;
    } else if (d[i] < 0) {
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' shape dims must be >= -1, got ", d[i]);
    } else if (__builtin_mul_overflow(known, d[i], &known)) {
      throw_error(ErrorKind::OutOfRange, "op '", op, "' shape dims multiply beyond int64");
    }
  }
  const std::int64_t total = x.numel();
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot reshape ", x.type_string(), " (",
                  total, " elements) with a -1 beside dims multiplying to ", known);
    d[infer_at] = total / known;
  } else if (known != total) {
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot reshape ", x.type_string(), " (",
                total, " elements) into ", list(d, r), " (", known, " elements)");
  }
  check_known(ctx, attrs.known_dims, d, r);
  ctx.output(0) = x.reshape(dims_of(d, r));
}

// ---- squeeze_by / unsqueeze_by: views ----

void squeeze_by_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::int64_t axes[kMaxRank];
  const int n = read_ints(ctx, 1, "axes", axes, kMaxRank);
  bool drop[kMaxRank] = {};
  for (int k = 0; k < n; ++k) {
    const std::int64_t a = axis_at_run(ctx, axes[k], x.rank());
    if (drop[a])
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axes name dim ", a, " twice");
    if (x.dims()[static_cast<int>(a)] != 1)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot squeeze dim ", a,
                  " of ", x.type_string(), ": it is not 1");
    drop[a] = true;
  }
  std::int64_t d[kMaxRank];
  int r = 0;
  for (int i = 0; i < x.rank(); ++i)
    if (!drop[i]) d[r++] = x.dims()[i];
  ctx.output(0) = x.reshape(dims_of(d, r));
}

void unsqueeze_by_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::int64_t axes[kMaxRank];
  const int n = read_ints(ctx, 1, "axes", axes, kMaxRank);
  const int r = x.rank() + n;
  if (r > kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' result rank ", r,
                " exceeds the maximum ", kMaxRank);
  bool ins[kMaxRank] = {};
  for (int k = 0; k < n; ++k) {
    const std::int64_t a = axis_at_run(ctx, axes[k], r);
    if (ins[a])
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axes name dim ", a, " twice");
    ins[a] = true;
  }
  std::int64_t d[kMaxRank];
  for (int i = 0, j = 0; i < r; ++i) d[i] = ins[i] ? 1 : x.dims()[j++];
  ctx.output(0) = x.reshape(dims_of(d, r));
}

// ---- expand_by / tile: broadcast copies ----

void expand_by_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string_view op = ctx.op()->name();
  std::int64_t s[kMaxRank];
  const int n = read_ints(ctx, 1, "shape", s, kMaxRank);
  const int xr = x.rank(), r = std::max(n, xr);
  std::int64_t od[kMaxRank], stride[kMaxRank], xs[kMaxRank];
  strides_of(x.dims(), xs);
  for (int i = 0; i < r; ++i) {
    const int ix = i - (r - xr), is = i - (r - n);
    const std::int64_t a = ix >= 0 ? x.dims()[ix] : 1, b = is >= 0 ? s[is] : 1;
    if (b < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' shape ", list(s, n),
                  " holds a negative dim");
    if (a != b && a != 1 && b != 1)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot expand ", x.type_string(), " to ",
                  list(s, n), ": dim ", i, " is ", a, " and ", b, " (expected equal or 1)");
    od[i] = a == 1 ? b : a;
    stride[i] = (ix >= 0 && a != 1) ? xs[ix] : 0;
  }
  check_known(ctx, ctx.attrs<ExpandByOp>().known_dims, od, r);
  check_numel(ctx, od, r);
  Tensor& out = ctx.alloc_output(0, dims_of(od, r), x.dtype());
  if (out.numel() == 0) return;
  walk_bytes<false>(ctx, x.dtype(), x.raw_data(), out.raw_data(), r, od, stride, 0);
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::int64_t rep[kMaxRank];
  const int n = read_ints(ctx, 1, "repeats", rep, kMaxRank);
  const int r = x.rank();
  if (n != r)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' repeats ",
                list(rep, n), " must have one entry per dim of ", x.type_string());
  // out viewed as [rep0, d0, rep1, d1, …]: x broadcast along the rep dims.
  std::int64_t od[kMaxRank], wd[2 * kMaxRank], ws[2 * kMaxRank], xs[kMaxRank];
  strides_of(x.dims(), xs);
  for (int i = 0; i < r; ++i) {
    if (rep[i] < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' repeats ",
                  list(rep, n), " must be >= 0");
    if (__builtin_mul_overflow(rep[i], x.dims()[i], &od[i]))
      throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' result dim ", i, " overflows int64");
    wd[2 * i] = rep[i];
    ws[2 * i] = 0;
    wd[2 * i + 1] = x.dims()[i];
    ws[2 * i + 1] = xs[i];
  }
  check_numel(ctx, od, r);
  Tensor& out = ctx.alloc_output(0, dims_of(od, r), x.dtype());
  if (out.numel() == 0) return;
  walk_bytes<false>(ctx, x.dtype(), x.raw_data(), out.raw_data(), 2 * r, wd, ws, 0);
}

// ---- strided_slice / slice_by ----

// The result dims, the input strides per result dim and the first element's
// offset of a strided slice of `xd`.
struct SlicePlan {
  std::int64_t od[kMaxRank];
  std::int64_t stride[kMaxRank];
  std::int64_t base = 0;
};

SlicePlan plan_slice(const KernelContext& ctx, const Dims& xd, int n, const std::int64_t* axes,
                     const std::int64_t* starts, const std::int64_t* ends, const std::int64_t* steps) {
  SlicePlan p;
  const int r = xd.rank();
  std::int64_t xs[kMaxRank];
  strides_of(xd, xs);
  bool seen[kMaxRank] = {};
  for (int i = 0; i < r; ++i) {
    p.od[i] = xd[i];
    p.stride[i] = xs[i];
  }
  for (int k = 0; k < n; ++k) {
    const std::int64_t a = axis_at_run(ctx, axes[k], r);
    if (seen[a])
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axes name dim ", a, " twice");
    seen[a] = true;
    auto [first, count] = strided_slice_range(ctx.op()->name(), starts[k], ends[k], steps[k],
                                              xd[static_cast<int>(a)]);
    p.od[a] = count;
    p.stride[a] = count > 1 ? xs[a] * steps[k] : 0;  // |step| < dim then: no overflow
    if (count > 0) p.base += first * xs[a];
  }
  return p;
}

// p's dims with each pair the strided side also steps over as one dim
// merged (longer rows for walk); returns the merged rank.
int merge_walk_dims(SlicePlan& p, int r) {
  int m = 0;
  for (int i = 0; i < r; ++i) {
    if (m > 0 && p.stride[m - 1] == p.stride[i] * p.od[i]) {
      p.od[m - 1] *= p.od[i];
      p.stride[m - 1] = p.stride[i];
      continue;
    }
    p.od[m] = p.od[i], p.stride[m] = p.stride[i], ++m;
  }
  return m;
}

void slice_forward(KernelContext& ctx, const SlicePlan& p) {
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  Tensor& out = ctx.alloc_output(0, dims_of(p.od, r), x.dtype());
  if (out.numel() == 0) return;
  SlicePlan w = p;
  const int m = merge_walk_dims(w, r);
  walk_bytes<false>(ctx, x.dtype(), x.raw_data(), out.raw_data(), m, w.od, w.stride, w.base);
}

// dx: zeros like x (input 0), dout (input `d`) scattered back.
void slice_backward(KernelContext& ctx, const SlicePlan& p, std::uint32_t d) {
  const Dims xd = ctx.input(0).dims();
  const Tensor& dout = ctx.input(d);
  const int r = xd.rank();
  if (dout.dims() != dims_of(p.od, r))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' dout ", dout.type_string(),
                " must have the slice's shape [", dims_of(p.od, r).to_string(), "]");
  Tensor& dx = ctx.alloc_output(0, xd, dout.dtype());
  if (dx.bytes()) std::memset(dx.raw_data(), 0, dx.bytes());
  if (dout.numel() == 0) return;
  SlicePlan w = p;
  const int m = merge_walk_dims(w, r);
  walk_bytes<true>(ctx, dout.dtype(), dout.raw_data(), dx.raw_data(), m, w.od, w.stride, w.base);
}

SlicePlan strided_plan(const KernelContext& ctx, const StridedSliceOp::Attributes& a) {
  const auto n = a.axes.size();
  if (a.starts.size() != n || a.ends.size() != n || a.steps.size() != n || n > kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' needs one start, end and step per axis, at most ", kMaxRank);
  return plan_slice(ctx, ctx.input(0).dims(), static_cast<int>(n), a.axes.data(), a.starts.data(),
                    a.ends.data(), a.steps.data());
}

void strided_slice_kernel(KernelContext& ctx) {
  slice_forward(ctx, strided_plan(ctx, ctx.attrs<StridedSliceOp>()));
}
void strided_slice_grad_kernel(KernelContext& ctx) {
  slice_backward(ctx, strided_plan(ctx, ctx.attrs<GradOf<StridedSliceOp>>()), 1);
}

SlicePlan slice_by_plan(const KernelContext& ctx) {
  std::int64_t v[4][kMaxRank];
  const char* what[] = {"starts", "ends", "axes", "steps"};
  int n = 0;
  for (std::uint32_t i = 0; i < 4; ++i) {
    const int m = read_ints(ctx, i + 1, what[i], v[i], kMaxRank);
    if (i == 0) n = m;
    else if (m != n)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what[i], " has ", m,
                  " entries, starts has ", n);
  }
  return plan_slice(ctx, ctx.input(0).dims(), n, v[2], v[0], v[1], v[3]);
}

void slice_by_kernel(KernelContext& ctx) { slice_forward(ctx, slice_by_plan(ctx)); }
void slice_by_grad_kernel(KernelContext& ctx) { slice_backward(ctx, slice_by_plan(ctx), 5); }

// ---- split_by ----

void split_by_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string_view op = ctx.op()->name();
  const int r = x.rank();
  if (r == 0) throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot split a rank-0 tensor");
  const std::int64_t axis = axis_at_run(ctx, ctx.attrs<SplitByOp>().axis, r);
  const Tensor& st = ctx.input(1);
  if (st.rank() != 1 || st.numel() != ctx.num_outputs())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' sizes ", st.type_string(), " must hold ",
                ctx.num_outputs(), " entries (one per result)");
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(st.numel()));
  if (st.dtype() == DataType::Int64) sizes = st.to_vector<std::int64_t>();
  else if (st.dtype() == DataType::Int32)
    for (std::size_t k = 0; k < sizes.size(); ++k) sizes[k] = st.data<std::int32_t>()[k];
  else
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' sizes must be i32 or i64, got ", st.type_string());
  const std::int64_t d = x.dims()[static_cast<int>(axis)];
  std::int64_t sum = 0;
  for (auto s : sizes) {
    if (s < 0 || __builtin_add_overflow(sum, s, &sum))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' sizes must be >= 0, got ", s);
  }
  if (sum != d)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' sizes add up to ", sum, ", dim ", axis,
                " of ", x.type_string(), " is ", d);
  std::int64_t outer = 1, inner = static_cast<std::int64_t>(size_of(x.dtype()));
  for (int k = 0; k < axis; ++k) outer *= x.dims()[k];
  for (int k = static_cast<int>(axis) + 1; k < r; ++k) inner *= x.dims()[k];
  const std::int64_t row = d * inner;
  std::int64_t at = 0;
  const char* src = static_cast<const char*>(x.raw_data());
  for (std::uint32_t i = 0; i < ctx.num_outputs(); ++i) {
    Dims od = x.dims();
    od[static_cast<int>(axis)] = sizes[i];
    Tensor& out = ctx.alloc_output(i, od, x.dtype());
    const std::int64_t chunk = sizes[i] * inner;
    if (out.numel() > 0) {
      char* dst = static_cast<char*>(out.raw_data());
      for (std::int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + o * chunk, src + o * row + at, static_cast<std::size_t>(chunk));
    }
    at += chunk;
  }
}

// ---- sum_by ----

template <typename T>
struct SumByK {
  static void run(KernelContext& ctx) {
    const Tensor& x = typed_input<T>(ctx, 0);
    const bool keepdims = ctx.attrs<SumByOp>().keepdims;
    std::int64_t axes[kMaxRank];
    const int n = read_ints(ctx, 1, "axes", axes, kMaxRank);
    const int r = x.rank();
    bool red[kMaxRank] = {};
    for (int k = 0; k < n; ++k) {
      const std::int64_t a = axis_at_run(ctx, axes[k], r);
      if (red[a])
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axes name dim ", a, " twice");
      red[a] = true;
    }
    std::int64_t od[kMaxRank], kd[kMaxRank];
    int orank = 0;
    for (int i = 0; i < r; ++i) {
      kd[i] = red[i] ? 1 : x.dims()[i];
      if (keepdims || !red[i]) od[orank++] = kd[i];
    }
    if (orank != static_cast<int>(shaped_dims(ctx.op()->result_type(0)).size()))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' got ", n,
                  " axes at run time, a result of rank ", orank, " where the program expects rank ",
                  shaped_dims(ctx.op()->result_type(0)).size());
    Tensor& out = ctx.alloc_output(0, dims_of(od, orank), x.dtype());
    const std::int64_t on = out.numel();
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    Acc* acc = scratch<Acc>(on);
    std::fill(acc, acc + on, Acc(0));
    // Output offset per x dim: the kept dims' strides in [kd], 0 for summed ones.
    std::int64_t ks[kMaxRank], os[kMaxRank];
    strides_of(dims_of(kd, r), ks);
    for (int i = 0; i < r; ++i) os[i] = red[i] ? 0 : ks[i];
    const T* px = x.data<T>();
    const std::int64_t xn = x.numel();
    std::int64_t idx[kMaxRank] = {};
    std::int64_t o = 0;
    for (std::int64_t j = 0; j < xn; ++j) {
      acc[o] += static_cast<Acc>(px[j]);
      for (int i = r - 1; i >= 0; --i) {
        o += os[i];
        if (++idx[i] < x.dims()[i]) break;
        o -= os[i] * x.dims()[i];
        idx[i] = 0;
      }
    }
    T* po = out.data<T>();
    for (std::int64_t j = 0; j < on; ++j) po[j] = static_cast<T>(acc[j]);
  }
};

// ---- full_by ----

template <typename T>
void fill(Tensor& out, double value) {
  T v;
  if constexpr (std::is_same_v<T, bool>) v = value != 0.0;
  else v = static_cast<T>(value);
  T* p = out.data<T>();
  const std::int64_t n = out.numel();
  for (std::int64_t i = 0; i < n; ++i) p[i] = v;
}

void full_by_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<FullByOp>();
  std::int64_t d[kMaxRank];
  const int r = read_ints(ctx, 0, "shape", d, kMaxRank);
  for (int i = 0; i < r; ++i)
    if (d[i] < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' shape ",
                  list(d, r), " holds a negative dim");
  check_known(ctx, a.known_dims, d, r);
  check_numel(ctx, d, r);
  if (a.dtype == DataType::Int32 || a.dtype == DataType::Int64) {
    const double lim = a.dtype == DataType::Int32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(a.value >= -lim && a.value < lim))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' value ", a.value,
                  " does not fit ", to_string(a.dtype));
  }
  Tensor& out = ctx.alloc_output(0, dims_of(d, r), a.dtype);
  switch (a.dtype) {
    case DataType::Float32: fill<float>(out, a.value); break;
    case DataType::Float64: fill<double>(out, a.value); break;
    case DataType::Int32: fill<std::int32_t>(out, a.value); break;
    case DataType::Int64: fill<std::int64_t>(out, a.value); break;
    case DataType::Bool: fill<bool>(out, a.value); break;
    default:
      throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no kernel for ",
                  to_string(a.dtype));
  }
}

// ---- range ----

constexpr std::int64_t kMaxRangeElements = std::int64_t{1} << 32;

template <typename T>
struct RangeK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    T v[3];
    const char* what[] = {"start", "limit", "delta"};
    for (std::uint32_t i = 0; i < 3; ++i) {
      const Tensor& t = typed_input<T>(ctx, i);
      if (t.numel() != 1)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what[i],
                    " must hold one value, got ", t.type_string());
      v[i] = *t.data<T>();
    }
    const T start = v[0], limit = v[1], delta = v[2];
    if (delta == T(0)) throw_error(ErrorKind::InvalidArgument, "op '", op, "' delta is 0");
    std::int64_t n = 0;
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' start, limit and delta must be finite");
      const double c = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                 static_cast<double>(delta));
      if (c > static_cast<double>(kMaxRangeElements))
        throw_error(ErrorKind::OutOfRange, "op '", op, "' would make ", c, " elements, beyond ",
                    kMaxRangeElements);
      n = c > 0 ? static_cast<std::int64_t>(c) : 0;
    } else {
      // In 128 bits: limit - start may overflow T.
      const __int128 span = static_cast<__int128>(limit) - start, d = delta;
      __int128 c = span / d;
      if (c * d != span && ((span > 0) == (d > 0))) ++c;  // ceil
      if (c > kMaxRangeElements)
        throw_error(ErrorKind::OutOfRange, "op '", op, "' would make more than ", kMaxRangeElements,
                    " elements");
      n = c > 0 ? static_cast<std::int64_t>(c) : 0;
    }
    Tensor& out = ctx.alloc_output(0, Dims{n}, data_type_of<T>);
    T* p = out.data<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_floating_point_v<T>) p[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      else p[i] = static_cast<T>(static_cast<__int128>(start) + static_cast<__int128>(i) * delta);
    }
  }
};

}  // namespace

KILN_REGISTER_KERNEL(ShapeOp, Cpu, Undefined, shape_kernel);
KILN_REGISTER_KERNEL(NumelOp, Cpu, Undefined, numel_kernel);
KILN_REGISTER_KERNEL(ReshapeByOp, Cpu, Undefined, reshape_by_kernel);
KILN_REGISTER_KERNEL(SqueezeByOp, Cpu, Undefined, squeeze_by_kernel);
KILN_REGISTER_KERNEL(UnsqueezeByOp, Cpu, Undefined, unsqueeze_by_kernel);
KILN_REGISTER_KERNEL(ExpandByOp, Cpu, Undefined, expand_by_kernel);
KILN_REGISTER_KERNEL(TileOp, Cpu, Undefined, tile_kernel);
KILN_REGISTER_KERNEL(StridedSliceOp, Cpu, Undefined, strided_slice_kernel);
KILN_REGISTER_KERNEL(GradOf<StridedSliceOp>, Cpu, Undefined, strided_slice_grad_kernel);
KILN_REGISTER_KERNEL(SliceByOp, Cpu, Undefined, slice_by_kernel);
KILN_REGISTER_KERNEL(GradOf<SliceByOp>, Cpu, Undefined, slice_by_grad_kernel);
KILN_REGISTER_KERNEL(SplitByOp, Cpu, Undefined, split_by_kernel);
KILN_REGISTER_KERNELS(SumByOp, Cpu, SumByK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNEL(FullByOp, Cpu, Undefined, full_by_kernel);
KILN_REGISTER_KERNELS(RangeOp, Cpu, RangeK, float, double, std::int32_t, std::int64_t);

}  // namespace kiln::cpu
