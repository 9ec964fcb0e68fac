// Launch geometry of kiln's grid-stride CUDA kernels (device code, private
// to kernels/cuda). It reads no kiln header: a .cu file that includes only
// this, launch.h and the math structs does not recompile when the runtime's
// or the IR's headers change.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::cuda {

constexpr int kThreads = 256;

// Blocks for a kernel whose blocks take `units` items (rows, tiles) a grid
// apart: one each, up to a cap past which each block takes several.
inline unsigned blocks_over(std::int64_t units) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(units, 1, 65535LL * 16));
}

// Blocks for a grid-stride loop over n elements (capped: each thread then
// takes several).
inline unsigned blocks_for(std::int64_t n) { return blocks_over((n + kThreads - 1) / kThreads); }

#define KILN_GRID_STRIDE(i, n)                                                          \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (n); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

}  // namespace kiln::cuda
