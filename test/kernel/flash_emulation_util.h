// What the emulated attention kernel tests share (flash_attention_*_emulation_test.cc):
// the kernels' shared memory and where an element of a head lies in either
// layout. Include it (it includes warp_emulation.h) before the kernel header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernel/warp_emulation.h"
#include "launch.h"

namespace kiln::cuda::flash {
// The kernels' shared memory: the emulation runs one block at a time (one
// definition for the program's emulation tests, the largest block's bytes).
alignas(128) inline unsigned char smem[232 * 1024];
}  // namespace kiln::cuda::flash

namespace kiln_test::flash_emulation {

// Element (head i, row r, column c) of a tensor of `len` rows of `width`.
inline std::size_t at(const kiln::cuda::FlashAttentionShape& s, std::int64_t i, std::int64_t r, std::int64_t c,
                      std::int64_t len, std::int64_t width) {
  const std::int64_t head = s.heads_inner ? ((i / s.h) * len * s.h + i % s.h) * width : i * len * width;
  return static_cast<std::size_t>(head + r * (s.heads_inner ? s.h * width : width) + c);
}

}  // namespace kiln_test::flash_emulation
