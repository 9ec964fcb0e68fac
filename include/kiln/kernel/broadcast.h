// Numpy broadcasting for every backend's binary kernels: the output dims of
// two operands and the plan to walk them — size-1 dims dropped, adjacent dims
// merged where both operands walk on through, so the innermost loop is
// contiguous or a scalar. Free of the IR: CUDA kernels include it too.
#pragma once

#include <cstdint>
#include <string_view>

#include "kiln/support/dims.h"

namespace kiln {

// How to walk the output of a broadcasting binary op: `rank` collapsed dims
// (rank 0 = one element) and, per dim, the element strides of x and y (0
// where that operand is broadcast).
struct BroadcastPlan {
  int rank = 0;
  std::int64_t dims[Dims::kMaxRank] = {};
  std::int64_t sx[Dims::kMaxRank] = {};
  std::int64_t sy[Dims::kMaxRank] = {};
};

// The broadcast output dims of x and y (numpy rules); kiln::Error naming the
// op when they cannot broadcast.
Dims broadcast_dims(std::string_view op, const Dims& x, const Dims& y);
// The plan for x ⊕ y → out (out = broadcast_dims(x, y)).
BroadcastPlan make_broadcast_plan(const Dims& x, const Dims& y, const Dims& out);

}  // namespace kiln
