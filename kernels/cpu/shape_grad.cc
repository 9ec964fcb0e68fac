// CPU kernels of the indexing gradient ops: split_as (concat's gradient:
// pieces shaped like the refs at run time), slice_grad (zeros with dout
// written back into the sliced window), gather_grad and embedding_grad
// (scatter-add of dout rows into zeros; every index is checked first).
// f32 and f64.
#include <cstring>

#include "cpu_kernel_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/tensor_ops.h"

namespace kiln::cpu {
namespace {

std::int64_t axis_at_run(const KernelContext& ctx, std::int64_t axis, int rank) {
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
      const int ax = static_cast<int>(axis_at_run(ctx, a.axes[k], xd.rank()));
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

// ---- gather_grad / embedding_grad: scatter-add ----

template <typename I>
void check_ids(const KernelContext& ctx, const I* ids, std::int64_t count, std::int64_t n,
               const char* what) {
  for (std::int64_t k = 0; k < count; ++k)
    if (ids[k] < 0 || ids[k] >= n)
      throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' ", what, " ",
                  static_cast<std::int64_t>(ids[k]), " (at position ", k,
                  ") is out of range [0, ", n, ")");
}

// dst[o, ids[k], :] += src[o, k, :] (rows of `row` elements; n rows per
// outer index of dst); ids[k] == skip adds nothing.
template <typename T, typename I>
void scatter_add(const I* ids, std::int64_t count, const T* src, T* dst, std::int64_t outer,
                 std::int64_t n, std::int64_t row, std::int64_t skip) {
  for (std::int64_t o = 0; o < outer; ++o) {
    T* d = dst + o * n * row;
    for (std::int64_t k = 0; k < count; ++k, src += row) {
      const std::int64_t id = ids[k];
      if (id == skip) continue;
      T* __restrict r = d + id * row;
      const T* __restrict s = src;
      for (std::int64_t j = 0; j < row; ++j) r[j] += s[j];
    }
  }
}

template <typename T>
void scatter(const KernelContext& ctx, const Tensor& ids, const T* src, T* dst, std::int64_t outer,
             std::int64_t n, std::int64_t row, std::int64_t skip, const char* what) {
  if (ids.dtype() == DataType::Int64) {
    check_ids(ctx, ids.data<std::int64_t>(), ids.numel(), n, what);
    scatter_add(ids.data<std::int64_t>(), ids.numel(), src, dst, outer, n, row, skip);
  } else if (ids.dtype() == DataType::Int32) {
    check_ids(ctx, ids.data<std::int32_t>(), ids.numel(), n, what);
    scatter_add(ids.data<std::int32_t>(), ids.numel(), src, dst, outer, n, row, skip);
  } else {
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what,
                " must be i64 or i32, got ", to_string(ids.dtype()));
  }
}

template <typename T>
struct GatherGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Dims xd = ctx.input(0).dims();
    const Tensor index = ctx.input(1), dout = typed_input<T>(ctx, 2);
    const int r = xd.rank();
    if (r == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must have rank >= 1");
    const int axis = static_cast<int>(axis_at_run(ctx, ctx.attrs<GradOf<GatherOp>>().axis, r));
    if (r - 1 + index.rank() > Dims::kMaxRank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' gather's rank ",
                  r - 1 + index.rank(), " exceeds the maximum ", Dims::kMaxRank);
    std::int64_t buf[Dims::kMaxRank];
    int q = 0;
    std::int64_t outer = 1, row = 1;
    for (int k = 0; k < axis; ++k) outer *= (buf[q++] = xd[k]);
    for (int k = 0; k < index.rank(); ++k) buf[q++] = index.dims()[k];
    for (int k = axis + 1; k < r; ++k) row *= (buf[q++] = xd[k]);
    const Dims want(std::span<const std::int64_t>(buf, q));
    if (dout.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout [", dout.dims().to_string(),
                  "] must have the gather's shape [", want.to_string(), "]");
    Tensor& dx = ctx.alloc_output(0, xd, dout.dtype());
    T* pdx = dx.data<T>();
    if (xd.numel()) std::memset(pdx, 0, static_cast<std::size_t>(xd.numel()) * sizeof(T));
    scatter(ctx, index, dout.data<T>(), pdx, xd.numel() ? outer : 0, xd[axis], row, -1, "index");
  }
};

template <typename T>
struct EmbeddingGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Dims wd = ctx.input(0).dims();
    const Tensor ids = ctx.input(1), dout = typed_input<T>(ctx, 2);
    if (wd.rank() != 2)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' weight must be [vocab, dim], got [",
                  wd.to_string(), "]");
    const std::int64_t vocab = wd[0], dim = wd[1];
    const std::int64_t pad = ctx.attrs<GradOf<EmbeddingOp>>().padding_idx;
    if (pad < -1 || pad >= vocab)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' padding_idx ", pad,
                  " must be -1 (none) or in [0, ", vocab, ")");
    if (ids.rank() + 1 > Dims::kMaxRank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ids of rank ", ids.rank(),
                  " give a lookup beyond the maximum rank ", Dims::kMaxRank);
    std::int64_t buf[Dims::kMaxRank];
    for (int k = 0; k < ids.rank(); ++k) buf[k] = ids.dims()[k];
    buf[ids.rank()] = dim;
    const Dims want(std::span<const std::int64_t>(buf, ids.rank() + 1));
    if (dout.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout [", dout.dims().to_string(),
                  "] must have the lookup's shape [", want.to_string(), "]");
    Tensor& dw = ctx.alloc_output(0, wd, dout.dtype());
    T* pdw = dw.data<T>();
    if (wd.numel()) std::memset(pdw, 0, static_cast<std::size_t>(wd.numel()) * sizeof(T));
    scatter(ctx, ids, dout.data<T>(), pdw, 1, vocab, dim, pad, "id");
  }
};

}  // namespace

KILN_REGISTER_KERNELS(SplitAsOp, Cpu, SplitAsK, float, double);
KILN_REGISTER_KERNELS(GradOf<SliceOp>, Cpu, SliceGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<GatherOp>, Cpu, GatherGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<EmbeddingOp>, Cpu, EmbeddingGradK, float, double);

}  // namespace kiln::cpu
