// The ops of kiln/dialect/manipulation_ops.h.
#include "kiln/dialect/manipulation_ops.h"
