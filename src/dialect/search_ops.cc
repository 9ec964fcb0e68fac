// The ops of kiln/dialect/search_ops.h.
#include "kiln/dialect/search_ops.h"
