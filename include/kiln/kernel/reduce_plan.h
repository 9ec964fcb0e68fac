// How every backend's reduction kernels walk their input: the dims
// collapsed against the reduced axes into alternating kept / reduced groups
// (size-1 dims dropped, neighbours with the same role merged), each with
// its element stride in the input and, for kept groups, in the output.
// Free of the IR: CUDA kernels include it too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/support/dims.h"

namespace kiln {

struct ReduceGroup {
  std::int64_t extent;
  bool reduced;
  std::int64_t in_stride;   // elements of the input per step
  std::int64_t out_stride;  // elements of the output per step (kept groups)
};

// Collapses x's dims against the reduced axes (sorted) into g (room for
// Dims::kMaxRank groups); returns their number (0: a single element).
inline int collapse_reduce_groups(const Dims& dims, const std::vector<int>& axes, ReduceGroup* g);

inline int collapse_reduce_groups(const Dims& dims, const std::vector<int>& axes, ReduceGroup* g) {
  int m = 0;
  for (int i = 0; i < dims.rank(); ++i) {
    if (dims[i] == 1) continue;
    const bool red = std::binary_search(axes.begin(), axes.end(), i);
    if (m > 0 && g[m - 1].reduced == red)
      g[m - 1].extent *= dims[i];
    else
      g[m++] = ReduceGroup{dims[i], red, 0, 0};
  }
  std::int64_t is = 1, os = 1;
  for (int k = m - 1; k >= 0; --k) {
    g[k].in_stride = is;
    is *= g[k].extent;
    g[k].out_stride = os;
    if (!g[k].reduced) os *= g[k].extent;
  }
  return m;
}

}  // namespace kiln
