// InferMeta, Vjp and error tests of the ops of kiln/dialect/compare_ops.h.
#include "catch.hpp"
