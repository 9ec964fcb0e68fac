// CPU kernels of softmax_grad, log_softmax_grad (along any axis: the input
// seen as [outer, C, inner]) and softmax_with_cross_entropy_grad (classes on
// the last axis; int64 or int32 labels, ignore_index rows get 0). f32, f64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernel_util.h"
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::cpu {
namespace {

// A per-thread buffer, grown once then reused (no allocation per run).
template <typename T>
T* scratch(std::int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<std::int64_t>(buf.size()) < n) buf.resize(static_cast<std::size_t>(n));
  return buf.data();
}

template <typename OpT, typename T, bool Log>
void softmax_grad_kernel(KernelContext& ctx) {
  const std::string_view op = ctx.op()->name();
  const Tensor y = typed_input<T>(ctx, 0), dy = typed_input<T>(ctx, 1);
  const Dims& d = y.dims();
  if (dy.dims() != d)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' out [", d.to_string(), "] and dout [",
                dy.dims().to_string(), "] must have one shape");
  const std::int64_t rank = d.rank();
  std::int64_t axis = ctx.attrs<OpT>().axis;
  if (rank == 0 || axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", axis,
                " is out of range for an input of dims [", d.to_string(), "]");
  if (axis < 0) axis += rank;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < axis; ++i) outer *= d[static_cast<int>(i)];
  for (std::int64_t i = axis + 1; i < rank; ++i) inner *= d[static_cast<int>(i)];
  const std::int64_t c = d[static_cast<int>(axis)];
  Tensor& dx = ctx.alloc_output(0, d, y.dtype());
  if (d.numel() == 0) return;
  const T* py = y.data<T>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  T* acc = scratch<T>(inner);
  for (std::int64_t r = 0; r < outer; ++r) {
    const std::int64_t base = r * c * inner;
    std::fill(acc, acc + inner, T(0));
    for (std::int64_t j = 0; j < c; ++j)
      for (std::int64_t k = 0; k < inner; ++k) {
        const std::int64_t i = base + j * inner + k;
        if constexpr (Log) acc[k] += pdy[i];             // Σ dout
        else acc[k] += pdy[i] * py[i];                   // Σ dout · out
      }
    for (std::int64_t j = 0; j < c; ++j)
      for (std::int64_t k = 0; k < inner; ++k) {
        const std::int64_t i = base + j * inner + k;
        if constexpr (Log) pdx[i] = pdy[i] - std::exp(py[i]) * acc[k];
        else pdx[i] = py[i] * (pdy[i] - acc[k]);
      }
  }
}

template <typename T>
struct SoftmaxGradK {
  static void run(KernelContext& ctx) { softmax_grad_kernel<GradOf<SoftmaxOp>, T, false>(ctx); }
};
template <typename T>
struct LogSoftmaxGradK {
  static void run(KernelContext& ctx) { softmax_grad_kernel<GradOf<LogSoftmaxOp>, T, true>(ctx); }
};

template <typename T, typename L>
void cross_entropy_grad_rows(KernelContext& ctx, const T* sm, const L* label, const T* dloss,
                             T* dx, std::int64_t n, std::int64_t c, std::int64_t ignore) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    if (l != ignore && (l < 0 || l >= c))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' row ", i,
                  " has label ", l, ", outside [0, ", c, ") (ignore_index = ", ignore, ")");
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    T* __restrict row = dx + i * c;
    if (l == ignore) {
      std::memset(row, 0, static_cast<std::size_t>(c) * sizeof(T));
      continue;
    }
    const T g = dloss[i];
    const T* __restrict s = sm + i * c;
    for (std::int64_t j = 0; j < c; ++j) row[j] = g * s[j];
    row[l] -= g;
  }
}

template <typename T>
struct SoftmaxCrossEntropyGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor sm = typed_input<T>(ctx, 0), label = ctx.input(1), dloss = typed_input<T>(ctx, 2);
    const Dims& sd = sm.dims();
    if (sd.rank() < 2)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' softmax must have rank >= 2, got [",
                  sd.to_string(), "]");
    const std::int64_t c = sd[sd.rank() - 1];
    std::int64_t lead[Dims::kMaxRank];
    for (int i = 0; i + 1 < sd.rank(); ++i) lead[i] = sd[i];
    lead[sd.rank() - 1] = 1;
    const Dims loss_dims(std::span<const std::int64_t>(lead, sd.rank()));
    const Dims label_dims(std::span<const std::int64_t>(lead, sd.rank() - 1));
    if (label.dims() != loss_dims && label.dims() != label_dims)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' label dims [",
                  label.dims().to_string(), "] do not fit softmax [", sd.to_string(),
                  "] (expected [", label_dims.to_string(), "] or [", loss_dims.to_string(), "])");
    if (dloss.dims() != loss_dims)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dloss dims [",
                  dloss.dims().to_string(), "] must be the loss's [", loss_dims.to_string(), "]");
    if (label.dtype() != DataType::Int64 && label.dtype() != DataType::Int32)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' label must be i64 or i32, got ",
                  to_string(label.dtype()));
    const std::int64_t ignore = ctx.attrs<GradOf<SoftmaxWithCrossEntropyOp>>().ignore_index;
    Tensor& dx = ctx.alloc_output(0, sd, sm.dtype());
    const std::int64_t n = loss_dims.numel();
    if (n == 0 || c == 0) return;
    if (label.dtype() == DataType::Int64)
      cross_entropy_grad_rows(ctx, sm.data<T>(), label.data<std::int64_t>(), dloss.data<T>(),
                              dx.data<T>(), n, c, ignore);
    else
      cross_entropy_grad_rows(ctx, sm.data<T>(), label.data<std::int32_t>(), dloss.data<T>(),
                              dx.data<T>(), n, c, ignore);
  }
};

}  // namespace

KILN_REGISTER_KERNELS(GradOf<SoftmaxOp>, Cpu, SoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<LogSoftmaxOp>, Cpu, LogSoftmaxGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<SoftmaxWithCrossEntropyOp>, Cpu, SoftmaxCrossEntropyGradK, float, double);

}  // namespace kiln::cpu
