// fuse_optimizer: the optimizer updates of one block that are of one kind
// (kiln.sgd_, kiln.momentum_, kiln.adam_ or kiln.adamw_), have equal
// attributes and read the same learning-rate value become one merged op
// (kiln.merged_sgd_ …, kiln/dialect/merged_optimizer_ops.h) whose kernel
// updates every parameter in one call.
//
// The merged op takes the place of the group's last update. An earlier
// update joins only when moving it there changes nothing: no op between
// (but the group's other members, whose order the merged op keeps) reads
// or writes a buffer it updates (its parameter's variable — any
// builtin.parameter value of that name, or a builtin.set_parameter of it —
// or its state), nor writes a value it reads (the gradient, the learning
// rate). Updates with a placement (an execution stream, a kiln.place) stay
// as written. A merged op has at most 64 results (the dataflow frame
// plan's limit): a larger group becomes several merged ops of even size, one
// after another in the members' order. Results are bit-identical: each
// parameter's update is the single op's, in the same order.
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/ir/program.h"
#include "kiln/passes/pass.h"

namespace kiln {

// Merges in `block` and in every region nested in it; returns the number
// of merged ops created. With a PassContext, replacements and erasures go
// through it.
std::size_t fuse_optimizer_updates(Block& block, PassContext* ctx = nullptr);
inline std::size_t fuse_optimizer_updates(Program& program) {
  return fuse_optimizer_updates(program.block());
}

// The "fuse_optimizer" pass, for CPU and CUDA targets (the places whose
// kernels include the merged ops'). The "fuse" pass runs it too, after its
// other fusions (for a CUDA target, alone).
std::unique_ptr<Pass> create_fuse_optimizer_pass();

}  // namespace kiln
