// Shared pieces of kiln's CUDA kernels (private to kernels/cuda; nvcc-safe:
// no IR headers beyond KernelContext): the stream a kernel launches on and
// the launch geometry of grid-stride loops.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kiln/kernel/kernel_context.h"
#include "kiln/runtime/cuda_stream.h"

namespace kiln::cuda {

// The CUDA stream of the instruction; kiln::Error naming the op when the
// executor gave it none (a CUDA kernel run off a CUDA place).
inline cudaStream_t stream_of(const KernelContext& ctx) {
  auto* s = dynamic_cast<CudaStream*>(ctx.stream());
  if (!s)
    throw_error(ErrorKind::PreconditionNotMet, "op '", ctx.op()->name(),
                "' runs a CUDA kernel but was given no CUDA stream");
  return s->handle();
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (capped: each thread then
// takes several).
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(b, 1, 65535LL * 16));
}

#define KILN_GRID_STRIDE(i, n)                                                          \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (n); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// kiln::Error naming the op when the launch failed (a bad configuration).
inline void check_launch(const KernelContext& ctx) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw_error(ErrorKind::Internal, "op '", ctx.op()->name(), "': CUDA launch failed: ",
                cudaGetErrorString(e));
}

}  // namespace kiln::cuda
