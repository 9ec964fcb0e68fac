// Kernel tests of the ops of kiln/dialect/compare_ops.h.
#include "kernel/kernel_test_util.h"
