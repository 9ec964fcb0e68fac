// The "vtensor" pass: as many values as possible become vtensors (seed 002
// §2.5.1), so that the passes after it may move, merge and fuse the ops over
// them without an alias analysis of their own.
//
// Step 1 (the seed's Pass 1) gives every value-semantics op vtensor operands
// and results: an operand that is a tensor is read through
// `kiln.to_vtensor` (one per value, made before its first such reader), and
// a result goes back to a tensor through `kiln.to_tensor` right after the op
// for every reader that is not such an op. Types follow the op's InferMeta
// (a result is a vtensor when every operand is); an op that takes no
// vtensor, has an effect (random, side effect, an in-place write that can be
// seen), regions, or a stream placement stays as written.
//
// Step 2 (the seed's Pass 2) removes the pairs that step 1 made needless:
// for b = to_tensor(a), when no reader of b writes it in place, views it or
// keeps it (kiln/passes/op_effects.h: is_buffer), every to_vtensor(b) is a
// itself. A to_tensor left with no reader goes too; what remains are the
// conversions at the program's edges — after its data, parameters and
// constants, before in-place ops, views, fetches and set_parameter.
//
// The conversions are deep copies when they run: the pass is not in the
// executor's default pipeline (kDefaultPasses), whose passes keep their own
// alias analysis; a user runs it by name ("vtensor,cse,fuse", kiln-opt).
// The "inplace" pass leaves vtensor operands alone: an in-place op writes a
// tensor.
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/ir/block.h"
#include "kiln/passes/pass.h"

namespace kiln {

// Step 1 and step 2 over `block` (not its regions); the ops converted.
std::size_t to_value_semantics(Block& block, PassContext& ctx);

std::unique_ptr<Pass> create_vtensor_pass();  // "vtensor"

}  // namespace kiln
