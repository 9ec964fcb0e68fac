// Host halves of the CUDA kernels in reduce.cu (reductions and reduce_as,
// softmax, cross-entropy, layer_norm / rms_norm, batch_norm and
// fused_batch_norm, with their gradients): each reads its op's attributes,
// checks shapes and labels with the CPU kernels' messages, allocates outputs
// and launches (launch.h); registered for PlaceKind::Cuda with the dtypes
// the CPU registers.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/nn_ops.h"
#include "kiln/dialect/norm_ops.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/reduce_plan.h"

namespace kiln::cuda {
namespace {

// ---- reductions ----

// The forward op's output dims: x's without the reduced axes (1 for each
// with keepdim).
Dims reduced_dims(const Dims& xd, const std::vector<int>& axes, bool keepdim) {
  std::int64_t buf[Dims::kMaxRank];
  int r = 0;
  for (int i = 0; i < xd.rank(); ++i) {
    const bool red = std::binary_search(axes.begin(), axes.end(), i);
    if (!red)
      buf[r++] = xd[i];
    else if (keepdim)
      buf[r++] = 1;
  }
  return Dims(std::span<const std::int64_t>(buf, r));
}

// The walk and the grad map of x reduced over `axes`.
void plan_reduction(const Dims& xd, const std::vector<int>& axes, ReduceWalk& w, ReduceMap* map) {
  ReduceGroup g[Dims::kMaxRank];
  const int m = collapse_reduce_groups(xd, axes, g);
  w = ReduceWalk{};
  for (int k = 0; k < m; ++k) {
    if (g[k].reduced) {
      w.red_dims[w.red_rank] = g[k].extent;
      w.red_strides[w.red_rank++] = g[k].in_stride;
      w.count *= g[k].extent;
    } else {
      w.kept_dims[w.kept_rank] = g[k].extent;
      w.kept_strides[w.kept_rank++] = g[k].in_stride;
      w.outputs *= g[k].extent;
    }
    if (map) {
      map->dims[k] = g[k].extent;
      map->out_strides[k] = g[k].reduced ? 0 : g[k].out_stride;
    }
  }
  if (map) map->rank = m;
}

// A sum or mean over walk `w`: rows of a [rows, cols] block summed per
// column by launch_column_sum, anything else by launch_reduce.
template <typename T>
void sum_or_mean(const KernelContext& ctx, ReduceKind kind, const T* x, T* out, const ReduceWalk& w) {
  if (is_column_walk(w)) {
    const BufferRef scratch = scratch_buffer(ctx, column_sum_scratch<T>(w.count, w.outputs));
    launch_column_sum<T>(x, out, w.count, w.outputs, kind == ReduceKind::Mean, scratch->data(), stream_of(ctx));
  } else {
    launch_reduce<T>(kind, x, out, w, stream_of(ctx));
  }
  check_launch(ctx);
}

template <ReduceKind kind, typename OpT, typename T>
void reduce_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<OpT>();
  const Tensor x = typed_input<T>(ctx, 0);
  const std::string_view op = ctx.op()->name();
  const Dims& xd = x.dims();
  const auto axes = normalize_reduce_axes(op, a.axis, xd.rank());
  const Dims od = reduced_dims(xd, axes, a.keepdim);
  std::int64_t count = 1;
  for (int ax : axes) count *= xd[ax];
  Tensor& out = ctx.alloc_output(0, od, x.dtype());
  if (od.numel() == 0) return;
  if (count == 0 && kind == ReduceKind::Max)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' reduces over an empty axis (input [",
                xd.to_string(), "])");
  ReduceWalk w;
  plan_reduction(xd, axes, w, nullptr);
  // An empty reduced axis: count 0, each output the reduction's identity
  // (mean: 0 / 0, NaN).
  if (kind == ReduceKind::Sum || kind == ReduceKind::Mean) return sum_or_mean(ctx, kind, x.data<T>(), out.data<T>(), w);
  launch_reduce<T>(kind, x.data<T>(), out.data<T>(), w, stream_of(ctx));
  check_launch(ctx);
}

template <ReduceKind kind, typename OpT, typename T>
void reduce_grad_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<OpT>();
  const std::string_view op = ctx.op()->name();
  const Tensor x = typed_input<T>(ctx, 0);
  const std::uint32_t nd = ctx.num_inputs() - 1;
  const Tensor dout = typed_input<T>(ctx, nd);
  const Dims& xd = x.dims();
  const auto axes = normalize_reduce_axes(op, a.axis, xd.rank());
  const Dims want = reduced_dims(xd, axes, a.keepdim);
  for (std::uint32_t k = 1; k <= nd; ++k)
    if (ctx.input(k).dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' input #", k, " [",
                  ctx.input(k).dims().to_string(), "] must have x's reduced shape [",
                  want.to_string(), "]");
  const Tensor out = kind == ReduceKind::Max ? typed_input<T>(ctx, 1) : Tensor();
  Tensor& dx = ctx.alloc_output(0, xd, x.dtype());
  const std::int64_t n = xd.numel();
  if (n == 0) return;
  ReduceWalk w;
  ReduceMap map;
  plan_reduction(xd, axes, w, &map);
  BufferRef scratch;
  if (kind == ReduceKind::Max || kind == ReduceKind::Prod)
    scratch = scratch_buffer(ctx, static_cast<std::size_t>(w.outputs) * 16);
  launch_reduce_grad<T>(kind, x.data<T>(), kind == ReduceKind::Max ? out.data<T>() : nullptr,
                        dout.data<T>(), dx.data<T>(), n, w, map,
                        scratch ? scratch->data() : nullptr, stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
struct SumK {
  static void run(KernelContext& ctx) { reduce_kernel<ReduceKind::Sum, SumOp, T>(ctx); }
};
template <typename T>
struct MeanK {
  static void run(KernelContext& ctx) { reduce_kernel<ReduceKind::Mean, MeanOp, T>(ctx); }
};
template <typename T>
struct MaxK {
  static void run(KernelContext& ctx) { reduce_kernel<ReduceKind::Max, MaxOp, T>(ctx); }
};
template <typename T>
struct ProdK {
  static void run(KernelContext& ctx) { reduce_kernel<ReduceKind::Prod, ProdOp, T>(ctx); }
};
// reduce_as's checks and walk: x (dims xd) summed down to td (aligned with
// x's trailing dims; a target dim of 1, or a leading dim of x, is summed).
// False when nothing is summed (only size-1 dims differ: a copy).
bool reduce_as_walk(const KernelContext& ctx, const Dims& xd, const Dims& td, ReduceWalk& w) {
  const int rx = xd.rank(), rt = td.rank(), lead = rx - rt;
  bool ok = rt <= rx;
  for (int i = 0; ok && i < rt; ++i) ok = td[i] == xd[lead + i] || td[i] == 1;
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' cannot sum [", xd.to_string(),
                "] down to [", td.to_string(), "] (the target's dims must equal x's trailing dims or be 1)");
  if (td.numel() == xd.numel()) return false;
  std::vector<int> axes;
  for (int i = 0; i < rx; ++i)
    if (i < lead || td[i - lead] == 1) axes.push_back(i);
  plan_reduction(xd, axes, w, nullptr);
  return true;
}

void copy_reduce_as_input(const KernelContext& ctx, const Tensor& x, Tensor& out) {
  if (x.bytes())
    check_cuda(cudaMemcpyAsync(out.raw_data(), x.raw_data(), x.bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)),
               "copying reduce_as's input");
}

// reduce_as, f32 in f64.
template <typename T>
struct ReduceAsK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const Dims td = ctx.input(1).dims();
    ReduceWalk w;
    const bool sums = reduce_as_walk(ctx, x.dims(), td, w);
    Tensor& out = ctx.alloc_output(0, td, x.dtype());
    if (!sums) return copy_reduce_as_input(ctx, x, out);
    sum_or_mean(ctx, ReduceKind::Sum, x.data<T>(), out.data<T>(), w);
  }
};

// reduce_as in bf16 / f16 (a bias gradient under amp): a sum over rows
// reads the 16-bit tensor once (launch_column_sum_half); any other walk
// widens it and sums in f32. Either way half_via_f32's bits.
template <DataType D>
void reduce_as_half_kernel(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  if (x.dtype() != D) throw_input_dtype(ctx, 0, D);
  const Dims td = ctx.input(1).dims();
  ReduceWalk w;
  const bool sums = reduce_as_walk(ctx, x.dims(), td, w);
  Tensor& out = ctx.alloc_output(0, td, D);
  if (!sums) return copy_reduce_as_input(ctx, x, out);
  const cudaStream_t s = stream_of(ctx);
  if (is_column_walk(w)) {
    const BufferRef scratch = scratch_buffer(ctx, column_sum_scratch<float>(w.count, w.outputs));
    launch_column_sum_half(D, x.raw_data(), out.raw_data(), w.count, w.outputs, scratch->data(), s);
  } else {
    const BufferRef wide = scratch_buffer(ctx, sizeof(float) * std::size_t(x.numel() + td.numel()));
    float* xf = static_cast<float*>(wide->data());
    float* of = xf + x.numel();
    launch_cast(D, DataType::Float32, x.raw_data(), xf, x.numel(), s);
    launch_reduce<float>(ReduceKind::Sum, xf, of, w, s);
    launch_cast(DataType::Float32, D, of, out.raw_data(), td.numel(), s);
  }
  check_launch(ctx);
}

template <typename T>
struct SumGradK {
  static void run(KernelContext& ctx) {
    reduce_grad_kernel<ReduceKind::Sum, GradOf<SumOp>, T>(ctx);
  }
};
template <typename T>
struct MeanGradK {
  static void run(KernelContext& ctx) {
    reduce_grad_kernel<ReduceKind::Mean, GradOf<MeanOp>, T>(ctx);
  }
};
template <typename T>
struct MaxGradK {
  static void run(KernelContext& ctx) {
    reduce_grad_kernel<ReduceKind::Max, GradOf<MaxOp>, T>(ctx);
  }
};
template <typename T>
struct ProdGradK {
  static void run(KernelContext& ctx) {
    reduce_grad_kernel<ReduceKind::Prod, GradOf<ProdOp>, T>(ctx);
  }
};

// ---- softmax, log_softmax ----

struct AxisView {
  std::int64_t outer = 1, c = 1, inner = 1;
};
AxisView axis_view(const KernelContext& ctx, const Dims& d, std::int64_t axis) {
  const std::int64_t rank = d.rank();
  if (rank == 0 || axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axis ", axis,
                " is out of range for an input of dims [", d.to_string(), "]");
  if (axis < 0) axis += rank;
  AxisView v;
  for (std::int64_t i = 0; i < axis; ++i) v.outer *= d[static_cast<int>(i)];
  for (std::int64_t i = axis + 1; i < rank; ++i) v.inner *= d[static_cast<int>(i)];
  v.c = d[static_cast<int>(axis)];
  return v;
}

template <typename OpT, typename T, bool Log>
void softmax_kernel(KernelContext& ctx) {
  const Tensor x = typed_input<T>(ctx, 0);
  const AxisView v = axis_view(ctx, x.dims(), ctx.attrs<OpT>().axis);
  Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
  launch_softmax<T>(Log, x.data<T>(), out.data<T>(), v.outer, v.c, v.inner, stream_of(ctx));
  check_launch(ctx);
}

template <typename OpT, typename T, bool Log>
void softmax_grad_kernel(KernelContext& ctx) {
  const std::string_view op = ctx.op()->name();
  const Tensor y = typed_input<T>(ctx, 0), dy = typed_input<T>(ctx, 1);
  const Dims& d = y.dims();
  if (dy.dims() != d)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' out [", d.to_string(), "] and dout [",
                dy.dims().to_string(), "] must have one shape");
  const AxisView v = axis_view(ctx, d, ctx.attrs<OpT>().axis);
  Tensor& dx = ctx.alloc_output(0, d, y.dtype());
  launch_softmax_grad<T>(Log, y.data<T>(), dy.data<T>(), dx.data<T>(), v.outer, v.c, v.inner,
                         stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
struct SoftmaxK {
  static void run(KernelContext& ctx) { softmax_kernel<SoftmaxOp, T, false>(ctx); }
};
template <typename T>
struct LogSoftmaxK {
  static void run(KernelContext& ctx) { softmax_kernel<LogSoftmaxOp, T, true>(ctx); }
};
template <typename T>
struct SoftmaxGradK {
  static void run(KernelContext& ctx) { softmax_grad_kernel<GradOf<SoftmaxOp>, T, false>(ctx); }
};
template <typename T>
struct LogSoftmaxGradK {
  static void run(KernelContext& ctx) { softmax_grad_kernel<GradOf<LogSoftmaxOp>, T, true>(ctx); }
};

// ---- softmax_with_cross_entropy ----

// The loss dims ([lead..., 1]) and label dims ([lead...]) of logits / softmax
// dims `d`; kiln::Error naming the op unless rank >= 2 and the label fits.
struct CrossEntropyDims {
  Dims loss, label;
  std::int64_t n = 0, c = 0;
};
CrossEntropyDims cross_entropy_dims(const KernelContext& ctx, const Dims& d, const Tensor& label,
                                    const char* what) {
  const std::string_view op = ctx.op()->name();
  if (d.rank() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " must have rank >= 2, got [",
                d.to_string(), "]");
  CrossEntropyDims r;
  r.c = d[d.rank() - 1];
  std::int64_t lead[Dims::kMaxRank];
  for (int i = 0; i + 1 < d.rank(); ++i) lead[i] = d[i];
  lead[d.rank() - 1] = 1;
  r.loss = Dims(std::span<const std::int64_t>(lead, d.rank()));
  r.label = Dims(std::span<const std::int64_t>(lead, d.rank() - 1));
  r.n = r.loss.numel();
  if (label.dims() != r.loss && label.dims() != r.label)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' label dims [", label.dims().to_string(),
                "] do not fit ", what, " [", d.to_string(), "] (expected [", r.label.to_string(),
                "] or [", r.loss.to_string(), "])");
  return r;
}

void check_label_dtype(const KernelContext& ctx, const Tensor& label) {
  if (label.dtype() != DataType::Int64 && label.dtype() != DataType::Int32)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' label must be i64 or i32, got ", to_string(label.dtype()));
}

// Every label in [0, c) or ignore: the CPU's check and message, before
// anything is written.
void check_labels(const KernelContext& ctx, const Tensor& label, std::int64_t c,
                  std::int64_t ignore) {
  const BadIndex bad = find_bad_index(ctx, label, c, ignore);
  if (bad.pos >= 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' row ", bad.pos,
                " has label ", bad.id, ", outside [0, ", c, ") (ignore_index = ", ignore, ")");
}

template <typename T>
struct SoftmaxCrossEntropyK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor x = typed_input<T>(ctx, 0), label = ctx.input(1);
    const CrossEntropyDims d = cross_entropy_dims(ctx, x.dims(), label, "logits");
    check_label_dtype(ctx, label);
    const std::int64_t ignore = ctx.attrs<SoftmaxWithCrossEntropyOp>().ignore_index;
    Tensor& sm = ctx.alloc_output(0, x.dims(), x.dtype());
    Tensor& loss = ctx.alloc_output(1, d.loss, x.dtype());
    if (d.n == 0) return;
    if (d.c == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' logits have no classes (C = 0)");
    check_labels(ctx, label, d.c, ignore);
    const cudaStream_t s = stream_of(ctx);
    if (label.dtype() == DataType::Int64)
      launch_cross_entropy<T, std::int64_t>(x.data<T>(), label.data<std::int64_t>(), sm.data<T>(),
                                            loss.data<T>(), d.n, d.c, ignore, s);
    else
      launch_cross_entropy<T, std::int32_t>(x.data<T>(), label.data<std::int32_t>(), sm.data<T>(),
                                            loss.data<T>(), d.n, d.c, ignore, s);
    check_launch(ctx);
  }
};

template <typename T>
struct SoftmaxCrossEntropyGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor sm = typed_input<T>(ctx, 0), label = ctx.input(1), dloss = typed_input<T>(ctx, 2);
    const CrossEntropyDims d = cross_entropy_dims(ctx, sm.dims(), label, "softmax");
    if (dloss.dims() != d.loss)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dloss dims [",
                  dloss.dims().to_string(), "] must be the loss's [", d.loss.to_string(), "]");
    check_label_dtype(ctx, label);
    const std::int64_t ignore = ctx.attrs<GradOf<SoftmaxWithCrossEntropyOp>>().ignore_index;
    Tensor& dx = ctx.alloc_output(0, sm.dims(), sm.dtype());
    if (d.n == 0 || d.c == 0) return;
    check_labels(ctx, label, d.c, ignore);
    const cudaStream_t s = stream_of(ctx);
    if (label.dtype() == DataType::Int64)
      launch_cross_entropy_grad<T, std::int64_t>(sm.data<T>(), label.data<std::int64_t>(),
                                                 dloss.data<T>(), dx.data<T>(), d.n, d.c, ignore,
                                                 s);
    else
      launch_cross_entropy_grad<T, std::int32_t>(sm.data<T>(), label.data<std::int32_t>(),
                                                 dloss.data<T>(), dx.data<T>(), d.n, d.c, ignore,
                                                 s);
    check_launch(ctx);
  }
};

// ---- cross_entropy (no softmax kept) ----

// f(labels) with the label tensor's data as const i64* or const i32*.
template <typename F>
void with_labels(const Tensor& label, F&& f) {
  if (label.dtype() == DataType::Int64) f(label.data<std::int64_t>());
  else f(label.data<std::int32_t>());
}

// The logits (input 0), of dtype `dt`; kiln::Error naming the op otherwise.
const Tensor& logits_input(const KernelContext& ctx, DataType dt) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != dt)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' logits are ", to_string(x.dtype()),
                ", the kernel reads ", to_string(dt));
  return x;
}

// The loss's dtype for logits of `dt`: f32 for bf16 / f16.
DataType loss_dtype(DataType dt) {
  return dt == DataType::BFloat16 || dt == DataType::Float16 ? DataType::Float32 : dt;
}

// kiln.cross_entropy over logits of dtype Dt (f32, f64, bf16, f16).
template <DataType Dt>
struct CrossEntropyK {
  static void run(KernelContext& ctx) {
    const Tensor x = logits_input(ctx, Dt), label = ctx.input(1);
    const CrossEntropyDims d = cross_entropy_dims(ctx, x.dims(), label, "logits");
    check_label_dtype(ctx, label);
    const std::int64_t ignore = ctx.attrs<CrossEntropyOp>().ignore_index;
    Tensor& loss = ctx.alloc_output(0, d.loss, loss_dtype(Dt));
    Tensor& lse = ctx.alloc_output(1, d.loss, loss_dtype(Dt));
    if (d.n == 0) return;
    if (d.c == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' logits have no classes (C = 0)");
    check_labels(ctx, label, d.c, ignore);
    with_labels(label, [&](const auto* labels) {
      if constexpr (Dt == DataType::Float32 || Dt == DataType::Float64) {
        using T = std::conditional_t<Dt == DataType::Float32, float, double>;
        launch_cross_entropy_lse(x.data<T>(), labels, loss.data<T>(), lse.data<T>(), d.n, d.c, ignore,
                                 stream_of(ctx));
      } else {
        launch_cross_entropy_lse_half(Dt, x.raw_data(), labels, loss.data<float>(), lse.data<float>(), d.n, d.c,
                                      ignore, stream_of(ctx));
      }
    });
    check_launch(ctx);
  }
};

// The gradient of logits x (dtype Dt) into dx: cross_entropy_grad's (dx a
// new buffer) and cross_entropy_grad_'s (dx = x: each element is read
// before it is written, by the thread that writes it).
template <typename OpT, DataType Dt>
void cross_entropy_lse_grad(KernelContext& ctx, const Tensor& x, void* dx) {
  const std::string_view op = ctx.op()->name();
  const DataType acc = loss_dtype(Dt);
  const Tensor& lse = ctx.input(1);
  const Tensor& label = ctx.input(2);
  const Tensor& dloss = ctx.input(3);
  const CrossEntropyDims d = cross_entropy_dims(ctx, x.dims(), label, "logits");
  for (const auto& [t, what] : {std::pair{&lse, "lse"}, std::pair{&dloss, "dloss"}}) {
    if (t->dtype() != acc)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " is ", to_string(t->dtype()),
                  ", expected ", to_string(acc));
    if (t->dims() != d.loss)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " dims [", t->dims().to_string(),
                  "] must be the loss's [", d.loss.to_string(), "]");
  }
  check_label_dtype(ctx, label);
  if (d.n == 0 || d.c == 0) return;
  const std::int64_t ignore = ctx.attrs<OpT>().ignore_index;
  check_labels(ctx, label, d.c, ignore);
  with_labels(label, [&](const auto* labels) {
    if constexpr (Dt == DataType::Float32 || Dt == DataType::Float64) {
      using T = std::conditional_t<Dt == DataType::Float32, float, double>;
      launch_cross_entropy_lse_grad(x.data<T>(), lse.data<T>(), labels, dloss.data<T>(), static_cast<T*>(dx),
                                    d.n, d.c, ignore, stream_of(ctx));
    } else {
      launch_cross_entropy_lse_grad_half(Dt, x.raw_data(), lse.data<float>(), labels, dloss.data<float>(), dx,
                                         d.n, d.c, ignore, stream_of(ctx));
    }
  });
  check_launch(ctx);
}

template <DataType Dt>
struct CrossEntropyGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = logits_input(ctx, Dt);  // alive while the output is made
    Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
    cross_entropy_lse_grad<GradOf<CrossEntropyOp>, Dt>(ctx, x, dx.raw_data());
  }
};

template <DataType Dt>
struct CrossEntropyGradInplaceK {
  static void run(KernelContext& ctx) {
    (void)logits_input(ctx, Dt);  // checks the dtype
    Tensor& x = ctx.output(0);    // the logits' variable: overwritten by their gradient
    cross_entropy_lse_grad<CrossEntropyGradInplaceOp, Dt>(ctx, x, x.raw_data());
  }
};

// kiln.cross_entropy's three kernels for logits of dtype Dt.
template <DataType Dt>
void register_cross_entropy() {
  KernelRegistrar<CrossEntropyOp>(PlaceKind::Cuda, Dt, &CrossEntropyK<Dt>::run, "cross_entropy");
  KernelRegistrar<GradOf<CrossEntropyOp>>(PlaceKind::Cuda, Dt, &CrossEntropyGradK<Dt>::run, "cross_entropy_grad");
  KernelRegistrar<CrossEntropyGradInplaceOp>(PlaceKind::Cuda, Dt, &CrossEntropyGradInplaceK<Dt>::run,
                                             "cross_entropy_grad_");
}

[[maybe_unused]] const bool cross_entropy_registered = [] {
  register_cross_entropy<DataType::Float32>();
  register_cross_entropy<DataType::Float64>();
  register_cross_entropy<DataType::BFloat16>();
  register_cross_entropy<DataType::Float16>();
  return true;
}();

// ---- layer_norm / rms_norm ----

struct Rows {
  std::int64_t m = 1, n = 1;
};
Rows rows_of(std::string_view op, const Dims& d, std::int64_t begin_norm_axis) {
  const std::int64_t rank = d.rank();
  const std::int64_t a = begin_norm_axis < 0 ? begin_norm_axis + rank : begin_norm_axis;
  if (rank < 1 || a < 0 || a >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' begin_norm_axis ", begin_norm_axis,
                " is invalid for x [", d.to_string(), "]");
  Rows r;
  for (std::int64_t i = 0; i < rank; ++i) (i < a ? r.m : r.n) *= d[static_cast<int>(i)];
  return r;
}

template <typename T>
const Tensor& sized_input(const KernelContext& ctx, std::uint32_t i, std::string_view what,
                          std::int64_t numel) {
  const Tensor& t = typed_input<T>(ctx, i);
  if (t.numel() != numel)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " (input #", i,
                ") [", t.dims().to_string(), "] has ", t.numel(), " elements, expected ", numel);
  return t;
}

template <typename T, bool Rms>
void norm_forward(KernelContext& ctx, std::int64_t begin_norm_axis, double epsilon) {
  const std::string_view op = ctx.op()->name();
  const Tensor x = typed_input<T>(ctx, 0);
  const Rows r = rows_of(op, x.dims(), begin_norm_axis);
  const Tensor w = sized_input<T>(ctx, 1, "weight", r.n);
  Tensor bias;
  if constexpr (!Rms) bias = sized_input<T>(ctx, 2, "bias", r.n);
  Tensor& y = ctx.alloc_output(0, x.dims(), x.dtype());
  const Dims sd({r.m});
  T* mean = nullptr;
  if constexpr (!Rms) mean = ctx.alloc_output(1, sd, x.dtype()).template data<T>();
  T* rstd = ctx.alloc_output(Rms ? 1 : 2, sd, x.dtype()).template data<T>();
  if (r.m == 0) return;
  const T inv_n = r.n ? T(1) / static_cast<T>(r.n) : T(0);
  launch_norm<T>(Rms, x.data<T>(), w.data<T>(), Rms ? nullptr : bias.data<T>(), y.data<T>(), mean,
                 rstd, r.m, r.n, static_cast<T>(epsilon), inv_n, stream_of(ctx));
  check_launch(ctx);
}

template <typename T, bool Rms>
void norm_backward(KernelContext& ctx, std::int64_t begin_norm_axis) {
  const std::string_view op = ctx.op()->name();
  const Tensor x = typed_input<T>(ctx, 0);
  const Rows r = rows_of(op, x.dims(), begin_norm_axis);
  const Tensor w = sized_input<T>(ctx, 1, "weight", r.n);
  Tensor mean;
  if constexpr (!Rms) mean = sized_input<T>(ctx, 2, "mean", r.m);
  const std::uint32_t irstd = Rms ? 2 : 3, idy = Rms ? 3 : 4;
  const Tensor rstd = sized_input<T>(ctx, irstd, "rstd", r.m);
  const Tensor dy = typed_input<T>(ctx, idy);
  if (x.dims() != dy.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' inputs #0 [", x.dims().to_string(),
                "] and #", idy, " [", dy.dims().to_string(), "] must have one shape");
  T* dx = ctx.alloc_output(0, x.dims(), x.dtype()).template data<T>();
  T* dw = ctx.alloc_output(1, w.dims(), w.dtype()).template data<T>();
  T* db = nullptr;
  if constexpr (!Rms) db = ctx.alloc_output(2, w.dims(), w.dtype()).template data<T>();
  if (r.n == 0) return;
  const T inv_n = T(1) / static_cast<T>(r.n);
  const std::int64_t chunks = norm_grad_chunks(r.m);
  const BufferRef scratch = scratch_buffer(ctx, sizeof(T) * std::size_t(std::max<std::int64_t>(1, 2 * chunks * r.n)));
  launch_norm_grad<T>(Rms, x.data<T>(), dy.data<T>(), w.data<T>(), Rms ? nullptr : mean.data<T>(),
                      rstd.data<T>(), dx, dw, db, static_cast<T*>(scratch->data()), r.m, r.n, inv_n,
                      stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
struct LayerNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<LayerNormOp>();
    norm_forward<T, false>(ctx, a.begin_norm_axis, a.epsilon);
  }
};
template <typename T>
struct LayerNormGradK {
  static void run(KernelContext& ctx) {
    norm_backward<T, false>(ctx, ctx.attrs<GradOf<LayerNormOp>>().begin_norm_axis);
  }
};
template <typename T>
struct RmsNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<RmsNormOp>();
    norm_forward<T, true>(ctx, a.begin_norm_axis, a.epsilon);
  }
};
template <typename T>
struct RmsNormGradK {
  static void run(KernelContext& ctx) {
    norm_backward<T, true>(ctx, ctx.attrs<GradOf<RmsNormOp>>().begin_norm_axis);
  }
};

// ---- batch_norm ----

struct Nchw {
  std::int64_t n = 1, c = 1, s = 1;
};
Nchw nchw_of(std::string_view op, const Dims& d) {
  if (d.rank() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' x must have rank >= 2 ([N, C, ...]), got [", d.to_string(), "]");
  Nchw r;
  r.n = d[0];
  r.c = d[1];
  for (int i = 2; i < d.rank(); ++i) r.s *= d[i];
  return r;
}

// The attributes the forward kernels read.
struct BatchNormAttrs {
  double momentum, epsilon;
  bool is_test;
  const std::string& data_format;
};

// fused_batch_norm's activation, as the attribute names it.
BatchNormAct batch_norm_act(std::string_view op, const std::string& activation) {
  if (activation == "relu") return BatchNormAct::Relu;
  if (activation == "relu6") return BatchNormAct::Relu6;
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' activation '", activation,
              "' has no CUDA kernel (expected \"relu\" or \"relu6\")");
}

// Input i, x or dy, stored as XD: T's own dtype, or bf16 / f16 with T f32.
template <typename T, DataType XD>
Tensor stored_input(const KernelContext& ctx, std::uint32_t i) {
  static_assert(XD == data_type_of<T> || std::is_same_v<T, float>);
  const Tensor& t = ctx.input(i);
  if (t.dtype() != XD) throw_input_dtype(ctx, i, XD);
  return t;
}

// The scratch the batch norm kernels take over x as g (none for no channels).
template <typename T>
BufferRef batch_norm_scratch_of(const KernelContext& ctx, const Nchw& g) {
  const std::int64_t n = batch_norm_scratch(g.n, g.c, g.s);
  return n ? scratch_buffer(ctx, static_cast<std::size_t>(n) * sizeof(T)) : BufferRef();
}

// batch_norm (act None) or fused_batch_norm over NCHW x (stored as XD; the
// [C] operands, statistics and sums T).
template <typename T, DataType XD>
void batch_norm_forward(KernelContext& ctx, const BatchNormAttrs& a, BatchNormAct act) {
  const std::string_view op = ctx.op()->name();
  data_format::require_nchw_kernel(op, a.data_format, "CUDA");
  const Tensor x = stored_input<T, XD>(ctx, 0);
  const Nchw g = nchw_of(op, x.dims());
  const Tensor scale = sized_input<T>(ctx, 1, "scale", g.c);
  const Tensor bias = sized_input<T>(ctx, 2, "bias", g.c);
  const Tensor rm = sized_input<T>(ctx, 3, "running_mean", g.c);
  const Tensor rv = sized_input<T>(ctx, 4, "running_var", g.c);
  T* run_mean = updated<T>(ctx, 1, 3, rm);
  T* run_var = updated<T>(ctx, 2, 4, rv);
  const Dims cd({g.c});
  T* smean = ctx.alloc_output(3, cd, data_type_of<T>).template data<T>();
  T* sinv = ctx.alloc_output(4, cd, data_type_of<T>).template data<T>();
  Tensor& y = ctx.alloc_output(0, x.dims(), XD);
  if (!a.is_test && g.n * g.s == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' cannot compute batch statistics of an empty batch (x [", x.dims().to_string(),
                "])");
  const BufferRef scratch = batch_norm_scratch_of<T>(ctx, g);
  launch_batch_norm<T>(XD, x.raw_data(), scale.data<T>(), bias.data<T>(), run_mean, run_var, smean, sinv,
                       y.raw_data(), scratch ? static_cast<T*>(scratch->data()) : nullptr, g.n, g.c, g.s,
                       static_cast<T>(a.epsilon), static_cast<T>(a.momentum), a.is_test, act, stream_of(ctx));
  check_launch(ctx);
}

// batch_norm_grad(x, scale, saved_mean, saved_invstd, dy) (act None) or
// fused_batch_norm_grad(x, scale, bias, saved_mean, saved_invstd, dy) over
// NCHW x (x, dy and dx stored as XD; the rest T).
template <typename T, DataType XD>
void batch_norm_backward(KernelContext& ctx, bool is_test, const std::string& format,
                         BatchNormAct act) {
  const std::string_view op = ctx.op()->name();
  data_format::require_nchw_kernel(op, format, "CUDA");
  const std::uint32_t stats = act == BatchNormAct::None ? 2 : 3;  // saved_mean's operand
  const Tensor x = stored_input<T, XD>(ctx, 0);
  const Nchw g = nchw_of(op, x.dims());
  const Tensor scale = sized_input<T>(ctx, 1, "scale", g.c);
  const T* bias =
      act == BatchNormAct::None ? nullptr : sized_input<T>(ctx, 2, "bias", g.c).template data<T>();
  const Tensor mean = sized_input<T>(ctx, stats, "saved_mean", g.c);
  const Tensor invstd = sized_input<T>(ctx, stats + 1, "saved_invstd", g.c);
  const Tensor dy = stored_input<T, XD>(ctx, stats + 2);
  if (x.dims() != dy.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' inputs #0 [", x.dims().to_string(),
                "] and #", stats + 2, " [", dy.dims().to_string(), "] must have one shape");
  void* dx = ctx.alloc_output(0, x.dims(), XD).raw_data();
  T* dscale = ctx.alloc_output(1, scale.dims(), data_type_of<T>).template data<T>();
  T* dbias = ctx.alloc_output(2, scale.dims(), data_type_of<T>).template data<T>();
  const BufferRef scratch = batch_norm_scratch_of<T>(ctx, g);
  launch_batch_norm_grad<T>(XD, x.raw_data(), scale.data<T>(), bias, mean.data<T>(), invstd.data<T>(),
                            dy.raw_data(), dx, dscale, dbias, scratch ? static_cast<T*>(scratch->data()) : nullptr,
                            g.n, g.c, g.s, is_test, act, stream_of(ctx));
  check_launch(ctx);
}

// The kernels: T f32 / f64 with x in T (KILN_REGISTER_KERNELS), or T f32
// with x in XD bf16 / f16.
template <typename T, DataType XD = data_type_of<T>>
struct BatchNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<BatchNormOp>();
    batch_norm_forward<T, XD>(ctx, {a.momentum, a.epsilon, a.is_test, a.data_format}, BatchNormAct::None);
  }
};
template <typename T, DataType XD = data_type_of<T>>
struct BatchNormGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<BatchNormOp>>();
    batch_norm_backward<T, XD>(ctx, a.is_test, a.data_format, BatchNormAct::None);
  }
};
template <typename T, DataType XD = data_type_of<T>>
struct FusedBatchNormK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<FusedBatchNormOp>();
    batch_norm_forward<T, XD>(ctx, {a.momentum, a.epsilon, a.is_test, a.data_format},
                              batch_norm_act(ctx.op()->name(), a.activation));
  }
};
template <typename T, DataType XD = data_type_of<T>>
struct FusedBatchNormGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<FusedBatchNormOp>>();
    batch_norm_backward<T, XD>(ctx, a.is_test, a.data_format, batch_norm_act(ctx.op()->name(), a.activation));
  }
};

// The bf16 / f16 batch norms (x, y, dy, dx 16-bit, the rest f32).
template <DataType XD>
void register_batch_norm_halves() {
  KernelRegistrar<BatchNormOp>(PlaceKind::Cuda, XD, &BatchNormK<float, XD>::run, "BatchNormOp/BatchNormK");
  KernelRegistrar<GradOf<BatchNormOp>>(PlaceKind::Cuda, XD, &BatchNormGradK<float, XD>::run,
                                       "GradOf<BatchNormOp>/BatchNormGradK");
  KernelRegistrar<FusedBatchNormOp>(PlaceKind::Cuda, XD, &FusedBatchNormK<float, XD>::run,
                                    "FusedBatchNormOp/FusedBatchNormK");
  KernelRegistrar<GradOf<FusedBatchNormOp>>(PlaceKind::Cuda, XD, &FusedBatchNormGradK<float, XD>::run,
                                            "GradOf<FusedBatchNormOp>/FusedBatchNormGradK");
}

[[maybe_unused]] const bool batch_norm_halves_registered = [] {
  register_batch_norm_halves<DataType::BFloat16>();
  register_batch_norm_halves<DataType::Float16>();
  return true;
}();

}  // namespace

KILN_REGISTER_KERNELS(SumOp, Cuda, SumK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(MeanOp, Cuda, MeanK, float, double);
KILN_REGISTER_KERNELS(MaxOp, Cuda, MaxK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(ProdOp, Cuda, ProdK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(ReduceAsOp, Cuda, ReduceAsK, float, double);
KILN_REGISTER_KERNEL(ReduceAsOp, Cuda, BFloat16, reduce_as_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(ReduceAsOp, Cuda, Float16, reduce_as_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNELS(GradOf<SumOp>, Cuda, SumGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MeanOp>, Cuda, MeanGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<MaxOp>, Cuda, MaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<ProdOp>, Cuda, ProdGradK, float, double);
KILN_REGISTER_KERNELS(SoftmaxOp, Cuda, SoftmaxK, float, double);
KILN_REGISTER_KERNELS(LogSoftmaxOp, Cuda, LogSoftmaxK, float, double);
KILN_REGISTER_KERNELS(GradOf<SoftmaxOp>, Cuda, SoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<LogSoftmaxOp>, Cuda, LogSoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(SoftmaxWithCrossEntropyOp, Cuda, SoftmaxCrossEntropyK, float, double);
KILN_REGISTER_KERNELS(GradOf<SoftmaxWithCrossEntropyOp>, Cuda, SoftmaxCrossEntropyGradK, float,
                      double);
KILN_REGISTER_KERNELS(LayerNormOp, Cuda, LayerNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<LayerNormOp>, Cuda, LayerNormGradK, float, double);
KILN_REGISTER_KERNELS(RmsNormOp, Cuda, RmsNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<RmsNormOp>, Cuda, RmsNormGradK, float, double);
KILN_REGISTER_KERNELS(BatchNormOp, Cuda, BatchNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<BatchNormOp>, Cuda, BatchNormGradK, float, double);
KILN_REGISTER_KERNELS(FusedBatchNormOp, Cuda, FusedBatchNormK, float, double);
KILN_REGISTER_KERNELS(GradOf<FusedBatchNormOp>, Cuda, FusedBatchNormGradK, float, double);

}  // namespace kiln::cuda
