// Kernel tests of the ops of kiln/dialect/pool_ops.h.
#include "kernel/kernel_test_util.h"
