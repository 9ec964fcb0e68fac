// CPU kernels of the ops of kiln/dialect/attention_ops.h.
#include "kiln/dialect/attention_ops.h"
