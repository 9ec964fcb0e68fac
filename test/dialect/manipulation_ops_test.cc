// InferMeta, Vjp and error tests of the ops of kiln/dialect/manipulation_ops.h.
#include "catch.hpp"
