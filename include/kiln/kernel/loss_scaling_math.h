// The state arithmetic of kiln.update_loss_scaling_
// (kiln/dialect/loss_scaling_ops.h), written once for the CPU and CUDA
// kernels (__host__ __device__, nvcc-safe).
#pragma once

#include <cmath>
#include <cstdint>

#include "kiln/support/host_device.h"

namespace kiln {

struct LossScaleRule {
  std::int64_t incr_every_n_steps, decr_every_n_nan_or_inf;
  double incr_ratio, decr_ratio;
};

struct LossScaleState {
  float scale;
  std::int32_t good, bad;
};

// The state after one step that found (or did not find) an inf or nan.
KILN_HOST_DEVICE inline LossScaleState next_loss_scale(LossScaleState s, bool found_inf,
                                                       const LossScaleRule& r) {
  if (found_inf) {
    s.good = 0;
    if (++s.bad >= r.decr_every_n_nan_or_inf) {
      s.scale = static_cast<float>(s.scale * r.decr_ratio);
      s.bad = 0;
    }
    return s;
  }
  s.bad = 0;
  if (++s.good >= r.incr_every_n_steps) {
    const float grown = static_cast<float>(s.scale * r.incr_ratio);
    if (std::isfinite(grown)) s.scale = grown;
    s.good = 0;
  }
  return s;
}

}  // namespace kiln
