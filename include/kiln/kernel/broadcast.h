// Numpy broadcasting for every backend's binary kernels: the output dims of
// two operands and the plan to walk them — size-1 dims dropped, adjacent dims
// merged where both operands walk on through, so the innermost loop is
// contiguous or a scalar. Free of the IR: CUDA kernels include it too.
#pragma once

#include <cstdint>
#include <string_view>

#include "kiln/support/dims.h"
#include "kiln/support/host_device.h"

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

// The offsets in x and y of output element i (row-major over p's dims).
KILN_HOST_DEVICE inline void broadcast_offsets(const BroadcastPlan& p, std::int64_t i, std::int64_t& xo,
                                               std::int64_t& yo) {
  xo = 0;
  yo = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const std::int64_t idx = i % p.dims[d];
    i /= p.dims[d];
    xo += idx * p.sx[d];
    yo += idx * p.sy[d];
  }
}

// The broadcast output dims of x and y (numpy rules); kiln::Error naming the
// op when they cannot broadcast.
Dims broadcast_dims(std::string_view op, const Dims& x, const Dims& y);
// The plan for x ⊕ y → out (out = broadcast_dims(x, y)).
BroadcastPlan make_broadcast_plan(const Dims& x, const Dims& y, const Dims& out);

}  // namespace kiln
