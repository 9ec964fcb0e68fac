// The elementwise families' host functions (elementwise_kernels.h): one
// copy of the operand checks, output allocation and broadcast plan for
// every family member and dtype, each launching through an erased launcher.
#include "elementwise_kernels.h"

#include <optional>

namespace kiln::cuda {
namespace {

// Input i of ctx, which must be of dtype dt.
const Tensor& input_of(const KernelContext& ctx, std::uint32_t i, DataType dt) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != dt) throw_input_dtype(ctx, i, dt);
  return t;
}

}  // namespace

void run_binary(KernelContext& ctx, DataType in, DataType out_dtype, BinaryLaunch launch) {
  // Copies keep x's and y's buffers alive while the output is allocated.
  const Tensor x = input_of(ctx, 0, in), y = input_of(ctx, 1, in);
  const Dims od = broadcast_dims(ctx.op()->name(), x.dims(), y.dims());
  Tensor& out = ctx.alloc_output(0, od, out_dtype);
  const std::int64_t n = od.numel();
  if (n == 0) return;
  std::optional<BroadcastPlan> plan;
  if (x.dims() != y.dims()) plan = make_broadcast_plan(x.dims(), y.dims(), od);
  launch(x.raw_data(), y.raw_data(), out.raw_data(), n, plan ? &*plan : nullptr, stream_of(ctx));
  check_launch(ctx);
}

void run_unary(KernelContext& ctx, DataType dt, DataType out_dtype, UnaryLaunch launch) {
  const Tensor x = input_of(ctx, 0, dt);
  if (output_is_input(ctx, 0, 0)) {  // in place: the launcher sees one pointer twice
    void* p = ctx.output(0).raw_data();
    launch(p, p, x.numel(), stream_of(ctx));
  } else {
    Tensor& out = ctx.alloc_output(0, x.dims(), out_dtype);
    launch(x.raw_data(), out.raw_data(), x.numel(), stream_of(ctx));
  }
  check_launch(ctx);
}

void run_unary_grad(KernelContext& ctx, DataType dt, UnaryGradLaunch launch) {
  const Tensor a = input_of(ctx, 0, dt), d = input_of(ctx, 1, dt);
  if (a.dims() != d.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' inputs must have one shape, got [", a.dims().to_string(), "] and [",
                d.dims().to_string(), "]");
  Tensor& out = ctx.alloc_output(0, a.dims(), dt);
  launch(a.raw_data(), d.raw_data(), out.raw_data(), a.numel(), stream_of(ctx));
  check_launch(ctx);
}

void logical_not_kernel(KernelContext& ctx) {
  run_unary(ctx, DataType::Bool, DataType::Bool, [](const void* x, void* out, std::int64_t n, cudaStream_t s) {
    launch_logical_not(static_cast<const bool*>(x), static_cast<bool*>(out), n, s);
  });
}

}  // namespace kiln::cuda
