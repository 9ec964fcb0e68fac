// Lowering of structured control flow to dataflow ops ("lower_to_dataflow";
// TensorFlow's lowering of its functional If / While to Switch, Merge,
// Enter, Exit and NextIteration): every kiln.if and kiln.while of a program,
// innermost first, becomes ops of the enclosing block, so the whole program
// runs under the frame propagator and a loop's iterations may overlap
// (parallel_iterations = 10).
//
//   kiln.if(%p, %c...)  → switch(%c, %p) per capture; the then block reads
//       the true outputs, the else block the false ones; merge per result.
//   kiln.while(%cond, %init..., %cap...) → enter(%cond), enter(%init) into a
//       frame of its own, merges, a switch per carried value on the merged
//       condition (exit on false, the body reads true), constant enters for
//       the captures, next_iteration per yielded value.
//
// A value a branch or body yields that no switch output reaches (it would
// be live in the untaken branch, or after the loop's last iteration) goes
// through one more switch. A loop body's ops that read nothing of the loop
// (constants, parameters) move before the loop and enter it as constants.
// A program the pass cannot lower as a whole — a while with max_iterations,
// a yielded value whose type does not fit its carried value's, a random or
// side-effect op in a loop body that reads nothing of the loop — is left as
// it is (structured, run by the control-flow runner).
#pragma once

#include <memory>

#include "kiln/passes/pass.h"

namespace kiln {

std::unique_ptr<Pass> create_lower_to_dataflow_pass();

// Whether the pass would lower `program` (it holds structured control flow
// and nothing that keeps it structured).
bool can_lower_to_dataflow(const Program& program);

}  // namespace kiln
