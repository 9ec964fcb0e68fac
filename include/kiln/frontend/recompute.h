// Activation recompute (Paddle's RecomputeOptimizer, torch.utils.checkpoint):
// a training program keeps only some forward values — the checkpoints — for
// its backward, and computes the others again from them when the backward
// first needs them, trading compute for the memory those activations held
// between the forward and the backward.
//
// The checkpoints, in program order, cut the forward into segments: the
// forward ops after one checkpoint's op, up to and including the next
// checkpoint's op. A value such a segment defines (other than the
// checkpoint it ends with) that a backward op reads is recomputed: the
// segment's ops it needs are cloned, marked backward, right before the
// first backward op that reads one of them, and the backward reads the
// clones. Parameters and feeds are read as they are (they stay alive
// anyway). The forward's own values then die where the forward last uses
// them. Ops before the first checkpoint and after the last one are not
// recomputed (the backward starts right after the last segment).
//
// Only what is safe to compute twice is cloned: an op with an effect (a
// random draw, a write to state, a collective, kiln/passes/op_effects.h),
// with regions, or writing an operand in place keeps its results, which
// then count as checkpoints. The clones compute what the originals computed
// from the same inputs, so gradients are bit-identical to the program's
// without recompute.
#pragma once

#include <cstddef>
#include <vector>

#include "kiln/ir/program.h"
#include "kiln/ir/value.h"

namespace kiln {

struct RecomputeResult {
  std::size_t segments = 0;  // segments with a value the backward reads
  std::size_t ops = 0;       // ops cloned
  std::size_t values = 0;    // forward values the backward now reads from a clone
};

// Rewrites `program`'s top-level block (after append_backward or an
// optimizer's minimize). kiln::Error (InvalidArgument) naming the value or
// the program: fewer than two checkpoints, a null checkpoint, one that is
// not a result of a forward op of the top-level block, one given twice, or
// a program without backward ops.
RecomputeResult recompute(Program& program, const std::vector<Value>& checkpoints);

}  // namespace kiln
