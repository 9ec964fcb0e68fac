// What the CPU's convolution kernels run fastest on, for the passes that
// choose layouts.
#pragma once

namespace kiln {

// Whether kiln.fused_conv2d runs at least as fast on NHWC (channels-last)
// data as on NCHW on this CPU build: true with oneDNN, whose NHWC
// primitives match its blocked ones and need no reorders around them;
// false without it (kiln's own kernels are NCHW; NHWC goes through copies).
bool cpu_convolutions_prefer_channels_last();

}  // namespace kiln
