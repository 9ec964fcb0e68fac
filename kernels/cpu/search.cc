// CPU kernels of the ops of kiln/dialect/search_ops.h.
#include "kiln/dialect/search_ops.h"
