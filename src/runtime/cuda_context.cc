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

void select(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device)
    check_cuda(cudaSetDevice(device), ("selecting cuda:" + std::to_string(device)).c_str());
}

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
    select(device_);
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

Tensor copy_to_place(const Tensor& t, Place place) {
  const Place from = t.place();
  auto host = [](Place p) { return p.kind == PlaceKind::Cpu || p.kind == PlaceKind::HostStream; };
  if (!(host(from) || from.kind == PlaceKind::Cuda) || !(host(place) || place.kind == PlaceKind::Cuda))
    throw_error(ErrorKind::InvalidArgument, "cannot copy a tensor from ", from.to_string(), " to ",
                place.to_string());
  Tensor out = Tensor::empty(t.dims(), t.dtype(), host(place) ? Place::cpu() : place);
  if (!t.bytes()) return out;
  const int device = place.kind == PlaceKind::Cuda ? place.device : from.device;
  if (host(from) && host(place)) {
    std::memcpy(out.raw_data(), t.raw_data(), t.bytes());
    return out;
  }
  CudaStream& stream = cuda_context(device).compute_stream();
  const auto kind = host(from) ? cudaMemcpyHostToDevice
                    : host(place) ? cudaMemcpyDeviceToHost
                                  : cudaMemcpyDeviceToDevice;
  check_cuda(cudaMemcpyAsync(out.raw_data(), t.raw_data(), t.bytes(), kind, stream.handle()),
             "copying a tensor between places");
  stream.synchronize();
  return out;
}

}  // namespace kiln
