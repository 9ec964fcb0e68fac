// CudaContext: what a CUDA device place (`cuda:N`) needs to run kernels —
// its compute stream, a host-to-device and a device-to-host copy stream,
// the cuBLAS handle (bound to whichever stream a kernel launches on), and
// its stream-safe caching allocator. One per device, made on first use and
// never destroyed (buffers may be freed during static destruction).
#pragma once

#include <cstddef>

#include "kiln/runtime/cuda_allocator.h"
#include "kiln/runtime/cuda_stream.h"
#include "kiln/runtime/tensor.h"

namespace kiln {

// The number of CUDA devices this process can use: 0 without a driver, a
// device, or when kiln was built without CUDA. Never throws.
int cuda_device_count() noexcept;
// Whether kiln was built with CUDA (meson option `cuda`).
bool built_with_cuda() noexcept;

class CudaContext {
 public:
  int device() const noexcept { return device_; }
  CudaStream& compute_stream() noexcept { return *compute_; }
  CudaStream& h2d_stream() noexcept { return *h2d_; }
  CudaStream& d2h_stream() noexcept { return *d2h_; }
  CudaAllocator& allocator() noexcept { return *allocator_; }
  // The cuBLAS handle (cublasHandle_t) set to `stream`, for the calling
  // thread's exclusive use until it returns: one handle per thread.
  void* cublas(const CudaStream& stream);

 private:
  friend CudaContext& cuda_context(int device);
  explicit CudaContext(int device);

  int device_;
  CudaStream* compute_;
  CudaStream* h2d_;
  CudaStream* d2h_;
  CudaAllocator* allocator_;
};

// The context of device `device`; kiln::Error (InvalidArgument) naming it
// when there is no such device, (Unimplemented) when kiln was built without
// CUDA.
CudaContext& cuda_context(int device = 0);

// Copies between host and device memory on `stream`, asynchronous to the
// host (pinned host memory makes them truly so); bytes may be 0.
void copy_host_to_device(void* device_dst, const void* host_src, std::size_t bytes,
                         CudaStream& stream);
void copy_device_to_host(void* host_dst, const void* device_src, std::size_t bytes,
                         CudaStream& stream);
void copy_device_to_device(void* dst, const void* src, std::size_t bytes, CudaStream& stream);

// t's values in a new tensor on `place` (the CPU or a CUDA device), copied
// on the device's compute stream and waited for. kiln::Error naming the
// places when one is neither.
Tensor copy_to_place(const Tensor& t, Place place);

}  // namespace kiln
