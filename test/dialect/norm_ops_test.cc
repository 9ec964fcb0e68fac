// InferMeta, Vjp and error tests of the ops of kiln/dialect/norm_ops.h.
#include "catch.hpp"
