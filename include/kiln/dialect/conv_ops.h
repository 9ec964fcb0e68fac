// Conv2d and conv2d_transpose (NCHW). The bias is not part of either op: add
// it with a broadcasting kiln.add ([O] reshaped to [1, O, 1, 1]).
//
// Attributes shared by both ops:
//   strides [sh, sw] (> 0), paddings [ph, pw] or [top, bottom, left, right]
//   (>= 0), dilations [dh, dw] (> 0), groups (> 0, dividing both channel
//   counts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dialect/grad_op.h"
#include "kiln/support/dims.h"

namespace kiln {

// out = kiln.conv2d(x, w): x [N, C, H, W], w [O, C / groups, kh, kw] ->
// out [N, O, Ho, Wo], Ho = (H + pt + pb - dh·(kh - 1) - 1) / sh + 1 (Wo
// alike). Cross-correlation, as PyTorch's Conv2d. f32, f64; bf16 and f16
// accumulated in f32 (on the CPU, bf16 runs oneDNN's native bf16 kernels
// where the CPU has AVX512-BF16, else the f32 kernel on widened operands,
// as f16 does).
// data_format "NCHW" (default) or "NHWC": x [N, H, W, C] -> out [N, Ho, Wo,
// O], w as in NCHW; CPU only, what the channels_last pass writes in a
// training program (its gradient op takes the same layout).
struct Conv2dOp : Op<Conv2dOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.conv2d";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, strides), (std::vector<std::int64_t>, paddings),
                  (std::vector<std::int64_t>, dilations), (std::int64_t, groups),
                  (std::string, data_format));
  // A program saved before `data_format` existed loads as NCHW.
  static std::vector<NamedAttribute> attribute_defaults() {
    return {{"data_format", StrAttribute::get("NCHW")}};
  }
  static void build(Builder& b, OperationArgument& arg, Value x, Value w,
                    std::vector<std::int64_t> strides = {1, 1},
                    std::vector<std::int64_t> paddings = {0, 0},
                    std::vector<std::int64_t> dilations = {1, 1}, std::int64_t groups = 1,
                    std::string data_format = "NCHW");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // conv2d_grad(x, w, dout) -> (dx, dw): dw = Σ_images dout · colᵀ,
  // dx = col2im(wᵀ · dout); x, dout and dx in the op's data_format.
  struct Grad : GradSpec<3, 0, 1> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// out = kiln.conv2d_transpose(x, w): the gradient of conv2d with respect to
// its input, as an op. x [N, C_in, H, W], w [C_in, C_out / groups, kh, kw]
// -> out [N, C_out, Ho, Wo], Ho = (H - 1)·sh - pt - pb + dh·(kh - 1) +
// output_padding[0] + 1 (Wo alike). output_padding [oh, ow] must be smaller
// than the stride or the dilation, as in PyTorch. f32, f64.
struct Conv2dTransposeOp
    : Op<Conv2dTransposeOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.conv2d_transpose";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, strides), (std::vector<std::int64_t>, paddings),
                  (std::vector<std::int64_t>, output_padding),
                  (std::vector<std::int64_t>, dilations), (std::int64_t, groups));
  static void build(Builder& b, OperationArgument& arg, Value x, Value w,
                    std::vector<std::int64_t> strides = {1, 1},
                    std::vector<std::int64_t> paddings = {0, 0},
                    std::vector<std::int64_t> output_padding = {0, 0},
                    std::vector<std::int64_t> dilations = {1, 1}, std::int64_t groups = 1);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // conv2d_transpose_grad(x, w, dout) -> (dx, dw): dx = conv2d(dout, w),
  // dw = Σ_images x · col(dout)ᵀ.
  struct Grad : GradSpec<3, 0, 1> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// out = kiln.fused_conv2d(x, w, bias[, residual]) {strides, paddings,
// dilations, groups, activation}: activation(conv2d(x, w) + bias
// [+ residual]), bias [O] added per output channel, the optional residual
// typed like out (a ResNet block's skip connection, added before its ReLU:
// oneDNN's sum post-op, ONNX Runtime's FusedConv Z; fuse_conv_residual
// builds it); activation "none", "relu", "relu6" (min(max(·, 0), 6), what
// exporters write as Clip(0, 6)) or "silu" (z·sigmoid(z), exporters' Sigmoid
// and Mul). One kernel: each image's GEMM result gets its bias and
// activation while it is still in cache, instead of more passes over the
// output (what ONNX Runtime's FusedConv does; the fuse_conv_epilogue pass
// builds it). Attributes and x / w as conv2d's.
// f32, f64, bf16 and f16 as conv2d. Its gradient is composed: the activation's gradient (relu's and
// relu6's from the output; silu's from the pre-activation, computed again),
// the bias's as its sum over N, H, W, and conv2d's gradient op.
// data_format "NCHW" (default) or "NHWC": x [N, H, W, C] -> out [N, Ho, Wo,
// O] with w as in NCHW (the channels_last pass writes it where the CPU's
// convolutions run faster on channels-last data; its gradient op takes the
// same layout). weights_trained (default false): w changes between runs
// (an optimizer updates it in place; fuse_conv_epilogue sets it in a
// training program), so the CPU kernel never picks Winograd, whose weight
// transform pays off only across runs with the same weights.
struct FusedConv2dOp : Op<FusedConv2dOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.fused_conv2d";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 3, num_results = 1, num_optional_operands = 1;  // + residual
  KILN_ATTRIBUTES((std::vector<std::int64_t>, strides), (std::vector<std::int64_t>, paddings),
                  (std::vector<std::int64_t>, dilations), (std::int64_t, groups),
                  (std::string, activation), (std::string, data_format), (bool, weights_trained));
  // A program saved before `data_format` (`weights_trained`) existed loads as NCHW (false).
  static std::vector<NamedAttribute> attribute_defaults() {
    return {{"data_format", StrAttribute::get("NCHW")}, {"weights_trained", BoolAttribute::get(false)}};
  }
  static void build(Builder& b, OperationArgument& arg, Value x, Value w, Value bias,
                    std::vector<std::int64_t> strides = {1, 1},
                    std::vector<std::int64_t> paddings = {0, 0},
                    std::vector<std::int64_t> dilations = {1, 1}, std::int64_t groups = 1,
                    std::string activation = "none", std::string data_format = "NCHW",
                    Value residual = Value(), bool weights_trained = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// out = kiln.channel_scaled_conv2d(x, scale, w, bias[, residual]) {as
// fused_conv2d}: fused_conv2d(x ⊙ scale, w, bias[, residual]), scale one
// factor per image and input channel, broadcast over H and W: [N, C, 1, 1]
// in NCHW, [N, 1, 1, C] in NHWC (or N = 1: the same for every image), x's
// dtype. A squeeze-and-excitation
// block's rescaled activations feeding its projection (EfficientNet,
// MobileNetV3): the fuse pass builds it from kiln.mul and a fused_conv2d
// that alone reads the product, for inference (w not trained), where the
// CPU kernel folds each image's factors into the weights
// (cpu_folds_channel_scale, kiln/kernel/cpu_convolution.h: a pointwise
// NHWC f32 convolution over images of 4·O pixels and more): x (W ⊙ s_n)ᵀ
// = (x ⊙ s_n) Wᵀ, O·C products per block of pixels instead of H·W·C, and
// x ⊙ scale is never written. Its sums then round differently from the
// unfused ops' (by f32's few ulps of a dot product); elsewhere the kernel
// scales x first and matches the unfused ops bit for bit. f32, f64. No
// gradient: a training program's projection reads the product for its
// weight gradient, so the pass never builds it there.
struct ChannelScaledConv2dOp : Op<ChannelScaledConv2dOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.channel_scaled_conv2d";
  static constexpr int num_operands = 4, num_results = 1, num_optional_operands = 1;  // + residual
  using Attributes = FusedConv2dOp::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value x, Value scale, Value w, Value bias,
                    Attributes attrs, Value residual = Value());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// (out, mean) = kiln.fused_conv2d_mean(x, w, bias) {as fused_conv2d, with
// data_format "NHWC"}: fused_conv2d's result and its mean over H and W,
// [N, 1, 1, O] (kiln.mean(out, {1, 2}, keepdim)): the squeeze of a
// squeeze-and-excitation block, read beside the activation it gates. The
// fuse pass builds it from an NHWC f32 fused_conv2d and such a mean of its
// result, for inference (w not trained), where H·W > 1 and O > 1: there
// the CPU kernel sums each block of pixel rows in the pass that applies the
// activation to it (out is not read a second time) and gives kiln.mean's
// bits. f32. No gradient.
struct FusedConv2dMeanOp : Op<FusedConv2dMeanOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.fused_conv2d_mean";
  static constexpr int num_operands = 3, num_results = 2;
  using Attributes = FusedConv2dOp::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value x, Value w, Value bias, Attributes attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// out = kiln.pointwise_depthwise_conv2d(x, pw, pw_bias, dw, dw_bias)
// {strides, paddings, dilations, pointwise_activation, activation}: an
// inverted residual block's expansion and depthwise convolution, NHWC:
// fused_conv2d(fused_conv2d(x, pw, pw_bias, activation =
// pointwise_activation), dw, dw_bias, groups = E, activation) with x [N,
// H, W, C], pw [E, C, 1, 1], dw [E, 1, kh, kw], the biases [E]; the
// attributes are the depthwise convolution's. The fuse pass builds it
// from two such fused_conv2d where the first's result is read by the
// second alone, for inference (weights not trained), where the CPU kernel
// computes the pair in one pass (cpu_fuses_pointwise_depthwise,
// kiln/kernel/cpu_convolution.h): the expanded rows a depthwise row needs
// are computed into a small ring, so the E-channel tensor between them
// (MobileNetV2's largest) is never written. Its sums then round
// differently from oneDNN's (f32's few ulps); elsewhere the kernel runs
// the two convolutions and gives their bits. f32, f64. No gradient.
struct PointwiseDepthwiseConv2dOp
    : Op<PointwiseDepthwiseConv2dOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.pointwise_depthwise_conv2d";
  static constexpr int num_operands = 5, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, strides), (std::vector<std::int64_t>, paddings),
                  (std::vector<std::int64_t>, dilations), (std::string, pointwise_activation),
                  (std::string, activation));
  static void build(Builder& b, OperationArgument& arg, Value x, Value pw, Value pw_bias, Value dw, Value dw_bias,
                    Attributes attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // The two fused_conv2d it stands for (data_format NHWC, weights not trained).
  static FusedConv2dOp::Attributes pointwise_attrs(const Attributes& a);
  static FusedConv2dOp::Attributes depthwise_attrs(const Attributes& a, std::int64_t channels);
};

// The geometry of one conv2d: what the kernels and InferMeta share. For
// conv2d_transpose it describes the conv2d it is the input gradient of
// (c/h/w: the transpose's output, o/ho/wo: its input).
struct Conv2dGeometry {
  std::int64_t n = 0, c = 0, h = 0, w = 0;   // conv input
  std::int64_t o = 0, ho = 0, wo = 0;        // conv output
  std::int64_t kh = 0, kw = 0;
  std::int64_t sh = 1, sw = 1, pt = 0, pb = 0, pl = 0, pr = 0, dh = 1, dw = 1, groups = 1;
};

namespace conv {
// [pt, pb, pl, pr] from paddings of 2 or 4; kiln::Error naming `op` otherwise.
std::array<std::int64_t, 4> paddings4(std::string_view op, const std::vector<std::int64_t>& p);
// kiln::Error naming `op` unless `v` holds two entries, each >= min.
void require_pair(std::string_view op, std::string_view what, const std::vector<std::int64_t>& v,
                  std::int64_t min);
// Output extent of a conv along one axis, -1 when `in` is -1; kiln::Error
// naming `op` when the dilated kernel is larger than the padded input.
std::int64_t conv_out(std::string_view op, std::string_view axis, std::int64_t in, std::int64_t k,
                      std::int64_t s, std::int64_t p0, std::int64_t p1, std::int64_t d);
// The geometry of conv2d(x, w) at run time, every kernel's check:
// kiln::Error naming `op` and both shapes unless x and w have rank 4 and
// channels that fit `groups`.
Conv2dGeometry geometry(std::string_view op, const Dims& x, const Dims& w,
                        const std::vector<std::int64_t>& strides,
                        const std::vector<std::int64_t>& paddings,
                        const std::vector<std::int64_t>& dilations, std::int64_t groups);
// kiln::Error naming `op` unless a gradient's dout has the forward result's
// dims `want`.
void check_dout(std::string_view op, const Dims& dout, const Dims& want);
}  // namespace conv

}  // namespace kiln
