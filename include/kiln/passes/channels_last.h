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
//
// Why NHWC and not oneDNN's blocked nChw16c between convolutions (what
// Paddle's and TensorFlow's oneDNN layout passes keep): on oneDNN 2.6 only
// its Winograd convolutions want the blocked layout, and a ResNet-18 body run
// blocked end to end gains 1-3%. Its 19 convolutions after the stem timed
// alone (Zen 5, AVX-512), NHWC as kiln runs it (Winograd's result reordered
// back, its input read from the kept blocked copy) against nChw16c with no
// reorders, summed: batch 1 10.4 / 10.2 ms at one thread, 5.5 / 5.4 at two;
// batch 8 85.5 / 83.2 and 47.8 / 46.6. Blocked saves the reorders (0-13% of a
// Winograd convolution) but runs the stride-2 3x3 ones 18-46% slower
// (oneDNN's blocked jit kernel against its NHWC brgconv). The other CNNs
// measured (MobileNetV2, EfficientNet-B0, ShuffleNetV2, ConvNeXt) have no
// Winograd convolution and run NHWC with no reorder at all.
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
