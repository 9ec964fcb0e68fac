// The CUDA stream a kernel's host half launches on, and the check after a
// launch (private to kernels/cuda; host code: the .cu files take the
// stream as a cudaStream_t and never read a KernelContext).
#pragma once

#include <cuda_runtime_api.h>

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

// kiln::Error naming the op when the launch failed (a bad configuration).
inline void check_launch(const KernelContext& ctx) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw_error(ErrorKind::Internal, "op '", ctx.op()->name(), "': CUDA launch failed: ",
                cudaGetErrorString(e));
}

}  // namespace kiln::cuda
