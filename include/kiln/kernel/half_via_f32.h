// bf16 and f16 kernels computed through the f32 kernel (XLA's float
// normalization, done per kernel): each 16-bit input widened to f32, the
// op's f32 kernel run on the widened inputs, each output its result type
// makes 16-bit rounded once to that dtype. The arithmetic is the f32
// kernel's, with f32 accumulation. kernels/cpu/half_via_f32.cc registers
// them for the CPU, kernels/cuda/half_via_f32.cc for CUDA (widening and
// rounding on the device); both run the ops listed here through
// run_half_via_f32.
#pragma once

#include <cstdint>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln {

template <typename... Ops>
struct OpTypeList {};

// The ops of a transformer's, an MLP's and a CNN's forward and backward
// whose 16-bit kernels go through their f32 ones on CUDA, on the CPU or
// both (the binary family, matmul, add_n, cast, full, the unary family and
// its gradients, and the dtype-agnostic data movement have their own on
// both; CpuOwnBf16Ops and CpuOwnHalfOps below list the CPU's own among
// these, kernels/cuda/half_via_f32.cc CUDA's).
using HalfViaF32Ops =
    OpTypeList<GeluOp, GradOf<GeluOp>, ScaleOp, LayerNormOp, GradOf<LayerNormOp>, RmsNormOp, GradOf<RmsNormOp>,
               ScaledDotProductAttentionOp, GradOf<ScaledDotProductAttentionOp>, AttentionMaskGradOp, SoftmaxOp,
               GradOf<SoftmaxOp>, LogSoftmaxOp, GradOf<LogSoftmaxOp>, SumOp, GradOf<SumOp>, MeanOp,
               GradOf<MeanOp>, MaxOp, GradOf<MaxOp>, ReduceAsOp, SplitAsOp, GradOf<SliceOp>, DropoutOp, GradOf<DropoutOp>,
               GradOf<MaximumOp>, GradOf<MinimumOp>, GradOf<EmbeddingOp>, GradOf<GatherOp>, Conv2dOp,
               GradOf<Conv2dOp>, Conv2dTransposeOp, GradOf<Conv2dTransposeOp>, FusedConv2dOp, MaxPool2dOp,
               GradOf<MaxPool2dOp>, AvgPool2dOp, GradOf<AvgPool2dOp>, AdaptiveAvgPool2dOp,
               GradOf<AdaptiveAvgPool2dOp>, ClipOp, GradOf<ClipOp>>;

// Of HalfViaF32Ops, those whose bf16 CPU kernel is their own: oneDNN's
// native bf16 convolutions (kernels/cpu/conv.cc), which run through the
// f32 kernel as above on a CPU without them.
using CpuOwnBf16Ops = OpTypeList<Conv2dOp, GradOf<Conv2dOp>, FusedConv2dOp>;

// Of HalfViaF32Ops, those whose bf16 and f16 CPU kernels are their own:
// the max pools (kernels/cpu/pool.cc), which widen a plane, a run of rows
// or an image at a time, gelu (kernels/cpu/unary.cc), a chunk at a time,
// and reduce_as (kernels/cpu/shape.cc), which reads x where it lies.
using CpuOwnHalfOps = OpTypeList<MaxPool2dOp, GradOf<MaxPool2dOp>, GeluOp, GradOf<GeluOp>, ReduceAsOp>;

// How one place's kernels move between 16-bit and f32 tensors.
struct HalfConversions {
  // `half` (bf16 or f16) as a new f32 tensor at ctx's place, from `allocator`.
  Tensor (*widen)(const KernelContext& ctx, const Tensor& half, Allocator& allocator);
  // Output o of ctx = `f` (f32) rounded to `dtype` (bf16 or f16).
  void (*round)(KernelContext& ctx, std::uint32_t o, const Tensor& f, DataType dtype);
  // Output o of ctx = `t`, an output whose result type is not 16-bit.
  void (*keep)(KernelContext& ctx, std::uint32_t o, const Tensor& t);
};

// Runs `f32` (the op's f32 kernel at ctx's place) on ctx's inputs, the bf16
// and f16 ones widened, with ctx's stream and step and with `allocator` for
// the widened inputs and the f32 kernel's outputs (they die on return);
// then each output through `conversions`. kiln::Error(Unimplemented) naming
// the op when f32 is null.
void run_half_via_f32(KernelContext& ctx, KernelFn f32, const HalfConversions& conversions,
                      Allocator& allocator);

}  // namespace kiln
