// CPU kernels of the element-wise indexing ops (kiln/dialect/indexing_ops.h):
// take_along_axis / put_along_axis and gather_nd / scatter_nd. Every index is
// checked (negative ones count from the end of their dim) before anything is
// written: one out of range is a kiln::Error (OutOfRange) naming the op, the
// index and where it sits. put / scatter write into a copy of x; the
// reduction is picked once per run, outside the element loop.
#include <algorithm>
#include <cstring>

#include "kiln/dialect/indexing_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "cpu_kernel_util.h"

namespace kiln::cpu {
namespace {

// Reads element k of an i32 or i64 index tensor as i64.
struct IndexReader {
  const std::int64_t* i64 = nullptr;
  const std::int32_t* i32 = nullptr;
  std::int64_t operator()(std::int64_t k) const { return i64 ? i64[k] : i32[k]; }
};

IndexReader index_reader(const KernelContext& ctx, const Tensor& index) {
  IndexReader r;
  if (index.dtype() == DataType::Int64) r.i64 = index.numel() ? index.data<std::int64_t>() : nullptr;
  else if (index.dtype() == DataType::Int32) r.i32 = index.numel() ? index.data<std::int32_t>() : nullptr;
  else
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' index must be i32 or i64, got ",
                to_string(index.dtype()));
  return r;
}

// v in [-n, n) → [0, n); kiln::Error (OutOfRange) naming the op otherwise.
inline std::int64_t normalized(const KernelContext& ctx, std::int64_t v, std::int64_t n,
                               std::int64_t position, std::int64_t dim) {
  if (v < -n || v >= n)
    throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' index ", v, " (at position ",
                position, ") is out of range [", -n, ", ", n, ") for dim ", dim, " of x");
  return v < 0 ? v + n : v;
}

enum class Reduction { None, Add, Mul, Max, Min };

Reduction reduction_of(const KernelContext& ctx, const std::string& r) {
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' reduction '", r,
              "' is not one of none, add, mul, max, min");
}

// Calls body(f) with f(old, update) -> new for the reduction.
template <typename T, typename Body>
void with_reduction(Reduction r, Body&& body) {
  switch (r) {
    case Reduction::None: return body([](T, T u) { return u; });
    case Reduction::Add: return body([](T a, T u) { return static_cast<T>(a + u); });
    case Reduction::Mul: return body([](T a, T u) { return static_cast<T>(a * u); });
    case Reduction::Max: return body([](T a, T u) { return std::max(a, u); });
    case Reduction::Min: return body([](T a, T u) { return std::min(a, u); });
  }
}

// ---- take_along_axis / put_along_axis ----

// The walk over index's elements: for element k (row-major over index's
// dims), `base` is its position in x with the axis coordinate left out.
struct AlongAxis {
  int rank = 0, axis = 0;
  std::int64_t idims[Dims::kMaxRank] = {};
  std::int64_t xstride[Dims::kMaxRank] = {};  // x's element strides, 0 at the axis
  std::int64_t axis_stride = 1, n = 0;        // x's stride and extent along the axis
};

AlongAxis along_axis(const KernelContext& ctx, const Dims& xd, const Dims& id, std::int64_t axis) {
  const std::string_view op = ctx.op()->name();
  const int r = xd.rank();
  if (r == 0) throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs an x of rank >= 1");
  if (id.rank() != r)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index [", id.to_string(),
                "] must have x's rank ", r, " (x is [", xd.to_string(), "])");
  if (axis < -r || axis >= r)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", axis, " is out of range for x [",
                xd.to_string(), "]");
  AlongAxis g;
  g.rank = r;
  g.axis = static_cast<int>(axis < 0 ? axis + r : axis);
  std::int64_t s = 1;
  for (int d = r - 1; d >= 0; --d) {
    if (d != g.axis && id[d] > xd[d])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' index [", id.to_string(),
                  "] is larger than x [", xd.to_string(), "] in dim ", d);
    g.idims[d] = id[d];
    g.xstride[d] = d == g.axis ? 0 : s;
    if (d == g.axis) g.axis_stride = s;
    s *= xd[d];
  }
  g.n = xd[g.axis];
  return g;
}

// f(k, base) for every element k of the index.
template <typename F>
void walk(const AlongAxis& g, std::int64_t count, F&& f) {
  std::int64_t c[Dims::kMaxRank] = {};
  std::int64_t base = 0;
  for (std::int64_t k = 0; k < count; ++k) {
    f(k, base);
    for (int d = g.rank - 1; d >= 0; --d) {
      base += g.xstride[d];
      if (++c[d] < g.idims[d]) break;
      base -= c[d] * g.xstride[d];
      c[d] = 0;
    }
  }
}

void check_along(const KernelContext& ctx, const AlongAxis& g, const IndexReader& ids,
                 std::int64_t count) {
  for (std::int64_t k = 0; k < count; ++k) normalized(ctx, ids(k), g.n, k, g.axis);
}

template <typename T>
struct TakeAlongAxisK {
  static void run(KernelContext& ctx) {
    const Tensor& x = typed_input<T>(ctx, 0);
    const Tensor& index = ctx.input(1);
    const IndexReader ids = index_reader(ctx, index);
    const AlongAxis g = along_axis(ctx, x.dims(), index.dims(), ctx.attrs<TakeAlongAxisOp>().axis);
    const std::int64_t count = index.numel();
    check_along(ctx, g, ids, count);
    Tensor& out = ctx.alloc_output(0, index.dims(), x.dtype());
    if (count == 0) return;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    walk(g, count, [&](std::int64_t k, std::int64_t base) {
      std::int64_t v = ids(k);
      if (v < 0) v += g.n;
      po[k] = px[base + v * g.axis_stride];
    });
  }
};

template <typename T>
struct PutAlongAxisK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<PutAlongAxisOp>();
    const Reduction red = reduction_of(ctx, a.reduction);
    const Tensor& x = typed_input<T>(ctx, 0);
    const Tensor& index = ctx.input(1);
    const Tensor& updates = typed_input<T>(ctx, 2);
    const IndexReader ids = index_reader(ctx, index);
    const AlongAxis g = along_axis(ctx, x.dims(), index.dims(), a.axis);
    require_same_dims(ctx, index, updates, 1, 2);
    const std::int64_t count = index.numel();
    check_along(ctx, g, ids, count);
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    if (x.bytes()) std::memcpy(out.raw_data(), x.raw_data(), x.bytes());
    if (count == 0) return;
    T* po = out.data<T>();
    const T* pu = updates.data<T>();
    with_reduction<T>(red, [&](auto combine) {
      walk(g, count, [&](std::int64_t k, std::int64_t base) {
        std::int64_t v = ids(k);
        if (v < 0) v += g.n;
        T& dst = po[base + v * g.axis_stride];
        dst = combine(dst, pu[k]);
      });
    });
  }
};

// ---- gather_nd / scatter_nd ----

// The geometry of an nd index [b…, m…, k] into x [b…, s_0 … s_{k-1}, r…].
struct NdIndex {
  int batch = 0;
  std::int64_t k = 0;
  std::int64_t tuples = 1;           // prod(index.dims[:-1])
  std::int64_t tuples_per_batch = 1;  // prod(index.dims[batch:-1])
  std::int64_t block = 1;            // prod(x.dims[batch:]): one batch's elements
  std::int64_t slice = 1;            // prod(x.dims[batch + k:]): one tuple's elements
  std::int64_t extent[Dims::kMaxRank] = {};  // x.dims[batch + j]
  std::int64_t stride[Dims::kMaxRank] = {};  // x's stride of dim batch + j
};

NdIndex nd_index(const KernelContext& ctx, const Dims& xd, const Dims& id, std::int64_t batch_dims) {
  const std::string_view op = ctx.op()->name();
  const int rx = xd.rank(), q = id.rank();
  if (batch_dims < 0 || q < 1 || q <= batch_dims)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index [", id.to_string(),
                "] needs rank >= 1 and > batch_dims (", batch_dims, ")");
  NdIndex g;
  g.batch = static_cast<int>(batch_dims);
  g.k = id[q - 1];
  if (g.batch + g.k > rx)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' index tuples of length ", g.k, " after ",
                g.batch, " batch dims do not fit x [", xd.to_string(), "]");
  for (int d = 0; d < g.batch; ++d)
    if (id[d] != xd[d])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' batch dim ", d, " of index [",
                  id.to_string(), "] differs from x [", xd.to_string(), "]");
  for (int d = 0; d < q - 1; ++d) g.tuples *= id[d];
  for (int d = g.batch; d < q - 1; ++d) g.tuples_per_batch *= id[d];
  for (int d = g.batch; d < rx; ++d) g.block *= xd[d];
  for (int d = static_cast<int>(g.batch + g.k); d < rx; ++d) g.slice *= xd[d];
  std::int64_t s = g.slice;
  for (int j = static_cast<int>(g.k) - 1; j >= 0; --j) {
    g.extent[j] = xd[g.batch + j];
    g.stride[j] = s;
    s *= g.extent[j];
  }
  return g;
}

void check_nd(const KernelContext& ctx, const NdIndex& g, const IndexReader& ids) {
  for (std::int64_t p = 0; p < g.tuples * g.k; ++p)
    normalized(ctx, ids(p), g.extent[p % g.k], p, g.batch + p % g.k);
}

// Where tuple t's slice starts in x.
inline std::int64_t nd_offset(const NdIndex& g, const IndexReader& ids, std::int64_t t) {
  std::int64_t off = g.tuples_per_batch ? (t / g.tuples_per_batch) * g.block : 0;
  for (std::int64_t j = 0; j < g.k; ++j) {
    std::int64_t v = ids(t * g.k + j);
    if (v < 0) v += g.extent[j];
    off += v * g.stride[j];
  }
  return off;
}

template <typename T>
struct GatherNdK {
  static void run(KernelContext& ctx) {
    const Tensor& x = typed_input<T>(ctx, 0);
    const Tensor& index = ctx.input(1);
    const IndexReader ids = index_reader(ctx, index);
    const Dims& xd = x.dims();
    const Dims& id = index.dims();
    const NdIndex g = nd_index(ctx, xd, id, ctx.attrs<GatherNdOp>().batch_dims);
    const int out_rank = id.rank() - 1 + xd.rank() - g.batch - static_cast<int>(g.k);
    if (out_rank > Dims::kMaxRank)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' result rank ", out_rank,
                  " exceeds the maximum ", Dims::kMaxRank);
    check_nd(ctx, g, ids);
    std::int64_t od[Dims::kMaxRank];
    int q = 0;
    for (int d = 0; d < id.rank() - 1; ++d) od[q++] = id[d];
    for (int d = static_cast<int>(g.batch + g.k); d < xd.rank(); ++d) od[q++] = xd[d];
    Tensor& out = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(od, q)), x.dtype());
    if (out.numel() == 0) return;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (std::int64_t t = 0; t < g.tuples; ++t)
      std::copy_n(px + nd_offset(g, ids, t), g.slice, po + t * g.slice);
  }
};

template <typename T>
struct ScatterNdK {
  static void run(KernelContext& ctx) {
    const Reduction red = reduction_of(ctx, ctx.attrs<ScatterNdOp>().reduction);
    const Tensor& x = typed_input<T>(ctx, 0);
    const Tensor& index = ctx.input(1);
    const Tensor& updates = typed_input<T>(ctx, 2);
    const IndexReader ids = index_reader(ctx, index);
    const Dims& xd = x.dims();
    const Dims& id = index.dims();
    const NdIndex g = nd_index(ctx, xd, id, 0);
    std::int64_t want[2 * Dims::kMaxRank];
    int q = 0;
    for (int d = 0; d < id.rank() - 1; ++d) want[q++] = id[d];
    for (int d = static_cast<int>(g.k); d < xd.rank(); ++d) want[q++] = xd[d];
    const Dims& ud = updates.dims();
    bool same = ud.rank() == q;
    for (int d = 0; same && d < q; ++d) same = ud[d] == want[d];
    if (!same)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' updates [", ud.to_string(),
                  "] must have index's dims but the last, then x's dims after the first ", g.k);
    check_nd(ctx, g, ids);
    Tensor& out = ctx.alloc_output(0, xd, x.dtype());
    if (x.bytes()) std::memcpy(out.raw_data(), x.raw_data(), x.bytes());
    if (out.numel() == 0 || updates.numel() == 0) return;
    T* po = out.data<T>();
    const T* pu = updates.data<T>();
    with_reduction<T>(red, [&](auto combine) {
      for (std::int64_t t = 0; t < g.tuples; ++t) {
        T* dst = po + nd_offset(g, ids, t);
        const T* src = pu + t * g.slice;
        for (std::int64_t j = 0; j < g.slice; ++j) dst[j] = combine(dst[j], src[j]);
      }
    });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(TakeAlongAxisOp, Cpu, TakeAlongAxisK, float, double, std::int32_t, std::int64_t, bool);
KILN_REGISTER_KERNELS(PutAlongAxisOp, Cpu, PutAlongAxisK, float, double, std::int32_t, std::int64_t, bool);
KILN_REGISTER_KERNELS(GatherNdOp, Cpu, GatherNdK, float, double, std::int32_t, std::int64_t, bool);
KILN_REGISTER_KERNELS(ScatterNdOp, Cpu, ScatterNdK, float, double, std::int32_t, std::int64_t, bool);

}  // namespace kiln::cpu
