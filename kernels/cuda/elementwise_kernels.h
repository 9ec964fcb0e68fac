// The host halves of the elementwise families' CUDA kernels (host code,
// private to kernels/cuda; register.cc registers them): each reads its
// operands from the context, checks them with the CPU kernels' messages,
// allocates the output and calls a launcher of elementwise.cu or
// elementwise_half.cu (launch.h), which see only device pointers. Every
// function is KernelFn-shaped.
#pragma once

#include <cstdint>
#include <optional>

#include "context_stream.h"
#include "kiln/kernel/broadcast.h"
#include "kiln/kernel/kernel_context.h"
#include "launch.h"

namespace kiln::cuda {

namespace elementwise_detail {

// x and y broadcast to one output of dtype dt; `launch(x, y, out, n,
// plan)` with plan null when x and y have one shape.
template <typename Launch>
void broadcast_binary(KernelContext& ctx, const Tensor& x_in, const Tensor& y_in, DataType dt,
                      Launch launch) {
  // Copies keep x's and y's buffers alive while the output is allocated.
  const Tensor x = x_in, y = y_in;
  const Dims od = broadcast_dims(ctx.op()->name(), x.dims(), y.dims());
  Tensor& out = ctx.alloc_output(0, od, dt);
  const std::int64_t n = od.numel();
  if (n == 0) return;
  std::optional<BroadcastPlan> plan;
  if (x.dims() != y.dims()) plan = make_broadcast_plan(x.dims(), y.dims(), od);
  launch(x, y, out, n, plan ? &*plan : nullptr);
  check_launch(ctx);
}

// A unary gradient's operands (x or y, and dout) must have one shape.
inline void check_same_dims(const KernelContext& ctx, const Tensor& a, const Tensor& d) {
  if (a.dims() != d.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' inputs must have one shape, got [", a.dims().to_string(), "] and [",
                d.dims().to_string(), "]");
}

// Input i of ctx, which must be of dtype D (bf16 / f16).
template <DataType D>
Tensor half_input(const KernelContext& ctx, std::uint32_t i) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != D) throw_input_dtype(ctx, i, D);
  return t;
}

}  // namespace elementwise_detail

// BinaryOp<Math>: Math::forward broadcast, for element type T.
template <typename Math, typename T>
void binary_kernel(KernelContext& ctx) {
  elementwise_detail::broadcast_binary(
      ctx, typed_input<T>(ctx, 0), typed_input<T>(ctx, 1), data_type_of<T>,
      [&](const Tensor& x, const Tensor& y, Tensor& out, std::int64_t n, const BroadcastPlan* p) {
        launch_binary<Math>(x.data<T>(), y.data<T>(), out.data<T>(), n, p, stream_of(ctx));
      });
}

// CompareOp<Math> / LogicalOp<Math>: Math::forward broadcast, bool result.
template <typename Math, typename T>
void compare_kernel(KernelContext& ctx) {
  elementwise_detail::broadcast_binary(
      ctx, typed_input<T>(ctx, 0), typed_input<T>(ctx, 1), DataType::Bool,
      [&](const Tensor& x, const Tensor& y, Tensor& out, std::int64_t n, const BroadcastPlan* p) {
        launch_binary<Math>(x.data<T>(), y.data<T>(), out.data<bool>(), n, p, stream_of(ctx));
      });
}

// The same for bf16 / f16 (D), computed per element in f32 and rounded
// once: the floating binaries.
template <typename Math, DataType D>
void binary_half_kernel(KernelContext& ctx) {
  using elementwise_detail::half_input;
  elementwise_detail::broadcast_binary(
      ctx, half_input<D>(ctx, 0), half_input<D>(ctx, 1), D,
      [&](const Tensor& x, const Tensor& y, Tensor& out, std::int64_t n, const BroadcastPlan* p) {
        launch_binary_half<Math>(D, x.raw_data(), y.raw_data(), out.raw_data(), n, p, stream_of(ctx));
      });
}

// PredicateOp<Math>: Math::forward elementwise, bool result.
template <typename Math, typename T>
void predicate_kernel(KernelContext& ctx) {
  const Tensor x = typed_input<T>(ctx, 0);
  Tensor& out = ctx.alloc_output(0, x.dims(), DataType::Bool);
  launch_predicate<Math>(x.data<T>(), out.data<bool>(), x.numel(), stream_of(ctx));
  check_launch(ctx);
}

// LogicalNotOp.
inline void logical_not_kernel(KernelContext& ctx) {
  const Tensor x = typed_input<bool>(ctx, 0);
  Tensor& out = ctx.alloc_output(0, x.dims(), DataType::Bool);
  launch_logical_not(x.data<bool>(), out.data<bool>(), x.numel(), stream_of(ctx));
  check_launch(ctx);
}

// UnaryOp<Math> (and InplaceUnaryOp<Math>, in place): Math::forward.
template <typename Math, typename T>
void unary_kernel(KernelContext& ctx) {
  const Tensor x = typed_input<T>(ctx, 0);
  const cudaStream_t s = stream_of(ctx);
  if (output_is_input(ctx, 0, 0)) {  // in place (relu_, sqrt_)
    launch_unary_in_place<Math>(ctx.output(0).data<T>(), x.numel(), s);
  } else {
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    launch_unary_forward<Math>(x.data<T>(), out.data<T>(), x.numel(), s);
  }
  check_launch(ctx);
}

// GradOf<UnaryOp<Math>>: dx = Math::backward(x or y, dout).
template <typename Math, typename T>
void unary_grad_kernel(KernelContext& ctx) {
  const Tensor a = typed_input<T>(ctx, 0), d = typed_input<T>(ctx, 1);
  elementwise_detail::check_same_dims(ctx, a, d);
  Tensor& out = ctx.alloc_output(0, a.dims(), a.dtype());
  launch_unary_backward<Math>(a.data<T>(), d.data<T>(), out.data<T>(), a.numel(), stream_of(ctx));
  check_launch(ctx);
}

// The unary family and its gradients in bf16 / f16 (in place too: the
// launcher's output may be its input).
template <typename Math, DataType D>
void unary_half_kernel(KernelContext& ctx) {
  const Tensor x = elementwise_detail::half_input<D>(ctx, 0);
  Tensor& out = output_is_input(ctx, 0, 0) ? ctx.output(0) : ctx.alloc_output(0, x.dims(), D);
  launch_unary_forward_half<Math>(D, x.raw_data(), out.raw_data(), x.numel(), stream_of(ctx));
  check_launch(ctx);
}

template <typename Math, DataType D>
void unary_half_grad_kernel(KernelContext& ctx) {
  using elementwise_detail::half_input;
  const Tensor a = half_input<D>(ctx, 0), d = half_input<D>(ctx, 1);
  elementwise_detail::check_same_dims(ctx, a, d);
  Tensor& out = ctx.alloc_output(0, a.dims(), D);
  launch_unary_backward_half<Math>(D, a.raw_data(), d.raw_data(), out.raw_data(), a.numel(),
                                   stream_of(ctx));
  check_launch(ctx);
}

}  // namespace kiln::cuda
