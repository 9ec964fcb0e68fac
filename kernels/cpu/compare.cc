// CPU kernels of the ops of kiln/dialect/compare_ops.h.
#include "kiln/dialect/compare_ops.h"
