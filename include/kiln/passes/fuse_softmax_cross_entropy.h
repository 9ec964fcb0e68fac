// fuse_softmax_cross_entropy: the cross-entropy a user or the ONNX
// importer writes as separate ops becomes one kiln.cross_entropy
// (kiln/dialect/nn_ops.h; the softmax is never a result of the chain, so
// none is made):
//
//   lp     = kiln.log_softmax(x){axis = last}   (or kiln.log(kiln.softmax(x){last}))
//   picked = kiln.take_along_axis(lp, idx){axis = last}    idx: i64/i32 [..., 1]
//   loss   = kiln.neg(kiln.squeeze(picked){axes = [last]})  (or kiln.neg(picked))
//
// (ONNX's SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss over
// log_softmax, as src/onnx/ops_loss.cc imports them, class axis last, i.e.
// [N, C] scores), and the same with ONNX's ignore_index:
//
//   ig   = kiln.equal(t, kiln.full(ii));  idx = kiln.unsqueeze(kiln.where(ig, 0, t)){[last]}
//   loss = kiln.mul(<the chain above>, kiln.where(ig, 0.0, 1.0))
//
// which is cross_entropy(x, t){ignore_index = ii}. Only when
// every intermediate value (the softmax, log-probabilities, picked entries
// and unweighted loss) has no other reader and is not live-out, and
// neither x nor the labels are written in place. The reduction that
// follows (sum, mean, Σ loss / Σ w) stays as written.
//
// Semantics: equal for every label in [0, C) and, with ignore_index, for
// labels equal to it (loss 0; +0 where the unfused form gives ±0). A label
// outside [0, C) (undefined in ONNX) is a kiln::Error in the fused op,
// where take_along_axis counts a negative one from the end. Tolerance: the
// fused kernel computes log Σ exp(x - m) - (x[l] - m) where the unfused
// ops compute -(x[l] - (m + log Σ exp(x - m))): the same terms, rounded in
// another order, so a loss differs by at most a few ulps of
// max(|x[l] - m|, log Σ exp(x - m)) (the tests allow 1e-5 relative,
// 1e-6 absolute in f32).
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/ir/program.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/pass.h"

namespace kiln {

// Rewrites in `block` and every region nested in it, keeping the values in
// `keep` (fetched, live-out) as they are; returns the number of
// cross_entropy ops created.
std::size_t fuse_softmax_cross_entropy(Block& block, const ValueSet& keep = {},
                                       PassContext* ctx = nullptr);
inline std::size_t fuse_softmax_cross_entropy(Program& program, const ValueSet& keep = {}) {
  return fuse_softmax_cross_entropy(program.block(), keep);
}

// The "fuse_softmax_ce" pass; the "fuse" pass runs it first (before the
// elementwise fusion, which would take the neg and the mul).
std::unique_ptr<Pass> create_fuse_softmax_cross_entropy_pass();

}  // namespace kiln
