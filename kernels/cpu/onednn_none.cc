// onednn.h in a build without oneDNN: nothing is done by oneDNN, every
// caller uses kiln's own kernels.
#include "onednn.h"

#include "kiln/kernel/cpu_convolution.h"

namespace kiln::cpu::onednn {

bool available() { return false; }

bool sgemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
           const float*, std::int64_t, float, float*, std::int64_t) {
  return false;
}

bool conv2d_forward(const float*, const float*, const float*, float*, const Conv2dGeometry&,
                    ConvActivation, const ContentsIdentity&, const ConvLayout&) {
  return false;
}

void name_result(const ContentsIdentity&) {}

bool native_bf16() { return false; }

bool bf16_gemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, const std::uint16_t*, std::int64_t,
               const std::uint16_t*, std::int64_t, std::uint16_t*, std::int64_t) {
  return false;
}

bool conv2d_forward(const std::uint16_t*, const std::uint16_t*, const std::uint16_t*, std::uint16_t*,
                    const Conv2dGeometry&, ConvActivation, const ContentsIdentity&, const ConvLayout&) {
  return false;
}

ConvGrads conv2d_backward(const float*, const float*, const float*, float*, float*,
                          const Conv2dGeometry&, bool) {
  return {};
}

ConvGrads conv2d_backward(const std::uint16_t*, const std::uint16_t*, const std::uint16_t*, std::uint16_t*,
                          std::uint16_t*, const Conv2dGeometry&, bool) {
  return {};
}

}  // namespace kiln::cpu::onednn

namespace kiln {
bool cpu_convolutions_prefer_channels_last() { return false; }
bool cpu_convolutions_compute_bf16() { return false; }
}  // namespace kiln
