// InferMeta, Vjp and error tests of the ops of kiln/dialect/search_ops.h.
#include "catch.hpp"
