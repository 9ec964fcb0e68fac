// How CUDA convolutions (cuDNN) choose their algorithms, and the precision
// f32 ones may run in: process-wide, as PyTorch's torch.backends.cudnn
// flags; read when a convolution of a new shape first runs, so set them
// before the first run of a program. The CPU's convolutions ignore both.
#pragma once

#include "kiln/runtime/matmul_precision.h"

namespace kiln {

// Heuristic, the default: cuDNN's heuristics rank the algorithms for each
// shape, and the first deterministic one is taken (the same bits on every
// run). Benchmark (PyTorch's cudnn.benchmark = True): the first run of each
// shape times every algorithm (cudnnFind, which allocates scratch memory of
// its own) and takes the fastest, deterministic or not: faster steps for a
// real CNN, a slower first step, and last bits that may differ between
// processes. A shape first met while a CUDA graph is being captured gets
// the heuristic choice (timing cannot run inside a capture); one whose
// timing fails (cudnnFind out of memory) keeps the heuristic choice.
enum class ConvAlgorithmSearch { Heuristic, Benchmark };

// Thread-safe; takes effect for shapes chosen after the call.
void set_conv_algorithm_search(ConvAlgorithmSearch search) noexcept;
ConvAlgorithmSearch conv_algorithm_search() noexcept;

// Highest, the default: f32 convolutions sum in f32 on CUDA cores (cuDNN's
// FMA math). High lets cuDNN round their operands to TF32 on tensor cores,
// as torch.backends.cudnn.allow_tf32 does — on by default in PyTorch, so a
// comparison with PyTorch's defaults sets High. f64, bf16 and f16
// convolutions are unaffected.
void set_float32_conv_precision(MatmulPrecision precision) noexcept;
MatmulPrecision float32_conv_precision() noexcept;

}  // namespace kiln
