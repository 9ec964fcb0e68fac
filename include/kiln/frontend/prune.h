// Pruning a program to what some of its values need (Paddle's
// `Program._prune(targets)`, seed 001 §1): the ops an executor must run to
// compute those values, and nothing else.
#pragma once

#include <vector>

#include "kiln/ir/ir_mapping.h"
#include "kiln/ir/program.h"

namespace kiln {

// A copy of `program` keeping only the top-level ops that `targets`
// transitively need: the ops defining the targets and, recursively, the
// values they read (a region op reads its operands and the outer values its
// nested ops use), plus the ops that write what a kept op reads before it
// reads it — an in-place op (Inplace) writing the variable of a value read
// later, a `builtin.set_parameter` of a parameter read later — and the
// in-place writers of a target's own variable anywhere in the program (a
// fetch sees them, see FetchTarget). Everything else goes: ops with side
// effects the targets do not depend on (kiln.fetch ops included), and
// kiln.data ops no kept op reads (feeds no longer needed). The parameter
// table keeps only the parameters the kept ops name. No targets: an empty
// program. `program` is not changed; `mapping` as in clone_for_test.
//
// kiln::Error (InvalidArgument) naming the target (its index and defining
// op) when it is null or not a value of `program`'s top-level block.
Program prune(const Program& program, const std::vector<Value>& targets,
              IrMapping* mapping = nullptr);

}  // namespace kiln
