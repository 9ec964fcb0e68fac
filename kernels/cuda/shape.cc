// Host halves of the CUDA data-movement kernels in shape.cu — full,
// zeros_like, transpose, concat, split, slice and its gradient, split_as,
// cast, clip and its gradient, scale — registered for PlaceKind::Cuda. Each
// reads its op's attributes and checks its inputs with the CPU kernel's
// messages (kernels/cpu/shape.cc, unary.cc, compare.cc), allocates outputs
// and launches (launch.h). The copies are one strided walk of 1-, 2-, 4- or
// 8-byte words, whatever the dtype: dims of 1 are dropped, dims contiguous
// in both source and destination merged, and a contiguous innermost run
// copied in the widest word that divides it.
//
// cast runs on the device between f32, f64, i32, i64, bool, u8 and i8 (the
// kernel is registered for those input dtypes); to any other dtype it
// runs the CPU kernel on a host copy (a stream wait, as the CPU fallback).
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "kiln/kernel/full_attributes.h"
#include "kiln/support/half.h"

#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/cuda_context.h"

namespace kiln::cuda {
namespace {

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

// Copies the elements (es bytes each) at index (i_0, …) of dims from
// src[Σ i_k · ss[k]] to dst[Σ i_k · ds[k]] (element strides) on ctx's stream.
void copy_walk(const KernelContext& ctx, const void* src, void* dst, std::int64_t es, int rank,
               const std::int64_t* dims, const std::int64_t* ss, const std::int64_t* ds) {
  CopyWalk w;  // in bytes first: the element's own bytes are the innermost dim
  const auto push = [&w](std::int64_t d, std::int64_t s, std::int64_t t) {
    const int q = w.rank - 1;
    if (q >= 0 && w.src[q] == s * d && w.dst[q] == t * d) {  // one run in both: merged
      w.dims[q] *= d;
      w.src[q] = s;
      w.dst[q] = t;
    } else {
      w.dims[w.rank] = d;
      w.src[w.rank] = s;
      w.dst[w.rank] = t;
      ++w.rank;
    }
  };
  for (int k = 0; k < rank; ++k) {
    if (dims[k] == 0) return;
    if (dims[k] != 1) push(dims[k], ss[k] * es, ds[k] * es);
  }
  push(es, 1, 1);
  // The widest word that divides the innermost run, every other stride and
  // both pointers.
  const int in = w.rank - 1;
  std::int64_t width = 8;
  const auto fits = [&](std::int64_t wd) {
    if (reinterpret_cast<std::uintptr_t>(src) % wd || reinterpret_cast<std::uintptr_t>(dst) % wd ||
        w.dims[in] % wd)
      return false;
    for (int k = 0; k < in; ++k)
      if (w.src[k] % wd || w.dst[k] % wd) return false;
    return true;
  };
  while (width > 1 && !fits(width)) width /= 2;
  w.dims[in] /= width;
  w.n = w.dims[in];
  for (int k = 0; k < in; ++k) {
    w.src[k] /= width;
    w.dst[k] /= width;
    w.n *= w.dims[k];
  }
  launch_strided_copy(src, dst, static_cast<int>(width), w, stream_of(ctx));
  check_launch(ctx);
}

const char* bytes_of(const Tensor& t) { return static_cast<const char*>(t.raw_data()); }

// ---- full, zeros_like ----

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
    const std::int64_t n = out.numel();
    if (n == 0) return;
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    launch_fill(out.raw_data(), n, static_cast<int>(sizeof v), bits, stream_of(ctx));
    check_launch(ctx);
  }
};

// full in bf16 / f16: the value rounded once to the dtype, its bits filled.
template <DataType Dt>
void full_half_kernel(KernelContext& ctx) {
  const auto& a = checked_full_attributes(ctx, Dt);
  const std::uint16_t v = Dt == DataType::BFloat16 ? float_to_bfloat16(static_cast<float>(a.value))
                                                   : double_to_half(a.value);
  Tensor& out = ctx.alloc_output(0, Dims(a.shape), a.dtype);
  if (out.numel() == 0) return;
  launch_fill(out.raw_data(), out.numel(), static_cast<int>(sizeof v), v, stream_of(ctx));
  check_launch(ctx);
}

void zeros_like_kernel(KernelContext& ctx) {
  const Dims d = ctx.input(0).dims();
  const DataType dt = ctx.input(0).dtype();
  Tensor& out = ctx.alloc_output(0, d, dt);
  if (out.bytes())
    check_cuda(cudaMemsetAsync(out.raw_data(), 0, out.bytes(), stream_of(ctx)),
               "zeroing zeros_like's result");
}

// ---- transpose ----

void transpose_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<TransposeOp>();
  const Tensor x = ctx.input(0);
  const int r = x.rank();
  if (static_cast<int>(a.perm.size()) != r)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' perm has ", a.perm.size(),
                " entries for an input of rank ", r, " (", x.type_string(), ")");
  std::int64_t in_stride[Dims::kMaxRank], step[Dims::kMaxRank], od[Dims::kMaxRank],
      out_stride[Dims::kMaxRank];
  strides_of(x.dims(), in_stride);
  bool seen[Dims::kMaxRank] = {};
  for (int i = 0; i < r; ++i) {
    std::int64_t p = axis_at_run(ctx, a.perm[i], r, "perm entry");
    if (seen[p])
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' perm is not a permutation (dim ", p, " appears twice)");
    seen[p] = true;
    od[i] = x.dims()[p];
    step[i] = in_stride[p];
  }
  const Dims out_dims(std::span<const std::int64_t>(od, r));
  Tensor& out = ctx.alloc_output(0, out_dims, x.dtype());
  if (out.numel() == 0) return;
  strides_of(out_dims, out_stride);
  copy_walk(ctx, x.raw_data(), out.raw_data(), static_cast<std::int64_t>(size_of(x.dtype())), r,
            od, step, out_stride);
}

// ---- concat, split, split_as: [outer, part] blocks of [outer, row] ----

// dst[o, at + j] = src[o, j] (to_whole) or dst[o, j] = src[o, at + j], for
// o < outer, j < part; rows of `row` elements of es bytes.
void copy_part(const KernelContext& ctx, const void* src, void* dst, std::int64_t es,
               std::int64_t outer, std::int64_t part, std::int64_t row, std::int64_t at,
               bool to_whole) {
  if (outer == 0 || part == 0) return;
  const std::int64_t dims[2] = {outer, part}, one[2] = {part, 1}, whole[2] = {row, 1};
  if (to_whole)
    copy_walk(ctx, src, static_cast<char*>(dst) + at * es, es, 2, dims, one, whole);
  else
    copy_walk(ctx, static_cast<const char*>(src) + at * es, dst, es, 2, dims, whole, one);
}

void concat_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<ConcatOp>();
  const std::uint32_t n = ctx.num_inputs();
  if (n == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' needs at least one input");
  const Tensor& x0 = ctx.input(0);
  const int r = x0.rank();
  if (r == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' cannot join rank-0 tensors");
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
  const DataType dt = x0.dtype();
  Tensor& out = ctx.alloc_output(0, od, dt);
  if (out.numel() == 0) return;
  const std::int64_t es = static_cast<std::int64_t>(size_of(dt));
  std::int64_t outer = 1, inner = 1;
  for (int k = 0; k < axis; ++k) outer *= od[k];
  for (int k = static_cast<int>(axis) + 1; k < r; ++k) inner *= od[k];
  const std::int64_t row = od[axis] * inner;
  std::int64_t at = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    const std::int64_t part = t.dims()[axis] * inner;
    copy_part(ctx, t.raw_data(), out.raw_data(), es, outer, part, row, at, true);
    at += part;
  }
}

void split_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<SplitOp>();
  const Tensor x = ctx.input(0);
  const int r = x.rank();
  if (r == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' cannot split a rank-0 tensor");
  const std::int64_t axis = axis_at_run(ctx, a.axis, r);
  const std::int64_t d = x.dims()[axis];
  const std::uint32_t parts = a.sections.empty()
                                  ? static_cast<std::uint32_t>(std::max<std::int64_t>(a.num, 0))
                                  : static_cast<std::uint32_t>(a.sections.size());
  if (parts == 0 || parts != ctx.num_outputs())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' makes ", parts,
                " parts but has ", ctx.num_outputs(), " results");
  std::int64_t rest = d;  // what the -1 section (if any) takes
  if (a.sections.empty()) {
    if (d % a.num != 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot split dim ",
                  axis, " of ", x.type_string(), " into ", a.num, " equal parts");
  } else {
    bool has_rest = false;
    for (auto s : a.sections) {
      if (s >= 0) rest -= s;
      has_rest = has_rest || s == -1;
    }
    if (rest < 0 || (!has_rest && rest != 0))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' sections do not add up to dim ", axis, " of ", x.type_string());
  }
  const std::int64_t es = static_cast<std::int64_t>(size_of(x.dtype()));
  std::int64_t outer = 1, inner = 1;
  for (int k = 0; k < axis; ++k) outer *= x.dims()[k];
  for (int k = static_cast<int>(axis) + 1; k < r; ++k) inner *= x.dims()[k];
  const std::int64_t row = d * inner;
  std::int64_t at = 0;
  for (std::uint32_t i = 0; i < parts; ++i) {
    Dims od = x.dims();
    od[axis] = a.sections.empty() ? d / a.num : (a.sections[i] < 0 ? rest : a.sections[i]);
    Tensor& out = ctx.alloc_output(i, od, x.dtype());
    const std::int64_t part = od[axis] * inner;
    if (out.numel() > 0)
      copy_part(ctx, x.raw_data(), out.raw_data(), es, outer, part, row, at, false);
    at += part;
  }
}

template <typename T>
struct SplitAsK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor x = typed_input<T>(ctx, 0);
    const Dims& xd = x.dims();
    const std::int64_t axis = axis_at_run(ctx, ctx.attrs<SplitAsOp>().axis, xd.rank());
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
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' ref #", p + 1, " [",
                    rd.to_string(), "] must match x [", xd.to_string(),
                    "] in every dim but axis ", axis);
      total += rd[static_cast<int>(axis)];
    }
    if (total != xd[static_cast<int>(axis)])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' refs' dims along axis ", axis,
                  " add up to ", total, ", x [", xd.to_string(), "] has ",
                  xd[static_cast<int>(axis)]);
    std::int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; ++k) outer *= xd[k];
    for (int k = static_cast<int>(axis) + 1; k < xd.rank(); ++k) inner *= xd[k];
    const std::int64_t row = xd[static_cast<int>(axis)] * inner;
    std::int64_t at = 0;
    for (std::uint32_t p = 0; p < parts; ++p) {
      const Dims pd = ctx.input(p + 1).dims();
      Tensor& out = ctx.alloc_output(p, pd, x.dtype());
      const std::int64_t part = pd[static_cast<int>(axis)] * inner;
      copy_part(ctx, x.raw_data(), out.raw_data(), sizeof(T), outer, part, row, at, false);
      at += part;
    }
  }
};

// ---- slice and its gradient ----

void slice_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<SliceOp>();
  const Tensor x = ctx.input(0);
  const int r = x.rank();
  if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' needs one start and one end per axis");
  const Dims& id = x.dims();
  Dims od = id;
  std::int64_t begin[Dims::kMaxRank] = {};
  for (std::size_t k = 0; k < a.axes.size(); ++k) {
    const std::int64_t axis = axis_at_run(ctx, a.axes[k], r);
    auto [b, e] = slice_range(a.starts[k], a.ends[k], id[axis]);
    begin[axis] = b;
    od[axis] = e - b;
  }
  Tensor& out = ctx.alloc_output(0, od, x.dtype());
  if (out.numel() == 0) return;
  const std::int64_t es = static_cast<std::int64_t>(size_of(x.dtype()));
  std::int64_t is[Dims::kMaxRank], os[Dims::kMaxRank], base = 0;
  strides_of(id, is);
  strides_of(od, os);
  for (int k = 0; k < r; ++k) base += begin[k] * is[k];
  copy_walk(ctx, bytes_of(x) + base * es, out.raw_data(), es, r, od.data(), is, os);
}

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
      const int ax = static_cast<int>(axis_at_run(ctx, a.axes[k], xd.rank()));
      auto [b, e] = slice_range(a.starts[k], a.ends[k], xd[ax]);
      begin[ax] = b;
      want[ax] = e - b;
    }
    if (dout.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout [", dout.dims().to_string(),
                  "] must have the slice's shape [", want.to_string(), "]");
    Tensor& dx = ctx.alloc_output(0, xd, dout.dtype());
    if (dx.bytes())
      check_cuda(cudaMemsetAsync(dx.raw_data(), 0, dx.bytes(), stream_of(ctx)),
                 "zeroing slice_grad's result");
    if (want.numel() == 0) return;
    const int r = xd.rank();
    std::int64_t xs[Dims::kMaxRank], ds[Dims::kMaxRank], base = 0;
    strides_of(xd, xs);
    strides_of(want, ds);
    for (int k = 0; k < r; ++k) base += begin[k] * xs[k];
    copy_walk(ctx, dout.raw_data(), dx.data<T>() + base, sizeof(T), r, want.data(), ds, xs);
  }
};

// ---- cast ----

// The CPU kernel on a host copy of x, its result copied into `out`.
void cast_through_host(KernelContext& ctx, const Tensor& x, Tensor& out) {
  const cudaStream_t s = stream_of(ctx);
  check_cuda(cudaStreamSynchronize(s), "waiting for a cast's input");
  Variable in("x"), res("out");
  in.set(copy_to_place(x, Place::cpu()));
  const KernelInfo& k =
      KernelRegistry::instance().get(*ctx.op(), PlaceKind::Cpu, x.dtype());
  Variable* ins[] = {&in};
  Variable* outs[] = {&res};
  KernelContext host(ctx.op(), ins, 1, outs, 1, ctx.attrs_ptr(), Place::cpu(), &cpu_allocator());
  k.fn(host);
  const Tensor& h = res.get<Tensor>();
  check_cuda(cudaMemcpyAsync(out.raw_data(), h.raw_data(), h.bytes(), cudaMemcpyHostToDevice, s),
             "copying a cast's result to the device");
  check_cuda(cudaStreamSynchronize(s), "waiting for a cast's result");
}

void cast_kernel(KernelContext& ctx) {
  const DataType to = ctx.attrs<CastOp>().dtype;
  const Tensor x = ctx.input(0);
  const DataType from = x.dtype();
  if (to == DataType::Undefined)
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no CPU cast from ",
                to_string(from), " to ", to_string(to));
  if (output_is_input(ctx, 0, 0))
    throw_error(ErrorKind::PreconditionNotMet, "op '", ctx.op()->name(),
                "' cannot run in place");
  Tensor& out = ctx.alloc_output(0, x.dims(), to);
  const std::int64_t n = x.numel();
  if (n == 0) return;
  const cudaStream_t s = stream_of(ctx);
  if (from == to) {
    check_cuda(cudaMemcpyAsync(out.raw_data(), x.raw_data(), x.bytes(), cudaMemcpyDeviceToDevice,
                               s),
               "copying a cast's input");
    return;
  }
  if (launch_cast(from, to, x.raw_data(), out.raw_data(), n, s)) {
    check_launch(ctx);
    return;
  }
  cast_through_host(ctx, x, out);
}

// ---- clip, clip_grad, scale ----

template <typename T>
T clip_bound(double b) {
  if constexpr (std::is_integral_v<T>) {
    // Saturate bounds outside T's range (a bound of 1e30 on i32 is no bound).
    if (b >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    if (b <= static_cast<double>(std::numeric_limits<T>::min()))
      return std::numeric_limits<T>::min();
    return static_cast<T>(b);
  } else {
    return static_cast<T>(b);
  }
}

template <typename T>
struct ClipK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const auto& a = ctx.attrs<ClipOp>();
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    const std::int64_t n = x.numel();
    if (n == 0) return;
    launch_clip(x.data<T>(), out.data<T>(), n, clip_bound<T>(a.min), clip_bound<T>(a.max),
                stream_of(ctx));
    check_launch(ctx);
  }
};

// The CPU's bounds (static_cast of the attributes) and its shape check's
// message (kernels/cpu/compare.cc).
template <typename T>
struct ClipGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), dout = typed_input<T>(ctx, 1);
    if (x.dims() != dout.dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs #0 [",
                  x.dims().to_string(), "] and #1 [", dout.dims().to_string(),
                  "] must have one shape");
    const auto& a = ctx.attrs<GradOf<ClipOp>>();
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    const std::int64_t n = x.numel();
    if (n == 0) return;
    launch_clip_grad(x.data<T>(), dout.data<T>(), dx.data<T>(), n, static_cast<T>(a.min),
                     static_cast<T>(a.max), stream_of(ctx));
    check_launch(ctx);
  }
};

// clip and clip_grad on bf16 / f16 (D) with the f32 kernels' bounds.
template <DataType D>
void clip_half_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != D) throw_input_dtype(ctx, 0, D);
  const auto& a = ctx.attrs<ClipOp>();
  Tensor& out = ctx.alloc_output(0, x.dims(), D);
  if (x.numel() == 0) return;
  launch_clip_half(D, x.raw_data(), out.raw_data(), x.numel(), clip_bound<float>(a.min), clip_bound<float>(a.max),
                   stream_of(ctx));
  check_launch(ctx);
}

template <DataType D>
void clip_grad_half_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &dout = ctx.input(1);
  if (x.dtype() != D) throw_input_dtype(ctx, 0, D);
  if (dout.dtype() != D) throw_input_dtype(ctx, 1, D);
  if (x.dims() != dout.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs #0 [", x.dims().to_string(),
                "] and #1 [", dout.dims().to_string(), "] must have one shape");
  const auto& a = ctx.attrs<GradOf<ClipOp>>();
  Tensor& dx = ctx.alloc_output(0, x.dims(), D);
  if (x.numel() == 0) return;
  launch_clip_grad_half(D, x.raw_data(), dout.raw_data(), dx.raw_data(), x.numel(), static_cast<float>(a.min),
                        static_cast<float>(a.max), stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
struct ScaleK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<ScaleOp>();
    const Tensor x = typed_input<T>(ctx, 0);
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    const std::int64_t n = x.numel();
    if (n == 0) return;
    // scale·(x + bias) = scale·x + scale·bias, the bias in T for floats as on the CPU
    const double b = a.bias_after_scale ? a.bias : a.scale * a.bias;
    launch_scale(x.data<T>(), out.data<T>(), n, a.scale, b, stream_of(ctx));
    check_launch(ctx);
  }
};

}  // namespace

void swap_axes_12(const KernelContext& ctx, const void* src, void* dst, std::int64_t es,
                  const std::int64_t (&dims)[4]) {
  const std::int64_t od[] = {dims[0], dims[2], dims[1], dims[3]};
  const std::int64_t in_stride[] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  const std::int64_t step[] = {in_stride[0], in_stride[2], in_stride[1], 1};
  const std::int64_t out_stride[] = {od[1] * od[2] * od[3], od[2] * od[3], od[3], 1};
  copy_walk(ctx, src, dst, es, 4, od, step, out_stride);
}

void repeat_heads(const KernelContext& ctx, const void* src, void* dst, std::int64_t es, std::int64_t outer,
                  std::int64_t hk, std::int64_t group, std::int64_t inner) {
  const std::int64_t dims[] = {outer, hk, group, inner};
  const std::int64_t from[] = {hk * inner, inner, 0, 1};
  const std::int64_t to[] = {hk * group * inner, group * inner, inner, 1};
  copy_walk(ctx, src, dst, es, 4, dims, from, to);
}

KILN_REGISTER_KERNELS(FullOp, Cuda, FullK, float, double, std::int8_t, std::int32_t, std::int64_t,
                      bool);
KILN_REGISTER_KERNEL(FullOp, Cuda, BFloat16, full_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(FullOp, Cuda, Float16, full_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNEL(ZerosLikeOp, Cuda, Undefined, zeros_like_kernel);
KILN_REGISTER_KERNEL(TransposeOp, Cuda, Undefined, transpose_kernel);
KILN_REGISTER_KERNEL(ConcatOp, Cuda, Undefined, concat_kernel);
KILN_REGISTER_KERNEL(SplitOp, Cuda, Undefined, split_kernel);
KILN_REGISTER_KERNEL(SliceOp, Cuda, Undefined, slice_kernel);
KILN_REGISTER_KERNELS(GradOf<SliceOp>, Cuda, SliceGradK, float, double);
KILN_REGISTER_KERNELS(SplitAsOp, Cuda, SplitAsK, float, double);
KILN_REGISTER_KERNEL(CastOp, Cuda, Float32, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, Float64, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, Int32, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, Int64, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, Bool, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, UInt8, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, Int8, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, BFloat16, cast_kernel);
KILN_REGISTER_KERNEL(CastOp, Cuda, Float16, cast_kernel);
KILN_REGISTER_KERNELS(ClipOp, Cuda, ClipK, float, double, std::int8_t, std::int16_t, std::int32_t,
                      std::int64_t, std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t);
KILN_REGISTER_KERNELS(GradOf<ClipOp>, Cuda, ClipGradK, float, double);
KILN_REGISTER_KERNEL(ClipOp, Cuda, BFloat16, clip_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(ClipOp, Cuda, Float16, clip_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNEL(GradOf<ClipOp>, Cuda, BFloat16, clip_grad_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(GradOf<ClipOp>, Cuda, Float16, clip_grad_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNELS(ScaleOp, Cuda, ScaleK, float, double, std::int32_t, std::int64_t);

}  // namespace kiln::cuda
