// The AVX-512 kernel of kiln.pointwise_depthwise_conv2d (f32, NHWC): an
// inverted residual block's expansion (a 1x1 convolution to e channels,
// bias, activation) and its depthwise convolution (bias, activation) in
// one pass over each image's rows. The expanded rows a depthwise output
// row reads live in a ring of kh rows (an L2-sized buffer per thread), so
// the e-channel activation the two convolutions would pass between them —
// the largest tensor MobileNetV2 has — is never written out.
#pragma once

#include "onednn.h"
#include "kiln/dialect/conv_ops.h"

namespace kiln::cpu {

// One pointwise + depthwise pair in NHWC: x [n, h, w, c], pw [e, c] (the
// 1x1 weights), pw_bias [e], dw [e, kh, kw], dw_bias [e], out [n, ho, wo,
// e]; `expand` is the 1x1's geometry, `depthwise` the other's. The
// weights' identities (which contents they hold; buffer 0: unknown) let
// the kernel keep them packed across calls.
struct PointwiseDepthwise {
  const float *x, *pw, *pw_bias, *dw, *dw_bias;
  float* out;
  Conv2dGeometry expand, depthwise;
  onednn::ConvActivation expand_act, act;
  onednn::ContentsIdentity pw_weights, dw_weights;
};

// Whether pointwise_depthwise_nhwc computes this pair on this CPU:
// AVX-512, e a multiple of 16, a kernel of at most 7x7, no dilation.
bool pointwise_depthwise_fits(const Conv2dGeometry& expand, const Conv2dGeometry& depthwise);

// out = act(depthwise(expand_act(x · pwᵀ + pw_bias)) + dw_bias), rows of
// images split across the kernel's threads. Every value is one fixed
// sequence of fused multiply-adds (input channels, then taps, in order),
// so the bits do not depend on the thread count; they differ from the two
// convolutions run one after the other (oneDNN's sums) by f32's rounding.
void pointwise_depthwise_nhwc(const PointwiseDepthwise& p);

}  // namespace kiln::cpu
