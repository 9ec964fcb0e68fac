// append_backward (seed 001 §1.2.2.1): appends to the loss's block the ops
// computing d(loss)/d(parameters). The loss gradient is filled with ones;
// the ops on a path from a gradient source to the loss are walked in
// reverse and each one's VjpInterface emits its grad ops; a value used by
// several ops gets the sum (kiln.add_n) of its gradients. Every op it
// appends is marked OpRole::Backward (kiln/frontend/op_role.h).
#pragma once

#include <utility>
#include <vector>

#include "kiln/ir/value.h"

namespace kiln {

// `parameters` empty: every trainable parameter of the program (its
// builtin.parameter values with stop_gradient false), and gradients flow
// from those and from data values whose stop_gradient was set to false
// (never from constants or random ops); otherwise exactly the given values
// are the sources. Values marked stop_gradient, those in
// `no_grad_set`, and non-floating values get no gradient and cut the graph;
// an op whose operands all have no gradient is skipped. Grad ops nobody
// reads (e.g. a matmul's gradient for its data input) are removed.
//
// Returns (parameter, gradient) in parameter order, for each parameter a
// gradient reaches (a parameter the loss does not depend on is left out).
// kiln::Error: a null loss; a loss that is not a floating tensor of one
// element (a scalar or e.g. [1, 1]); an op on a path without VjpInterface
// (Unimplemented, naming it); a parameter outside the loss's block. On an
// error the program is left as it was.
std::vector<std::pair<Value, Value>> append_backward(Value loss,
                                                     const std::vector<Value>& parameters = {},
                                                     const std::vector<Value>& no_grad_set = {});

}  // namespace kiln
