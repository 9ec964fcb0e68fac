// Print (prints a tensor's values with a name and a step counter when it runs).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
