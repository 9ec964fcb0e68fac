// The mean over the rows of an [outer, rows, cols] f32 tensor — an NHWC
// activation's mean over H and W — as kiln.mean computes it (reduce.cc),
// for kernels that fuse it into their last pass over the rows.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// out [outer, cols] = the mean of in [outer, rows, cols] over its rows,
// with kiln.mean's bits where rows > 1 and cols > 1 (chunks of rows from
// the shape alone, each summed in f64, combined in chunk order, the sum
// rounded to f32 and divided by rows). prepare(block, elements) runs in
// place over each chunk of rows first, while it is in cache (the caller's
// own last pass over them). Split across the kernel's threads by chunk.
void mean_over_rows(float* in, std::int64_t outer, std::int64_t rows, std::int64_t cols, float* out,
                    void (*prepare)(float* block, std::int64_t elements));

}  // namespace kiln::cpu
