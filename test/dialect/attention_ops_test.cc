// InferMeta, Vjp and error tests of the ops of kiln/dialect/attention_ops.h.
#include "catch.hpp"
