// Kernel tests of the ops of kiln/dialect/attention_ops.h.
#include "kernel/kernel_test_util.h"
