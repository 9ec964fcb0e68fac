// The host halves of the elementwise families' CUDA kernels (host code,
// private to kernels/cuda; register.cc registers them). A family member's
// kernel is a one-line KernelFn that hands the family's host function
// (elementwise_kernels.cc, compiled once) its dtypes and a launcher of
// elementwise.cu or elementwise_half.cu (launch.h) with the element type
// erased: the host function reads the operands from the context, checks
// them with the CPU kernels' messages, allocates the output and launches.
#pragma once

#include <cstdint>

#include "context_stream.h"
#include "kiln/kernel/broadcast.h"
#include "kiln/kernel/kernel_context.h"
#include "launch.h"

namespace kiln::cuda {

// Launchers over untyped device pointers; plan null when x and y have one shape.
using BinaryLaunch = void (*)(const void* x, const void* y, void* out, std::int64_t n,
                              const BroadcastPlan* plan, cudaStream_t s);
using UnaryLaunch = void (*)(const void* x, void* out, std::int64_t n, cudaStream_t s);
using UnaryGradLaunch = void (*)(const void* a, const void* d, void* out, std::int64_t n,
                                 cudaStream_t s);

// out (of dtype `out_dtype`) = launch(x, y) broadcast; x and y of dtype `in`.
void run_binary(KernelContext& ctx, DataType in, DataType out_dtype, BinaryLaunch launch);
// out = launch(x) elementwise, x of dtype `dt`, out of `out_dtype`; in
// place (relu_, sqrt_) when the op's output is its input's variable.
void run_unary(KernelContext& ctx, DataType dt, DataType out_dtype, UnaryLaunch launch);
// dx = launch(x or y, dout), both of dtype dt and of one shape.
void run_unary_grad(KernelContext& ctx, DataType dt, UnaryGradLaunch launch);

// BinaryOp<Math>: Math::forward broadcast, for element type T.
template <typename Math, typename T>
void binary_kernel(KernelContext& ctx) {
  run_binary(ctx, data_type_of<T>, data_type_of<T>,
             [](const void* x, const void* y, void* out, std::int64_t n, const BroadcastPlan* p,
                cudaStream_t s) {
               launch_binary<Math>(static_cast<const T*>(x), static_cast<const T*>(y),
                                   static_cast<T*>(out), n, p, s);
             });
}

// CompareOp<Math> / LogicalOp<Math>: Math::forward broadcast, bool result.
template <typename Math, typename T>
void compare_kernel(KernelContext& ctx) {
  run_binary(ctx, data_type_of<T>, DataType::Bool,
             [](const void* x, const void* y, void* out, std::int64_t n, const BroadcastPlan* p,
                cudaStream_t s) {
               launch_binary<Math>(static_cast<const T*>(x), static_cast<const T*>(y),
                                   static_cast<bool*>(out), n, p, s);
             });
}

// The same for bf16 / f16 (D), computed per element in f32 and rounded
// once: the floating binaries.
template <typename Math, DataType D>
void binary_half_kernel(KernelContext& ctx) {
  run_binary(ctx, D, D,
             [](const void* x, const void* y, void* out, std::int64_t n, const BroadcastPlan* p,
                cudaStream_t s) { launch_binary_half<Math>(D, x, y, out, n, p, s); });
}

// PredicateOp<Math>: Math::forward elementwise, bool result.
template <typename Math, typename T>
void predicate_kernel(KernelContext& ctx) {
  run_unary(ctx, data_type_of<T>, DataType::Bool, [](const void* x, void* out, std::int64_t n, cudaStream_t s) {
    launch_predicate<Math>(static_cast<const T*>(x), static_cast<bool*>(out), n, s);
  });
}

// LogicalNotOp.
void logical_not_kernel(KernelContext& ctx);

// UnaryOp<Math> (and InplaceUnaryOp<Math>, in place): Math::forward.
template <typename Math, typename T>
void unary_kernel(KernelContext& ctx) {
  run_unary(ctx, data_type_of<T>, data_type_of<T>, [](const void* x, void* out, std::int64_t n, cudaStream_t s) {
    if (x == out)
      launch_unary_in_place<Math>(static_cast<T*>(out), n, s);
    else
      launch_unary_forward<Math>(static_cast<const T*>(x), static_cast<T*>(out), n, s);
  });
}

// GradOf<UnaryOp<Math>>: dx = Math::backward(x or y, dout).
template <typename Math, typename T>
void unary_grad_kernel(KernelContext& ctx) {
  run_unary_grad(ctx, data_type_of<T>, [](const void* a, const void* d, void* out, std::int64_t n, cudaStream_t s) {
    launch_unary_backward<Math>(static_cast<const T*>(a), static_cast<const T*>(d), static_cast<T*>(out), n, s);
  });
}

// The unary family and its gradients in bf16 / f16 (in place too: the
// launcher's output may be its input).
template <typename Math, DataType D>
void unary_half_kernel(KernelContext& ctx) {
  run_unary(ctx, D, D, [](const void* x, void* out, std::int64_t n, cudaStream_t s) {
    launch_unary_forward_half<Math>(D, x, out, n, s);
  });
}

template <typename Math, DataType D>
void unary_half_grad_kernel(KernelContext& ctx) {
  run_unary_grad(ctx, D, [](const void* a, const void* d, void* out, std::int64_t n, cudaStream_t s) {
    launch_unary_backward_half<Math>(D, a, d, out, n, s);
  });
}

}  // namespace kiln::cuda
