// Op roles (Paddle's `op_role`, seed 001 §1.2.2): which part of a training
// program an op belongs to. append_backward marks every op it appends
// `backward`, Optimizer::apply_gradients every op it appends `optimize`
// (clipping, regularization, the update ops and the parameter reads of the
// learning rate and optimizer state); other ops carry no mark and are
// `forward`. The mark is the string attribute `op_role` on the op, so it
// survives clone and JSON. clone_for_test drops the backward and optimize ops.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

class Block;      // kiln/ir/block.h
class Operation;  // kiln/ir/operation.h

inline constexpr std::string_view kOpRoleAttr = "op_role";

enum class OpRole : std::uint8_t { Forward, Backward, Optimize };

constexpr std::string_view to_string(OpRole role);

// Forward removes the mark (the absent attribute means forward).
void set_op_role(Operation* op, OpRole role);
// The op's role: Forward when it carries no mark, or one that is not a
// string naming a role.
OpRole op_role(const Operation* op);
// Marks every op after `mark` in `block` (all of them when `mark` is null).
void set_op_role_after(Block& block, Operation* mark, OpRole role);

constexpr std::string_view to_string(OpRole role) {
  switch (role) {
    case OpRole::Forward: return "forward";
    case OpRole::Backward: return "backward";
    case OpRole::Optimize: return "optimize";
  }
  return "?";
}

}  // namespace kiln
