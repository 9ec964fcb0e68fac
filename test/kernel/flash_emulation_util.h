// What the emulated attention kernel tests share (flash_attention_*_emulation_test.cc):
// the kernels' shared memory and where an element of a head lies in either
// layout (of a q-like tensor, or of k / v under grouped-query attention). Include it (it includes warp_emulation.h) before the kernel header.
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

// The same in k or v (s.hk heads) for query head i: its group's k / v head.
inline std::size_t at_kv(const kiln::cuda::FlashAttentionShape& s, std::int64_t i, std::int64_t r, std::int64_t c,
                         std::int64_t len, std::int64_t width) {
  const std::int64_t b = i / s.h, j = i % s.h / (s.h / s.hk);
  const std::int64_t head = s.heads_inner ? (b * len * s.hk + j) * width : (b * s.hk + j) * len * width;
  return static_cast<std::size_t>(head + r * (s.heads_inner ? s.hk * width : width) + c);
}

}  // namespace kiln_test::flash_emulation
