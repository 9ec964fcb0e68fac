// kiln.matmul's product on CUDA (matmul.cc), for the kernels that add an
// epilogue to it (fused_matmul.cc).
#pragma once

#include "kiln/kernel/kernel_context.h"
#include "kiln/support/data_type.h"

namespace kiln::cuda {

// op(x) · op(y) (ctx's operands 0 and 1, both `dtype`: f32, f64, bf16,
// f16) into ctx's output 0, allocated here, as kiln.matmul computes it
// (kiln/kernel/matmul_shape.h's shapes and errors). The caller holds x and
// y: the output's variable may be one of theirs.
Tensor& matmul_product(KernelContext& ctx, const Tensor& x, const Tensor& y, DataType dtype, bool transpose_x,
                       bool transpose_y);

}  // namespace kiln::cuda
