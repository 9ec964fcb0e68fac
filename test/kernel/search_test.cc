// Kernel tests of the ops of kiln/dialect/search_ops.h.
#include "kernel/kernel_test_util.h"
