// The kiln dialect: kiln's own ops (data/fetch, math, tensor ops, grad ops;
// optimizers and control flow come with later issues). Including this header
// gives every op of the dialect.
#pragma once

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/grad_ops.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/dialect/math_ops.h"
#include "kiln/dialect/nn_ops.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/random_ops.h"
#include "kiln/dialect/tensor_ops.h"

namespace kiln {

class KilnDialect : public Dialect {
 public:
  KilnDialect();
};

}  // namespace kiln
