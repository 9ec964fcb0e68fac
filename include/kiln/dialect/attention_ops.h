// Scaled dot-product attention (fused, optional causal mask).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
