// The ops of kiln/dialect/conv_ops.h.
#include "kiln/dialect/conv_ops.h"
