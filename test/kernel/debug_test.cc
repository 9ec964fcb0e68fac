// Kernel tests of the ops of kiln/dialect/debug_ops.h.
#include "kernel/kernel_test_util.h"
