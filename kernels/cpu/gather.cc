// CPU kernels of gather (numpy `take` along an axis) and embedding lookup, and
// their gradients gather_grad / embedding_grad (a scatter-add into zeros).
// They copy rows of bytes, so one kernel serves every data dtype (registered
// under DataType::Undefined; the executor keys on operand 0, the data). Every
// index is checked before anything is written: an index out of range is a
// kiln::Error (OutOfRange) naming the op, the index and where it sits.
#include <cstring>

#include "kiln/dialect/tensor_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "cpu_kernel_util.h"

namespace kiln {
namespace {

// Index #i of `ids` (i32 or i64) as i64.
template <typename I>
const I* index_data(const Tensor& ids) {
  return ids.data<I>();
}

void check_index_dtype(const KernelContext& ctx, const Tensor& ids, const char* what) {
  if (ids.dtype() != DataType::Int64 && ids.dtype() != DataType::Int32)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what,
                " must be i64 or i32, got ", ids.type_string());
}

// Copies rows: out[o, k, :] = src[o, ids[k], :] for o < outer, k < ids.numel(),
// with `row` bytes per row and `n` rows per outer index of src. Zero rows for
// ids[k] == zero_id (padding).
template <typename I>
void take_rows(const KernelContext& ctx, const I* ids, std::int64_t count, const char* src,
               char* dst, std::int64_t outer, std::int64_t n, std::int64_t row,
               std::int64_t zero_id, const char* what) {
  for (std::int64_t k = 0; k < count; ++k) {
    std::int64_t id = ids[k];
    if (id < 0 || id >= n)
      throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' ", what, " ", id,
                  " (at position ", k, ") is out of range [0, ", n, ")");
  }
  for (std::int64_t o = 0; o < outer; ++o) {
    const char* s = src + o * n * row;
    for (std::int64_t k = 0; k < count; ++k, dst += row) {
      std::int64_t id = ids[k];
      if (id == zero_id) std::memset(dst, 0, static_cast<std::size_t>(row));
      else std::memcpy(dst, s + id * row, static_cast<std::size_t>(row));
    }
  }
}

void take(const KernelContext& ctx, const Tensor& ids, const char* src, char* dst,
          std::int64_t outer, std::int64_t n, std::int64_t row, std::int64_t zero_id,
          const char* what) {
  if (ids.dtype() == DataType::Int64)
    take_rows(ctx, index_data<std::int64_t>(ids), ids.numel(), src, dst, outer, n, row, zero_id, what);
  else
    take_rows(ctx, index_data<std::int32_t>(ids), ids.numel(), src, dst, outer, n, row, zero_id, what);
}

void gather_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<GatherOp>();
  const Tensor& x = ctx.input(0);
  const Tensor& index = ctx.input(1);
  check_index_dtype(ctx, index, "index");
  const int r = x.rank();
  if (r == 0 || a.axis < -r || a.axis >= r)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axis ", a.axis,
                " is out of range for ", x.type_string());
  const int axis = static_cast<int>(a.axis < 0 ? a.axis + r : a.axis);
  const Dims& xs = x.dims();
  if (r - 1 + index.rank() > Dims::kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' result rank ",
                r - 1 + index.rank(), " exceeds the maximum ", Dims::kMaxRank);
  std::int64_t od[Dims::kMaxRank];
  int q = 0;
  std::int64_t outer = 1, row = static_cast<std::int64_t>(size_of(x.dtype()));
  for (int k = 0; k < axis; ++k) outer *= (od[q++] = xs[k]);
  for (int k = 0; k < index.rank(); ++k) od[q++] = index.dims()[k];
  for (int k = axis + 1; k < r; ++k) row *= (od[q++] = xs[k]);
  Tensor& out = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(od, q)), x.dtype());
  if (index.numel() == 0) return;
  const char* src = x.numel() ? static_cast<const char*>(x.raw_data()) : nullptr;
  char* dst = out.numel() ? static_cast<char*>(out.raw_data()) : nullptr;
  if (!dst) {  // nothing to write, but the indices must still be in range
    outer = 0;
  }
  take(ctx, index, src, dst, outer, xs[axis], row, -1, "index");
}

void embedding_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<EmbeddingOp>();
  const Tensor& w = ctx.input(0);
  const Tensor& ids = ctx.input(1);
  check_index_dtype(ctx, ids, "ids");
  if (w.rank() != 2)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' weight must be [vocab, dim], got ", w.type_string());
  const std::int64_t vocab = w.dims()[0], dim = w.dims()[1];
  if (a.padding_idx < -1 || a.padding_idx >= vocab)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' padding_idx ", a.padding_idx,
                " must be -1 (none) or in [0, ", vocab, ")");
  if (ids.rank() + 1 > Dims::kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ids of rank ", ids.rank(),
                " give a result beyond the maximum rank ", Dims::kMaxRank);
  std::int64_t od[Dims::kMaxRank];
  for (int k = 0; k < ids.rank(); ++k) od[k] = ids.dims()[k];
  od[ids.rank()] = dim;
  Tensor& out =
      ctx.alloc_output(0, Dims(std::span<const std::int64_t>(od, ids.rank() + 1)), w.dtype());
  if (ids.numel() == 0) return;
  const std::int64_t row = dim * static_cast<std::int64_t>(size_of(w.dtype()));
  const char* src = w.numel() ? static_cast<const char*>(w.raw_data()) : nullptr;
  char* dst = out.numel() ? static_cast<char*>(out.raw_data()) : nullptr;
  take(ctx, ids, src, dst, dst ? 1 : 0, vocab, row, a.padding_idx, "id");
}

}  // namespace

KILN_REGISTER_KERNEL(GatherOp, Cpu, Undefined, gather_kernel);
KILN_REGISTER_KERNEL(EmbeddingOp, Cpu, Undefined, embedding_kernel);

}  // namespace kiln

namespace kiln::cpu {
namespace {

std::int64_t grad_axis_at_run(const KernelContext& ctx, std::int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axis ", axis,
                " is out of range for an input of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

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
    const int axis = static_cast<int>(grad_axis_at_run(ctx, ctx.attrs<GradOf<GatherOp>>().axis, r));
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

KILN_REGISTER_KERNELS(GradOf<GatherOp>, Cpu, GatherGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<EmbeddingOp>, Cpu, EmbeddingGradK, float, double);

}  // namespace kiln::cpu
