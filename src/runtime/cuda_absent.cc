// kiln/runtime/cuda_context.h when kiln is built without CUDA: no devices.
#include "kiln/runtime/cuda_context.h"

namespace kiln {

int cuda_device_count() noexcept { return 0; }

bool built_with_cuda() noexcept { return false; }

CudaContext& cuda_context(int device) {
  throw_error(ErrorKind::Unimplemented, "cuda:", device,
              ": kiln was built without CUDA (meson option cuda, needs nvcc on PATH)");
}

Tensor copy_to_place(const Tensor& t, Place place) {
  if (place.kind == PlaceKind::Cuda || t.place().kind == PlaceKind::Cuda)
    throw_error(ErrorKind::Unimplemented, "copying a tensor to ", place.to_string(),
                ": kiln was built without CUDA");
  return t.clone();
}

}  // namespace kiln
