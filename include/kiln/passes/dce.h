// Dead-code elimination ("dce"): erases ops whose results nothing uses (an
// op without results counts as unused, as in MLIR) and that have no effect
// (kiln/passes/op_effects.h), in every block, innermost first; a
// control-flow op goes when nothing inside it has an effect and its results
// are unused. Live-out values of the PassContext (fetch targets) and their
// producers stay.
#pragma once

#include <memory>

#include "kiln/passes/pass.h"

namespace kiln {

std::unique_ptr<Pass> create_dce_pass();
// Erases the dead ops of one block (not of nested regions); returns how many.
std::size_t eliminate_dead_ops(Block& block, PassContext& ctx);

}  // namespace kiln
