// Expand / broadcast_to, stack, flatten, squeeze / unsqueeze, pad, cumsum.
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
