// CudaStream, CudaEvent and check_cuda (kiln/runtime/cuda_stream.h) on the
// CUDA runtime API.
#include "kiln/runtime/cuda_stream.h"

#include <cuda_runtime_api.h>

#include <string>

namespace kiln {

void check_cuda(int status, const char* what) {
  if (status == cudaSuccess) return;
  const auto err = static_cast<cudaError_t>(status);
  const ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::Unavailable
                         : err == cudaErrorInvalidDevice || err == cudaErrorNoDevice
                             ? ErrorKind::InvalidArgument
                             : ErrorKind::Internal;
  throw_error(kind, what, ": CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
              ")");
}

void use_cuda_device(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return;
  check_cuda(cudaSetDevice(device), ("selecting cuda:" + std::to_string(device)).c_str());
}

CudaStream::CudaStream(int device) : device_(device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (device < 0 || device >= count)
    throw_error(ErrorKind::InvalidArgument, "CUDA stream: no device cuda:", device, " (", count,
                " CUDA device", count == 1 ? "" : "s", " present)");
  use_cuda_device(device);
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
}

CudaStream::~CudaStream() {
  if (!stream_) return;
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

void CudaStream::enqueue(Task task) {
  // acquire: pairs with the release store below, so a skipped task sees why.
  if (failed_.load(std::memory_order_acquire)) return;
  try {
    use_cuda_device(device_);
    task();
    // A launch error (a bad configuration) shows here, not at the next sync.
    check_cuda(cudaPeekAtLastError(), "launching on a CUDA stream");
  } catch (...) {
    cudaGetLastError();  // clear the sticky launch error for later launches
    std::lock_guard<std::mutex> guard(error_mutex_);
    if (!first_error_) first_error_ = std::current_exception();
    failed_.store(true, std::memory_order_release);
  }
}

void CudaStream::wait(const Event& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(&event);
  if (!e)
    throw_error(ErrorKind::InvalidArgument, "a CUDA stream cannot wait for an event of another kind");
  use_cuda_device(device_);
  check_cuda(cudaStreamWaitEvent(stream_, e->handle(), 0), "waiting for a CUDA event");
}

void CudaStream::synchronize() {
  use_cuda_device(device_);
  const cudaError_t status = cudaStreamSynchronize(stream_);
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> guard(error_mutex_);
    error = first_error_;
    first_error_ = nullptr;
    failed_.store(false, std::memory_order_release);
  }
  if (error) std::rethrow_exception(error);
  check_cuda(status, "synchronizing a CUDA stream");
}

bool CudaStream::query() const {
  const cudaError_t status = cudaStreamQuery(stream_);
  if (status == cudaErrorNotReady) return false;
  check_cuda(status, "querying a CUDA stream");
  return true;
}

std::unique_ptr<Event> CudaStream::create_event() const { return std::make_unique<CudaEvent>(device_); }

CudaEvent::CudaEvent(int device, bool timing) : device_(device) {
  use_cuda_device(device);
  check_cuda(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
             "creating a CUDA event");
}

double CudaEvent::elapsed_ms(const CudaEvent& start) const {
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start.event_, event_), "timing between CUDA events");
  return ms;
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

void CudaEvent::record(Stream& stream) {
  auto* s = dynamic_cast<CudaStream*>(&stream);
  if (!s)
    throw_error(ErrorKind::InvalidArgument, "a CUDA event records only on a CUDA stream, got ",
                stream.place().to_string());
  use_cuda_device(s->device());
  check_cuda(cudaEventRecord(event_, s->handle()), "recording a CUDA event");
}

bool CudaEvent::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  check_cuda(status, "querying a CUDA event");
  return true;
}

void CudaEvent::synchronize() const {
  check_cuda(cudaEventSynchronize(event_), "waiting for a CUDA event");
}

}  // namespace kiln
