// InferMeta, Vjp and error tests of the ops of kiln/dialect/debug_ops.h.
#include "catch.hpp"
