// CPU kernels of the ops of kiln/dialect/norm_ops.h.
#include "kiln/dialect/norm_ops.h"
