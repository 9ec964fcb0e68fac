// Lowering of structured control flow to dataflow ops ("lower_to_dataflow",
// and its automatic form "auto_lower_to_dataflow";
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
// through one more switch, and so does each operand of an op that reads
// no switch output (only captures or hoisted constants; TensorFlow's
// pivot): every op of an untaken branch, and of a loop's exit iteration,
// is dead, as it would not run structured. A loop body's ops that read nothing of the loop
// (constants, parameters) move before the loop and enter it as constants.
// A program the pass cannot lower as a whole — a while with max_iterations,
// a yielded value whose type does not fit its carried value's, a random or
// side-effect op in a loop body that reads nothing of the loop, a random
// or side-effect op without operands in an if branch, an op the frame
// propagator does not run (placed by the user on a stream or with
// kiln.place, communicating, or with an asynchronous CPU kernel: a
// partitioned program's send / recv) — is left as it is (structured, run
// by the control-flow runner).
#pragma once

#include <memory>
#include <vector>

#include "kiln/passes/pass.h"

namespace kiln {

std::unique_ptr<Pass> create_lower_to_dataflow_pass();

// Whether the pass would lower `program` (it holds structured control flow
// and nothing that keeps it structured).
bool can_lower_to_dataflow(const Program& program);

// "auto_lower_to_dataflow" (first in kDefaultPasses): lowers as
// lower_to_dataflow does, only where a loop's iterations can overlap — the
// run has more than one thread (PassContext::num_threads), its place is the
// CPU, and some kiln.while of the program is in
// loops_with_overlapping_iterations. A
// loop whose iterations cannot overlap (a counter, a recurrence h = f(h))
// stays structured: the control-flow runner costs less per iteration than
// the frame propagator. The whole program is lowered or none of it.
std::unique_ptr<Pass> create_auto_lower_to_dataflow_pass();

// The kiln.while ops (nested ones included) whose body has an op estimated
// from static shapes to take longer than kExpensiveKernelNs (kiln/kernel/kernel_cost.h) that
// neither the loop's condition (through the carried values it is computed
// from, over iterations) nor the op's own next instance depends on: while
// that op runs, the next iteration's condition and counter can run ahead
// and start its instance on another thread. Ops with -1 dims count as cheap.
std::vector<const Operation*> loops_with_overlapping_iterations(const Program& program);

// What auto_lower_to_dataflow decides for `program` at `num_threads`.
bool auto_lowers_to_dataflow(const Program& program, unsigned num_threads);

}  // namespace kiln
