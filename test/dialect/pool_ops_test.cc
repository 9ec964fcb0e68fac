// InferMeta, Vjp and error tests of the ops of kiln/dialect/pool_ops.h.
#include "catch.hpp"
