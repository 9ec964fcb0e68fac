// Batch_norm, layer_norm and rms_norm (fused).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
