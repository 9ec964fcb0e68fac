// fold_attention_transposes: the head transposes around attention go into
// the attention op's layout. A multi-head attention layer computes q, k and
// v as [B, L, E] (one GEMM), reshapes them to [B, L, H, D] and swaps axes 1
// and 2 for kiln.scaled_dot_product_attention's [B, H, L, D]; its out is
// swapped back before the output projection, and the gradient program
// repeats the swaps around the gradient op. Each swap is a full copy. This
// rewrite gives the op (and its gradient) layout "BLHD", which reads and
// writes [B, L, H, D] in place (kiln/dialect/attention_ops.h):
//
//   q = transpose(q0){[0, 2, 1, 3]} (same for k, v)
//   out, lse = scaled_dot_product_attention(q, k, v){layout = "BHLD"}
//   y = transpose(out){[0, 2, 1, 3]}
// →
//   y, lse = scaled_dot_product_attention(q0, k0, v0){layout = "BLHD"}
//
// and for the gradient op, whose out and dout operands are swapped the same
// way and whose dq, dk, dv the backward swaps back. It fires when all of q,
// k and v are such swaps of sources nothing writes in place, and the op's
// results are plain values (not live-out, written in place or held by
// another op). A reader of out (or dq, dk, dv) that is not a swap back gets
// one, and a swap of q, k or v that another op also reads stays: in such
// programs the rewrite trades transposes instead of removing them. What
// multi-head attention layers build loses all of them (eight per layer in
// training). Bit-identical: the kernels do the same arithmetic on rows at
// other addresses. For a CUDA target it folds only what the fused (flash)
// kernels run, which read BLHD in place (f32, bf16, f16; head dims up to
// 128): the cuBLAS path stages BLHD through BHLD copies, the transposes'
// work again.
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/ir/program.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/pass.h"

namespace kiln {

// Rewrites in `block` and every region nested in it, leaving ops with a
// result in `keep` (fetched, live-out) as they are, and those the kernel at
// `target` would not read in place; returns the number of attention ops
// (forward and gradient) that changed layout.
std::size_t fold_attention_transposes(Block& block, const ValueSet& keep = {},
                                      PassContext* ctx = nullptr, const Place& target = Place::cpu());
inline std::size_t fold_attention_transposes(Program& program, const ValueSet& keep = {}) {
  return fold_attention_transposes(program.block(), keep);
}

// The "fold_attention_transposes" pass; the "fuse" pass runs it first.
std::unique_ptr<Pass> create_fold_attention_transposes_pass();

}  // namespace kiln
