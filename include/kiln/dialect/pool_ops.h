// Max_pool2d, avg_pool2d, adaptive_avg_pool2d (NCHW).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
