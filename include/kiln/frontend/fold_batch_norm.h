// Folding an inference batch norm into the convolution before it, as
// inference engines do (Paddle's conv + batch-norm fuse pass, ONNX
// Runtime's Conv + BatchNormalization fusion): with g = scale / sqrt(var +
// epsilon) per output channel, bn(conv(x, w) + b) = conv(x, w·g) + (b −
// mean)·g + beta. The weights change, so it needs their values: it runs
// where a program meets its parameters (save_inference_model, the ONNX
// importer), not as a program pass.
#pragma once

#include "kiln/ir/program.h"
#include "kiln/runtime/scope.h"
#include "kiln/runtime/tensor.h"

namespace kiln {

// w [O, …] times g[o] per output channel and (bias − mean)·g + beta (bias
// absent: 0), computed in double and stored in w's dtype (f32 or f64). Every
// tensor on the CPU; the statistics [O] of w's dtype (the caller checks).
struct FoldedConv {
  Tensor weight, bias;
};
FoldedConv fold_batch_norm(const Tensor& w, const Tensor* bias, const Tensor& scale, const Tensor& beta,
                           const Tensor& mean, const Tensor& var, double epsilon);

// In an inference program `p`: each top-level kiln.conv2d (plus a channel
// bias: a [O] parameter reshaped to [O, 1, 1] or [1, O, 1, 1] and added, as
// the frontend's Conv2D adds it) whose result only a kiln.batch_norm with
// is_test reads (its other results unread), with its weight, bias and the
// norm's four operands builtin.parameter values whose tensors `params`
// holds (f32 or f64, on the CPU), becomes kiln.conv2d with a new
// weight parameter "<the norm's scale>.folded_weight" plus a channel bias
// "<…>.folded_bias" added (the pattern the fuse pass makes one
// kiln.fused_conv2d of). The new tensors are set in `folded`; parameters no
// op names any more leave p's table. Returns how many norms were folded.
int fold_batch_norms(Program& p, const Scope& params, Scope& folded);

}  // namespace kiln
