// What the CPU's convolution kernels run fastest on, for the passes that
// choose layouts and fusions.
#pragma once

#include "kiln/dialect/conv_ops.h"

namespace kiln {

// Whether kiln.fused_conv2d runs at least as fast on NHWC (channels-last)
// data as on NCHW on this CPU build: true with oneDNN, whose NHWC
// primitives match its blocked ones and need no reorders around them;
// false without it (kiln's own kernels are NCHW; NHWC goes through copies).
bool cpu_convolutions_prefer_channels_last();

// Whether bf16 convolutions run natively on this CPU (oneDNN's AVX512-BF16
// or AMX kernels, about twice its f32 speed), so the passes treat them as
// they treat f32 ones; false where bf16 goes through the f32 kernels.
bool cpu_convolutions_compute_bf16();

// Whether kiln.channel_scaled_conv2d's f32 NHWC kernel folds each image's
// factors into the weights for geometry g (g.n unused): g is pointwise
// (1x1, stride 1, unpadded, ungrouped) and an image has at least 4·o
// pixels, where scaling o·c weights per block costs little beside the
// h·w·c multiplications it saves. Elsewhere the kernel writes x ⊙ scale
// first, as the unfused ops would (measured on EfficientNet-B0: 14x14 with
// 80 or 112 outputs ran 5-10% slower folded, 28x28 and up 10-40% faster),
// so the fuse pass builds the op only where this holds.
bool cpu_folds_channel_scale(const Conv2dGeometry& g);

// Whether the fuse pass makes the 1x1 expansion `expand` and the
// depthwise convolution `depthwise` after it one
// kiln.pointwise_depthwise_conv2d: where its f32 kernel computes them in
// one pass on this CPU (AVX-512; a multiple of 16 expanded channels; a
// kernel of at most 7x7; no dilation) and an image's expanded tensor is
// 4 MiB or more. There the two convolutions pass it through memory
// (MobileNetV2's 112x112 block, 96 channels: 3.7 ms fused against 4.6 at
// batch 8 and one thread, 2.2 against 3.0 at two, 0.33 against 0.47 at
// batch 1). Smaller, it stays in a cache between them, and oneDNN's
// kernels beat the one pass (the 56x56 blocks: 2.9 ms fused against 2.4).
bool cpu_fuses_pointwise_depthwise(const Conv2dGeometry& expand, const Conv2dGeometry& depthwise);

}  // namespace kiln
