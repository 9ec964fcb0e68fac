// CudaContext: what a CUDA device place (`cuda:N`) needs to run kernels —
// its compute stream, a host-to-device and a device-to-host copy stream,
// the cuBLAS handle (bound to whichever stream a kernel launches on), and
// its stream-safe caching allocator. One per device, made on first use and
// never destroyed (buffers may be freed during static destruction).
#pragma once

#include <cstddef>
#include <memory>

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

// A new stream on cuda:`device` (a CudaStream, for streams an executor
// creates beside the context's own). Errors as cuda_context's.
std::unique_ptr<Stream> new_cuda_stream(int device);

// cuda:`device`'s allocator for work on `stream`, a CudaStream of that
// device (CudaAllocator::for_stream): the allocator of a copy or named
// stream's instructions. Errors as cuda_context's.
Allocator& cuda_stream_allocator(int device, Stream& stream);

// Before an executor destroys a stream it made with new_cuda_stream: waits
// for the stream's work, then frees the blocks cuda:`device`'s allocator
// keeps cached for it, and its live ones as they are released
// (CudaAllocator::retire_stream). Errors as cuda_stream_allocator's.
void retire_cuda_stream(int device, Stream& stream);

// A CUDA event that keeps a device timestamp, for profiling; and the
// milliseconds from `start` to `end` (two such events that completed).
// Errors as cuda_context's.
std::unique_ptr<Event> new_cuda_timing_event(int device);
double cuda_elapsed_ms(const Event& start, const Event& end);

// Page-locked host memory (pinned_host_allocator()) for device-to-host
// copies; cpu_allocator() in a build without CUDA.
Allocator& pinned_allocator();

// Copies `bytes` from `src` on `src_place` to `dst` on `dst_place`. Between
// host places (cpu, host_stream) a memcpy, done when it returns. With a
// cuda place on either side, an asynchronous copy ordered on `stream` when
// it is a CudaStream (the executor's copy and compute streams), or on the
// device's compute stream and waited for when `stream` is null. kiln::Error
// naming both places for any other pair, or for a cuda place in a build
// without CUDA (Unimplemented).
void copy_between_places(void* dst, Place dst_place, const void* src, Place src_place,
                         std::size_t bytes, Stream* stream = nullptr);

// t's values in a new tensor on `place` (the CPU or a CUDA device), copied
// on the device's compute stream and waited for. kiln::Error naming the
// places when one is neither.
Tensor copy_to_place(const Tensor& t, Place place);

}  // namespace kiln
