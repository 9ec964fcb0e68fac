// Comparisons and logic (equal … logical_xor, isnan, isfinite), where, clip, masked_fill, triu / tril.
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {}  // namespace kiln
