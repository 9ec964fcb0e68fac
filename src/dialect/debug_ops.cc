// The ops of kiln/dialect/debug_ops.h.
#include "kiln/dialect/debug_ops.h"
