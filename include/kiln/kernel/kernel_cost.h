// What counts as an expensive kernel: one whose run takes longer than
// kExpensiveKernelNs. The executor's cost model sends such kernels to the
// pool and runs cheaper ones inline; the dataflow lowering's automatic rule
// looks for loop bodies holding such work.
#pragma once

#include <cstdint>

namespace kiln {

inline constexpr std::int64_t kExpensiveKernelNs = 2000;

}  // namespace kiln
