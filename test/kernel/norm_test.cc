// Kernel tests of the ops of kiln/dialect/norm_ops.h.
#include "kernel/kernel_test_util.h"
