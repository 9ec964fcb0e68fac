// The for-test clone of a training program (Paddle's
// `program.clone(for_test=True)`, seed 001 §1): the program an evaluation or
// inference run executes — train/eval ops switched to eval, the backward and
// optimizer part gone.
#pragma once

#include "kiln/ir/ir_mapping.h"
#include "kiln/ir/program.h"

namespace kiln {

// A copy of `program` in which:
//   - every op (nested ones included) with a bool attribute `is_test` has it
//     set to true — the convention of ops that behave differently in
//     training and evaluation (kiln.dropout, batch norm);
//   - ops that only matter for training are dropped: those marked
//     OpRole::Backward or OpRole::Optimize (kiln/frontend/op_role.h: what
//     append_backward and the optimizers append — gradients, clipping,
//     update ops, the learning-rate and optimizer-state reads) and
//     `builtin.set_parameter` writes; so is every op that uses a value of a
//     dropped op (e.g. a kiln.fetch of a gradient);
//   - parameters that only dropped ops named (learning rates, optimizer
//     state) leave the parameter table; the others stay as they were.
// `program` is not changed. When `mapping` is given it receives, for each
// op and value the copy keeps, original → copy (look a value of `program` up
// with mapping->lookup(v) to fetch it from the copy).
Program clone_for_test(const Program& program, IrMapping* mapping = nullptr);

}  // namespace kiln
