// InferMeta, Vjp and error tests of the ops of kiln/dialect/conv_ops.h.
#include "catch.hpp"
