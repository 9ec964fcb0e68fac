// CPU kernels of the ops of kiln/dialect/manipulation_ops.h.
#include "kiln/dialect/manipulation_ops.h"
