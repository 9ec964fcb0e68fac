// Host halves of the CUDA elementwise kernels whose ops carry attributes or
// a variable operand count — gelu (exact or tanh form) and its gradient,
// add_n — calling elementwise.cu's and elementwise_half.cu's launchers
// (launch.h); registered for PlaceKind::Cuda with the CPU's dtypes (and
// bf16 / f16) and shape checks.
#include <cstdint>
#include <vector>

#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/unary_math.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cuda {
namespace {

template <typename T>
struct GeluK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    if (ctx.attrs<GeluOp>().approximate)
      launch_unary_forward<GeluTanhMath>(x.data<T>(), out.data<T>(), x.numel(), stream_of(ctx));
    else
      launch_unary_forward<GeluErfMath>(x.data<T>(), out.data<T>(), x.numel(), stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename T>
struct GeluGradK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0), d = typed_input<T>(ctx, 1);
    if (x.dims() != d.dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' inputs must have one shape, got [", x.dims().to_string(), "] and [",
                  d.dims().to_string(), "]");
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    const cudaStream_t s = stream_of(ctx);
    if (ctx.attrs<GradOf<GeluOp>>().approximate)
      launch_unary_backward<GeluTanhMath>(x.data<T>(), d.data<T>(), out.data<T>(), x.numel(), s);
    else
      launch_unary_backward<GeluErfMath>(x.data<T>(), d.data<T>(), out.data<T>(), x.numel(), s);
    check_launch(ctx);
  }
};

// gelu and its gradient in bf16 / f16: per element in f32, rounded once
// (elementwise_half.cu).
template <DataType D>
void gelu_half_kernel(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  if (x.dtype() != D) throw_input_dtype(ctx, 0, D);
  Tensor& out = ctx.alloc_output(0, x.dims(), D);
  if (ctx.attrs<GeluOp>().approximate)
    launch_unary_forward_half<GeluTanhMath>(D, x.raw_data(), out.raw_data(), x.numel(), stream_of(ctx));
  else
    launch_unary_forward_half<GeluErfMath>(D, x.raw_data(), out.raw_data(), x.numel(), stream_of(ctx));
  check_launch(ctx);
}

template <DataType D>
void gelu_grad_half_kernel(KernelContext& ctx) {
  const Tensor x = ctx.input(0), d = ctx.input(1);
  if (x.dtype() != D) throw_input_dtype(ctx, 0, D);
  if (d.dtype() != D) throw_input_dtype(ctx, 1, D);
  if (x.dims() != d.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs must have one shape, got [",
                x.dims().to_string(), "] and [", d.dims().to_string(), "]");
  Tensor& out = ctx.alloc_output(0, x.dims(), D);
  const cudaStream_t s = stream_of(ctx);
  if (ctx.attrs<GradOf<GeluOp>>().approximate)
    launch_unary_backward_half<GeluTanhMath>(D, x.raw_data(), d.raw_data(), out.raw_data(), x.numel(), s);
  else
    launch_unary_backward_half<GeluErfMath>(D, x.raw_data(), d.raw_data(), out.raw_data(), x.numel(), s);
  check_launch(ctx);
}

template <typename T>
struct AddNK {
  static void run(KernelContext& ctx) {
    const std::uint32_t k = ctx.num_inputs();
    if (k == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has no inputs");
    // Copies keep every input alive while the output is (re)allocated.
    std::vector<Tensor> in;
    in.reserve(k);
    for (std::uint32_t i = 0; i < k; ++i) {
      in.push_back(typed_input<T>(ctx, i));
      if (in[i].dims() != in[0].dims())
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                    "' inputs must have one shape, got [", in[0].dims().to_string(),
                    "] (input #0) and [", in[i].dims().to_string(), "] (input #", i, ")");
    }
    Tensor& out = ctx.alloc_output(0, in[0].dims(), in[0].dtype());
    std::vector<const T*> ptrs;
    ptrs.reserve(k);
    for (const Tensor& t : in) ptrs.push_back(t.data<T>());
    launch_add_n(ptrs.data(), static_cast<int>(k), out.data<T>(), out.numel(), stream_of(ctx));
    check_launch(ctx);
  }
};

// add_n of bf16 / f16 (mixed precision's gradient sums): each input
// widened to f32 on the device, summed in f32 in input order, rounded once
// (the CPU's kernel computes the same).
template <DataType D>
void add_n_half_kernel(KernelContext& ctx) {
  const std::uint32_t k = ctx.num_inputs();
  if (k == 0) throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has no inputs");
  std::vector<Tensor> in;  // copies keep every input alive while the output is allocated
  for (std::uint32_t i = 0; i < k; ++i) {
    in.push_back(ctx.input(i));
    if (in[i].dtype() != D) throw_input_dtype(ctx, i, D);
    if (in[i].dims() != in[0].dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs must have one shape, got [",
                  in[0].dims().to_string(), "] (input #0) and [", in[i].dims().to_string(), "] (input #", i, ")");
  }
  Tensor& out = ctx.alloc_output(0, in[0].dims(), D);
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const cudaStream_t s = stream_of(ctx);
  const BufferRef wide = scratch_buffer(ctx, (k + 1) * std::size_t(n) * sizeof(float));
  float* w = static_cast<float*>(wide->data());
  std::vector<const float*> ptrs;
  for (std::uint32_t i = 0; i < k; ++i) {
    launch_cast(D, DataType::Float32, in[i].raw_data(), w + i * n, n, s);
    ptrs.push_back(w + i * n);
  }
  float* sum = w + k * n;
  launch_add_n(ptrs.data(), static_cast<int>(k), sum, n, s);
  launch_cast(DataType::Float32, D, sum, out.raw_data(), n, s);
  check_launch(ctx);
}

}  // namespace

KILN_REGISTER_KERNEL(AddNOp, Cuda, BFloat16, add_n_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(AddNOp, Cuda, Float16, add_n_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNELS(GeluOp, Cuda, GeluK, float, double);
KILN_REGISTER_KERNELS(GradOf<GeluOp>, Cuda, GeluGradK, float, double);
KILN_REGISTER_KERNEL(GeluOp, Cuda, BFloat16, gelu_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(GeluOp, Cuda, Float16, gelu_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNEL(GradOf<GeluOp>, Cuda, BFloat16, gelu_grad_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(GradOf<GeluOp>, Cuda, Float16, gelu_grad_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNELS(AddNOp, Cuda, AddNK, float, double, std::int32_t, std::int64_t);

}  // namespace kiln::cuda
