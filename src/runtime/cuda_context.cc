// CudaContext, the device count and the copies (kiln/runtime/cuda_context.h)
// on the CUDA runtime API and cuBLAS.
#include "kiln/runtime/cuda_context.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln {

namespace {

constexpr int kMaxDevices = 64;

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw_error(ErrorKind::Internal, what, ": cuBLAS error ", cublasGetStatusName(status), " (",
              cublasGetStatusString(status), ")");
}

}  // namespace

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error here
    return 0;
  }
  return count;
}

bool built_with_cuda() noexcept { return true; }

CudaContext::CudaContext(int device)
    : device_(device),
      compute_(new CudaStream(device)),
      h2d_(new CudaStream(device)),
      d2h_(new CudaStream(device)),
      allocator_(new CudaAllocator(device, *compute_)) {}

void* CudaContext::cublas(const CudaStream& stream) {
  // One handle per (thread, device): cuBLAS handles are not to be shared by
  // threads calling at once. Never destroyed (threads of a pool live on).
  thread_local std::array<cublasHandle_t, kMaxDevices> handles{};
  cublasHandle_t& h = handles[static_cast<std::size_t>(device_)];
  if (!h) {
    use_cuda_device(device_);
    check_cublas(cublasCreate(&h), "creating a cuBLAS handle");
  }
  check_cublas(cublasSetStream(h, stream.handle()), "binding cuBLAS to a stream");
  return h;
}

CudaContext& cuda_context(int device) {
  static std::mutex mutex;
  static std::array<CudaContext*, kMaxDevices> contexts{};  // never destroyed
  const int count = cuda_device_count();
  if (device < 0 || device >= count || device >= kMaxDevices)
    throw_error(ErrorKind::InvalidArgument, "no CUDA device cuda:", device, " (", count,
                " CUDA device", count == 1 ? "" : "s", " present)");
  std::lock_guard<std::mutex> guard(mutex);
  CudaContext*& c = contexts[static_cast<std::size_t>(device)];
  if (!c) c = new CudaContext(device);
  return *c;
}

std::unique_ptr<Stream> new_cuda_stream(int device) {
  cuda_context(device);  // the device check
  return std::make_unique<CudaStream>(device);
}

Allocator& cuda_stream_allocator(int device, Stream& stream) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  if (!cuda || cuda->device() != device)
    throw_error(ErrorKind::InvalidArgument, "cuda_stream_allocator: the stream is not a stream of cuda:", device);
  return cuda_context(device).allocator().for_stream(*cuda);
}

void retire_cuda_stream(int device, Stream& stream) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  if (!cuda || cuda->device() != device)
    throw_error(ErrorKind::InvalidArgument, "retire_cuda_stream: the stream is not a stream of cuda:", device);
  cuda->synchronize();
  cuda_context(device).allocator().retire_stream(*cuda);
}

Allocator& pinned_allocator() { return pinned_host_allocator(); }

std::unique_ptr<Event> new_cuda_timing_event(int device) {
  cuda_context(device);  // the device check
  return std::make_unique<CudaEvent>(device, /*timing=*/true);
}

double cuda_elapsed_ms(const Event& start, const Event& end) {
  const auto* s = dynamic_cast<const CudaEvent*>(&start);
  const auto* e = dynamic_cast<const CudaEvent*>(&end);
  if (!s || !e) throw_error(ErrorKind::InvalidArgument, "timing between events that are not CUDA events");
  return e->elapsed_ms(*s);
}

void copy_host_to_device(void* dst, const void* src, std::size_t bytes, CudaStream& stream) {
  if (!bytes) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream.handle()),
             "copying host to device");
}

void copy_device_to_host(void* dst, const void* src, std::size_t bytes, CudaStream& stream) {
  if (!bytes) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream.handle()),
             "copying device to host");
}

void copy_device_to_device(void* dst, const void* src, std::size_t bytes, CudaStream& stream) {
  if (!bytes) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream.handle()),
             "copying device to device");
}

namespace {
bool host_place(Place p) { return p.kind == PlaceKind::Cpu || p.kind == PlaceKind::HostStream; }
}  // namespace

void copy_between_places(void* dst, Place dst_place, const void* src, Place src_place,
                         std::size_t bytes, Stream* stream) {
  const bool dst_host = host_place(dst_place), src_host = host_place(src_place);
  if (!(dst_host || dst_place.kind == PlaceKind::Cuda) ||
      !(src_host || src_place.kind == PlaceKind::Cuda))
    throw_error(ErrorKind::InvalidArgument, "cannot copy from ", src_place.to_string(), " to ",
                dst_place.to_string());
  if (!bytes) return;
  if (dst_host && src_host) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const int device = dst_host ? src_place.device : dst_place.device;
  auto* cuda_stream = dynamic_cast<CudaStream*>(stream);
  CudaStream& on = cuda_stream ? *cuda_stream : cuda_context(device).compute_stream();
  use_cuda_device(on.device());
  const auto kind = src_host   ? cudaMemcpyHostToDevice
                    : dst_host ? cudaMemcpyDeviceToHost
                               : cudaMemcpyDeviceToDevice;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, on.handle()),
             ("copying " + std::to_string(bytes) + " bytes from " + src_place.to_string() +
              " to " + dst_place.to_string())
                 .c_str());
  if (!cuda_stream) on.synchronize();
}

Tensor copy_to_place(const Tensor& t, Place place) {
  const Place from = t.place();
  if (!(host_place(from) || from.kind == PlaceKind::Cuda) ||
      !(host_place(place) || place.kind == PlaceKind::Cuda))
    throw_error(ErrorKind::InvalidArgument, "cannot copy a tensor from ", from.to_string(), " to ",
                place.to_string());
  Tensor out = Tensor::empty(t.dims(), t.dtype(), host_place(place) ? Place::cpu() : place);
  copy_between_places(out.raw_data(), out.place(), t.raw_data(), from, t.bytes(), nullptr);
  return out;
}

}  // namespace kiln
