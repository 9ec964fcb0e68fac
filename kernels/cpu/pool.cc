// CPU kernels of the ops of kiln/dialect/pool_ops.h.
#include "kiln/dialect/pool_ops.h"
