// The ops of kiln/dialect/norm_ops.h.
#include "kiln/dialect/norm_ops.h"
