// Dead-code elimination ("dce"): erases ops whose results nothing uses (an
// op without results counts as unused, as in MLIR) and that have no effect
// (kiln/passes/op_effects.h), in every block, innermost first; a
// control-flow op goes when nothing inside it has an effect and its results
// are unused. Live-out values of the PassContext (fetch targets) and their
// producers stay.
#pragma once

#include <memory>
#include <vector>

#include "kiln/passes/pass.h"

namespace kiln {

std::unique_ptr<Pass> create_dce_pass();
// Erases the dead ops of one block (not of nested regions); returns how many.
std::size_t eliminate_dead_ops(Block& block, PassContext& ctx);

// Whether `op` is dead: no result used or live-out, and no effect
// (kiln/passes/op_effects.h) — what dce erases. Rewrites that leave an
// op's producers unused erase them with it (the greedy pattern driver and
// fold do; MLIR's driver erases trivially dead ops the same way).
bool is_trivially_dead(const Operation& op, const PassContext& ctx);

// Erases each of `ops` that is dead, then each producer of their operands
// that this leaves dead, transitively; returns how many ops went. `ops` may
// repeat an op or hold one another's producers.
std::size_t erase_dead_chains(std::vector<Operation*> ops, PassContext& ctx);

}  // namespace kiln
