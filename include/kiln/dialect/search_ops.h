// Argmax / argmin, topk, one_hot.
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
