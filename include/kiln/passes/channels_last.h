// channels_last: convolutions and the ops between them in NHWC, with
// transposes only where a value enters or leaves that region. oneDNN's
// convolutions run as fast on NHWC as on its blocked layouts, but a
// convolution on NCHW data pays a reorder of its input and of its output
// each run (measured on MobileNet's depthwise convolutions: 3-5x the
// convolution itself). This pass is TensorFlow's layout optimizer done
// kiln's way: the program stays NCHW where a user sees it (feeds, fetches,
// any op the pass does not know), and the ops it converts say their layout
// in their types:
//
//   y = fused_conv2d(x, w, b)                 [N, C, H, W]
//   z = relu(add(y, r))
// →
//   xt = transpose(x){[0, 2, 3, 1]}           [N, H, W, C]
//   y' = fused_conv2d(xt, w, b){data_format = "NHWC"}
//   z' = relu(add(y', transpose(r){[0, 2, 3, 1]}))
//   z  = transpose(z'){[0, 3, 1, 2]}          only if something still reads z
//
// Converted: kiln.conv2d and kiln.fused_conv2d (f32, rank 4); kiln.max_pool2d
// and kiln.batch_norm of an NHWC value; the unary and binary elementwise
// ops and their gradients (kiln/dialect/fused_ops.h's families, and
// kiln.clip), kiln.add_n and kiln.concat once one operand is already NHWC
// (or an elementwise op's operand is a transpose of NHWC data back to
// NCHW), their other rank-4 operands transposed (one element operands as
// they are, a [C, 1, 1] one read as [C]); kiln.mean / sum /
// max over rank 4 (axes renumbered; without keepdim only when the kept axes
// stay in order); a kiln.transpose of a converted value reads its NHWC twin
// (and disappears when it was the transpose to NHWC). In a training
// program the gradient ops follow: conv2d_grad and batch_norm_grad once
// their x or dout is NHWC, max_pool2d_grad once its x is (their data
// operands and results NHWC, a weight and its gradient as they are), so the
// backward pass runs in the forward's layout. Each value gets at most one transpose
// each way.
//
// Results agree with the NCHW program up to summation order (oneDNN's NHWC
// and blocked kernels, and batch norm's per-channel sums, accumulate in
// other orders).
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/ir/program.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/pass.h"

namespace kiln {

// Converts the top level of `block` (regions keep NCHW); values in `keep`
// (fetched, live-out) keep their NCHW form. Returns the number of
// convolutions (conv2d, fused_conv2d) and conv2d gradients converted;
// with `force`, converts whether or not this
// build's convolutions prefer NHWC (cpu_convolutions_prefer_channels_last).
std::size_t convert_to_channels_last(Block& block, const ValueSet& keep = {},
                                     PassContext* ctx = nullptr, bool force = false);

// The "channels_last" pass (CPU targets); "fuse" runs it after
// fuse_conv_epilogue.
std::unique_ptr<Pass> create_channels_last_pass();

}  // namespace kiln
