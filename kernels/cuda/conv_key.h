// What the CUDA conv2d kernels (kernels/cuda/conv.cc) key their cached
// cuDNN algorithm choices by, and when a choice is kept: host logic with no
// CUDA types, so that a test without a device reads it.
#pragma once

#include <cstdint>
#include <tuple>

#include "kiln/dialect/conv_ops.h"
#include "kiln/runtime/conv_options.h"
#include "kiln/support/data_type.h"

namespace kiln::cuda {

// The device (each GPU has its own fastest algorithm, and its own math
// types), the pass (0 forward, 1 filter gradient, 2 data gradient), the
// dtype, the shape as cuDNN sees it (x's padded extent and the symmetric
// padding left to cuDNN) and the settings of kiln/runtime/conv_options.h.
using ConvKey = std::tuple<int, int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int,
                           bool, bool>;
inline ConvKey conv_key(int device, int pass, DataType dtype, const Conv2dGeometry& g, std::int64_t xh,
                        std::int64_t xw, int ph, int pw) {
  return {device, pass, static_cast<int>(dtype), g.n, g.c, xh, xw, g.o, g.kh, g.kw, g.sh, g.sw, g.dh,
          g.dw, g.groups, g.ho, g.wo, ph, pw, float32_conv_precision() == MatmulPrecision::High,
          conv_algorithm_search() == ConvAlgorithmSearch::Benchmark};
}

// Whether a choice is cached for its key: always, but for a heuristic
// stand-in while a benchmark search could not time (the stream was being
// captured into a CUDA graph), which a later run times. A search that ran
// and failed (cudnnFind out of memory) is not asked again: its heuristic
// stand-in is kept.
inline bool keep_conv_choice(bool benchmark, bool timing_ran) { return !benchmark || timing_ran; }

}  // namespace kiln::cuda
