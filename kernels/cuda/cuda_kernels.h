// The CUDA kernels compiled by nvcc (elementwise.cu), declared for the
// registration file (register.cc, compiled by the host compiler: the
// registry's headers use Boost.Hana, which nvcc cannot compile). Each is
// KernelFn-shaped: reads the context, allocates outputs, launches on the
// instruction's stream.
#pragma once

#include "kiln/kernel/kernel_context.h"

namespace kiln::cuda {

// BinaryOp<Math>: Math::forward broadcast, for element type T.
template <typename Math, typename T>
void binary_kernel(KernelContext& ctx);
// UnaryOp<Math> (and InplaceUnaryOp<Math>, in place): Math::forward.
template <typename Math, typename T>
void unary_kernel(KernelContext& ctx);
// GradOf<UnaryOp<Math>>: dx = Math::backward(x or y, dout).
template <typename Math, typename T>
void unary_grad_kernel(KernelContext& ctx);

// The same for bf16 / f16 (D), computed per element in f32 and rounded
// once (elementwise_half.cu): the floating binaries, the unary family (in
// place too) and its gradients.
template <typename Math, DataType D>
void binary_half_kernel(KernelContext& ctx);
template <typename Math, DataType D>
void unary_half_kernel(KernelContext& ctx);
template <typename Math, DataType D>
void unary_half_grad_kernel(KernelContext& ctx);

// CompareOp<Math> / LogicalOp<Math>: Math::forward broadcast, bool result.
template <typename Math, typename T>
void compare_kernel(KernelContext& ctx);
// PredicateOp<Math>: Math::forward elementwise, bool result.
template <typename Math, typename T>
void predicate_kernel(KernelContext& ctx);
// LogicalNotOp.
void logical_not_kernel(KernelContext& ctx);

}  // namespace kiln::cuda
