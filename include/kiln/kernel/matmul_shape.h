// The shapes of kiln.matmul for every backend's kernel: m, n, k, the output
// dims and, per output batch dim, how far x's and y's matrix index moves
// (0 where that operand is broadcast). Free of the IR.
#pragma once

#include <cstdint>
#include <string_view>

#include "kiln/support/data_type.h"
#include "kiln/support/dims.h"

namespace kiln {

struct MatmulShape {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;              // output matrices
  int batch_rank = 0;                  // output batch dims
  std::int64_t out_batch[Dims::kMaxRank] = {};
  std::int64_t x_step[Dims::kMaxRank] = {};
  std::int64_t y_step[Dims::kMaxRank] = {};
  std::int64_t x_count = 1, y_count = 1;  // matrices in x and y
  Dims out_dims;
};

// kiln::Error (InvalidArgument) naming `op`, both shapes and the transpose
// flags for operands of rank < 2, contraction dims that differ, or batch
// dims that do not broadcast.
MatmulShape matmul_shape(std::string_view op, const Dims& x, const Dims& y, bool transpose_x,
                         bool transpose_y);

// The error check_matmul_bias throws (out of line: kernels check on every run).
[[noreturn, gnu::cold]] void throw_matmul_bias(std::string_view op, DataType bias, std::int64_t bias_elements,
                                               DataType product, std::int64_t n);

// kiln.fused_matmul's bias against its product (dtype `product`, last dim
// n): kiln::Error (InvalidArgument) naming `op` unless the bias has the
// product's dtype and n elements or one.
inline void check_matmul_bias(std::string_view op, DataType bias, std::int64_t bias_elements,
                              DataType product, std::int64_t n) {
  if (bias != product || (bias_elements != n && bias_elements != 1)) [[unlikely]]
    throw_matmul_bias(op, bias, bias_elements, product, n);
}

}  // namespace kiln
