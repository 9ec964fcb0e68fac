// CPU kernels of the shape-manipulation ops: expand (a broadcast copy whose
// inner loop is a contiguous copy or a fill), stack (row memcpys), the views
// flatten / squeeze / unsqueeze (the output shares the input's buffer), pad
// (fill + row copies) and cumsum (a running row sum that vectorizes over the
// dims after the axis). The run path allocates nothing but output buffers.
#include <algorithm>
#include <cstring>

#include "cpu_kernel_util.h"
#include "kiln/dialect/manipulation_ops.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cpu {
namespace {

std::int64_t axis_at_run(const KernelContext& ctx, std::int64_t axis, int rank,
                         const char* what = "axis") {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " ", axis,
                " is out of range for an input of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

Dims dims_of(const std::int64_t* d, int r) { return Dims(std::span<const std::int64_t>(d, r)); }

// ---- expand: any dtype, moved as elements of its size ----

template <typename U>
void expand_copy(const U* __restrict x, U* __restrict out, const std::int64_t* od,
                 const std::int64_t* xstride, int r) {
  const std::int64_t n = od[r - 1], sx = xstride[r - 1];
  std::int64_t rows = 1;
  for (int i = 0; i < r - 1; ++i) rows *= od[i];
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t off = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    const U* src = x + off;
    if (sx == 1) {
      std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(U));
    } else {
      const U v = *src;
      for (std::int64_t j = 0; j < n; ++j) out[j] = v;
    }
    out += n;
    for (int i = r - 2; i >= 0; --i) {  // odometer over the outer output dims
      off += xstride[i];
      if (++idx[i] < od[i]) break;
      off -= xstride[i] * od[i];
      idx[i] = 0;
    }
  }
}

void expand_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<ExpandOp>();
  const std::string_view op = ctx.op()->name();
  const Tensor& x = ctx.input(0);
  const int xr = x.rank();
  const int r = static_cast<int>(a.shape.size());
  if (r > Dims::kMaxRank || r < xr)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot expand ", x.type_string(),
                " to a shape of rank ", r);
  std::int64_t od[Dims::kMaxRank], xstride[Dims::kMaxRank];
  const int lead = r - xr;
  std::int64_t acc = 1;
  for (int i = r - 1; i >= 0; --i) {
    const std::int64_t s = a.shape[i];
    if (i < lead) {
      if (s < 0)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' new leading dim ", i,
                    " must be >= 0, got ", s);
      od[i] = s;
      xstride[i] = 0;
      continue;
    }
    const std::int64_t xd = x.dims()[i - lead];
    od[i] = s == -1 ? xd : s;
    if (xd != od[i] && xd != 1)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot expand ", x.type_string(),
                  ": input dim ", i - lead, " is ", xd, " (expected 1 or ", od[i], ")");
    xstride[i] = xd == 1 ? 0 : acc;
    acc *= xd;
  }
  Tensor& out = ctx.alloc_output(0, dims_of(od, r), x.dtype());
  if (out.numel() == 0) return;
  if (r == 0) {
    std::memcpy(out.raw_data(), x.raw_data(), out.bytes());
    return;
  }
  switch (size_of(x.dtype())) {
    case 1: expand_copy(static_cast<const std::uint8_t*>(x.raw_data()),
                        static_cast<std::uint8_t*>(out.raw_data()), od, xstride, r); break;
    case 2: expand_copy(static_cast<const std::uint16_t*>(x.raw_data()),
                        static_cast<std::uint16_t*>(out.raw_data()), od, xstride, r); break;
    case 4: expand_copy(static_cast<const std::uint32_t*>(x.raw_data()),
                        static_cast<std::uint32_t*>(out.raw_data()), od, xstride, r); break;
    case 8: expand_copy(static_cast<const std::uint64_t*>(x.raw_data()),
                        static_cast<std::uint64_t*>(out.raw_data()), od, xstride, r); break;
    default:
      throw_error(ErrorKind::Unimplemented, "op '", op, "' has no kernel for ", to_string(x.dtype()));
  }
}

// ---- stack: any dtype ----

void stack_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<StackOp>();
  const std::uint32_t n = ctx.num_inputs();
  if (n == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' needs at least one input");
  const Tensor& x0 = ctx.input(0);
  const int r = x0.rank();
  const std::int64_t axis = axis_at_run(ctx, a.axis, r + 1);
  for (std::uint32_t i = 1; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    if (t.dtype() != x0.dtype() || t.dims() != x0.dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' input #", i, " ",
                  t.type_string(), " does not match input #0 ", x0.type_string());
  }
  std::int64_t od[Dims::kMaxRank];
  for (int k = 0, j = 0; k <= r; ++k) od[k] = k == axis ? n : x0.dims()[j++];
  Tensor& out = ctx.alloc_output(0, dims_of(od, r + 1), x0.dtype());
  if (out.numel() == 0) return;
  std::int64_t outer = 1, chunk = static_cast<std::int64_t>(size_of(x0.dtype()));
  for (int k = 0; k < axis; ++k) outer *= x0.dims()[k];
  for (int k = static_cast<int>(axis); k < r; ++k) chunk *= x0.dims()[k];
  char* dst = static_cast<char*>(out.raw_data());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::uint32_t i = 0; i < n; ++i) {
      std::memcpy(dst, static_cast<const char*>(ctx.input(i).raw_data()) + o * chunk,
                  static_cast<std::size_t>(chunk));
      dst += chunk;
    }
}

// ---- views ----

void flatten_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<FlattenOp>();
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  if (r == 0) {
    const std::int64_t one = 1;
    ctx.output(0) = x.reshape(dims_of(&one, 1));
    return;
  }
  const std::int64_t s = axis_at_run(ctx, a.start_axis, r, "start_axis");
  const std::int64_t e = axis_at_run(ctx, a.stop_axis, r, "stop_axis");
  if (s > e)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' start_axis ",
                a.start_axis, " must not come after stop_axis ", a.stop_axis);
  std::int64_t od[Dims::kMaxRank];
  int k = 0;
  for (int i = 0; i < s; ++i) od[k++] = x.dims()[i];
  std::int64_t m = 1;
  for (std::int64_t i = s; i <= e; ++i) m *= x.dims()[i];
  od[k++] = m;
  for (int i = static_cast<int>(e) + 1; i < r; ++i) od[k++] = x.dims()[i];
  ctx.output(0) = x.reshape(dims_of(od, k));
}

void squeeze_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<SqueezeOp>();
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  bool drop[Dims::kMaxRank] = {};
  if (a.axes.empty()) {
    // Dims unknown at build time are kept, as InferMeta promised.
    const auto& declared = shaped_dims(ctx.op()->operand_source(0).type());
    for (int k = 0; k < r; ++k)
      drop[k] = x.dims()[k] == 1 &&
                !(static_cast<std::size_t>(k) < declared.size() && declared[k] < 0);
  } else {
    for (auto ax : a.axes) {
      const std::int64_t k = axis_at_run(ctx, ax, r);
      drop[k] = x.dims()[k] == 1;
    }
  }
  std::int64_t od[Dims::kMaxRank];
  int k = 0;
  for (int i = 0; i < r; ++i)
    if (!drop[i]) od[k++] = x.dims()[i];
  ctx.output(0) = x.reshape(dims_of(od, k));
}

void unsqueeze_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<UnsqueezeOp>();
  const Tensor& x = ctx.input(0);
  const int out_rank = x.rank() + static_cast<int>(a.axes.size());
  if (out_rank > Dims::kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' result rank ", out_rank,
                " exceeds the maximum rank ", Dims::kMaxRank);
  bool ones[Dims::kMaxRank] = {};
  for (auto ax : a.axes) {
    const std::int64_t k = axis_at_run(ctx, ax, out_rank);
    if (ones[k])
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' names result dim ", k,
                  " twice");
    ones[k] = true;
  }
  std::int64_t od[Dims::kMaxRank];
  for (int k = 0, j = 0; k < out_rank; ++k) od[k] = ones[k] ? 1 : x.dims()[j++];
  ctx.output(0) = x.reshape(dims_of(od, out_rank));
}

// ---- pad ----

template <typename T>
struct PadK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<PadOp>();
    const std::string_view op = ctx.op()->name();
    const Tensor& x = typed_input<T>(ctx, 0);
    const int r = x.rank();
    if (a.pads.size() % 2 != 0 || a.pads.size() > 2 * static_cast<std::size_t>(r))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' pads must hold an even number of ",
                  "entries, at most 2 per dim of ", x.type_string());
    std::int64_t before[Dims::kMaxRank] = {}, od[Dims::kMaxRank];
    for (int k = 0; k < r; ++k) od[k] = x.dims()[k];
    for (std::size_t p = 0; p < a.pads.size() / 2; ++p) {
      const int k = r - 1 - static_cast<int>(p);
      before[k] = a.pads[2 * p];
      od[k] += a.pads[2 * p] + a.pads[2 * p + 1];
      if (od[k] < 0)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' pads crop dim ", k, " of ",
                    x.type_string(), " below size 0");
    }
    Tensor& out = ctx.alloc_output(0, dims_of(od, r), x.dtype());
    T* __restrict po = out.data<T>();
    const T* __restrict px = x.data<T>();
    const T value = static_cast<T>(a.value);
    if (out.numel() == 0) return;
    if (r == 0) {
      po[0] = px[0];
      return;
    }
    std::int64_t xs[Dims::kMaxRank];
    std::int64_t s = 1;
    for (int i = r - 1; i >= 0; --i) {
      xs[i] = s;
      s *= x.dims()[i];
    }
    const std::int64_t n = od[r - 1], xn = x.dims()[r - 1], b = before[r - 1];
    // Columns of an output row that come from x: [lo, hi).
    const std::int64_t lo = std::clamp<std::int64_t>(b, 0, n);
    const std::int64_t hi = std::clamp<std::int64_t>(xn + b, lo, n);
    const std::int64_t rows = out.numel() / n;
    std::int64_t idx[Dims::kMaxRank] = {};
    for (std::int64_t row = 0; row < rows; ++row, po += n) {
      // The x row this output row reads, if any.
      bool inside = true;
      std::int64_t off = 0;
      for (int i = 0; i < r - 1; ++i) {
        const std::int64_t xi = idx[i] - before[i];
        inside = inside && xi >= 0 && xi < x.dims()[i];
        off += xi * xs[i];
      }
      if (!inside || hi == lo) {
        for (std::int64_t j = 0; j < n; ++j) po[j] = value;
      } else {
        for (std::int64_t j = 0; j < lo; ++j) po[j] = value;
        std::memcpy(po + lo, px + off + (lo - b), static_cast<std::size_t>(hi - lo) * sizeof(T));
        for (std::int64_t j = hi; j < n; ++j) po[j] = value;
      }
      for (int i = r - 2; i >= 0; --i) {
        if (++idx[i] < od[i]) break;
        idx[i] = 0;
      }
    }
  }
};

// ---- cumsum ----

template <typename T>
struct CumsumK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<CumsumOp>();
    const Tensor& x = typed_input<T>(ctx, 0);
    const int r = x.rank();
    if (r == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' needs an input of rank >= 1, got ", x.type_string());
    const std::int64_t axis = axis_at_run(ctx, a.axis, r);
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    if (out.numel() == 0) return;
    std::int64_t outer = 1, inner = 1;
    const std::int64_t len = x.dims()[axis];
    for (int k = 0; k < axis; ++k) outer *= x.dims()[k];
    for (int k = static_cast<int>(axis) + 1; k < r; ++k) inner *= x.dims()[k];
    const T* px = x.data<T>();
    T* po = out.data<T>();
    // Row i of a block is the inner elements at position i along the axis;
    // walking forward or backward, each row adds the previous one.
    const std::int64_t step = a.reverse ? -inner : inner;
    for (std::int64_t o = 0; o < outer; ++o) {
      const std::int64_t first = o * len * inner + (a.reverse ? (len - 1) * inner : 0);
      const T* __restrict xi = px + first;
      T* __restrict oi = po + first;
      if (a.exclusive) {
        for (std::int64_t k = 0; k < inner; ++k) oi[k] = T(0);
      } else {
        for (std::int64_t k = 0; k < inner; ++k) oi[k] = xi[k];
      }
      for (std::int64_t i = 1; i < len; ++i) {
        const T* __restrict prev_out = po + first + (i - 1) * step;
        const T* __restrict src = px + first + (a.exclusive ? (i - 1) : i) * step;
        T* __restrict dst = po + first + i * step;
        for (std::int64_t k = 0; k < inner; ++k) dst[k] = prev_out[k] + src[k];
      }
    }
  }
};

}  // namespace

KILN_REGISTER_KERNEL(ExpandOp, Cpu, Undefined, expand_kernel);
KILN_REGISTER_KERNEL(StackOp, Cpu, Undefined, stack_kernel);
KILN_REGISTER_KERNEL(FlattenOp, Cpu, Undefined, flatten_kernel);
KILN_REGISTER_KERNEL(SqueezeOp, Cpu, Undefined, squeeze_kernel);
KILN_REGISTER_KERNEL(UnsqueezeOp, Cpu, Undefined, unsqueeze_kernel);
// Views change dims only, never data: the same kernels serve device tensors.
KILN_REGISTER_KERNEL(FlattenOp, Cuda, Undefined, flatten_kernel);
KILN_REGISTER_KERNEL(SqueezeOp, Cuda, Undefined, squeeze_kernel);
KILN_REGISTER_KERNEL(UnsqueezeOp, Cuda, Undefined, unsqueeze_kernel);
KILN_REGISTER_KERNELS(PadOp, Cpu, PadK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(CumsumOp, Cpu, CumsumK, float, double, std::int32_t, std::int64_t);

}  // namespace kiln::cpu
