// Conv2d and conv2d_transpose (NCHW).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
