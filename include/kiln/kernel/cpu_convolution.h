// What the CPU's convolution kernels run fastest on, for the passes that
// choose layouts.
#pragma once

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

}  // namespace kiln
