// kiln/runtime/cuda_context.h when kiln is built without CUDA: no devices.
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/cuda_graph.h"

#include <cstring>

namespace kiln {

int cuda_device_count() noexcept { return 0; }

bool built_with_cuda() noexcept { return false; }

CudaContext& cuda_context(int device) {
  throw_error(ErrorKind::Unimplemented, "cuda:", device,
              ": kiln was built without CUDA (meson option cuda, needs nvcc on PATH)");
}

std::unique_ptr<Stream> new_cuda_stream(int device) {
  cuda_context(device);  // throws: no CUDA
  return nullptr;
}

Allocator& cuda_stream_allocator(int device, Stream&) {
  cuda_context(device);  // throws: no CUDA
  throw_error(ErrorKind::Unimplemented, "a CUDA stream's allocator: kiln was built without CUDA");
}

void retire_cuda_stream(int device, Stream&) { cuda_context(device); }  // throws: no CUDA

Allocator& pinned_allocator() { return cpu_allocator(); }

std::unique_ptr<Event> new_cuda_timing_event(int device) {
  cuda_context(device);  // throws: no CUDA
  return nullptr;
}

double cuda_elapsed_ms(const Event&, const Event&) {
  throw_error(ErrorKind::Unimplemented, "timing CUDA events: kiln was built without CUDA");
}

void copy_between_places(void* dst, Place dst_place, const void* src, Place src_place,
                         std::size_t bytes, Stream*) {
  if (dst_place.kind == PlaceKind::Cuda || src_place.kind == PlaceKind::Cuda)
    throw_error(ErrorKind::Unimplemented, "copying from ", src_place.to_string(), " to ",
                dst_place.to_string(), ": kiln was built without CUDA");
  if (bytes) std::memcpy(dst, src, bytes);
}

Tensor copy_to_place(const Tensor& t, Place place) {
  if (place.kind == PlaceKind::Cuda || t.place().kind == PlaceKind::Cuda)
    throw_error(ErrorKind::Unimplemented, "copying a tensor to ", place.to_string(),
                ": kiln was built without CUDA");
  return t.clone();
}

namespace {
[[noreturn]] void no_graphs() {
  throw_error(ErrorKind::Unimplemented, "CUDA graphs: kiln was built without CUDA");
}
}  // namespace

CudaGraph::~CudaGraph() = default;
void CudaGraph::begin_capture(Stream&) { no_graphs(); }
std::string CudaGraph::end_capture(Stream&) { no_graphs(); }
void CudaGraph::replay(Stream&) { no_graphs(); }
void CudaGraph::reset() noexcept {}

}  // namespace kiln
