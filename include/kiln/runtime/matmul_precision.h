// The precision f32 matrix products may use on CUDA devices
// (torch.set_float32_matmul_precision): Highest, the default, is full f32
// (as PyTorch's default); High lets cuBLAS round the operands to TF32
// (10-bit mantissa) on tensor cores and accumulate in f32, several times
// faster on Ampere and later GPUs. Process-wide, like PyTorch's; read by
// every f32 GEMM a CUDA kernel launches (kiln.matmul, attention, the
// linear layers' gradients). The CPU's GEMMs are f32 at either setting.
#pragma once

namespace kiln {

enum class MatmulPrecision { Highest, High };

// Thread-safe; takes effect for GEMMs launched after the call.
void set_float32_matmul_precision(MatmulPrecision precision) noexcept;
MatmulPrecision float32_matmul_precision() noexcept;

}  // namespace kiln
