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

}  // namespace kiln
