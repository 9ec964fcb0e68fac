// Batch_norm, layer_norm and rms_norm (fused): each normalization is one op
// whose kernel makes one pass per row (or per channel), with one fused
// gradient op (GradOf) computing every operand's gradient in one pass. The
// statistics the backward needs (mean / rstd, or the batch mean / invstd) are
// results of the forward op, as in Paddle. f32 and f64 (and 16-bit x where an
// op says so).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "kiln/dialect/grad_op.h"
#include "kiln/ir/mixed_half.h"

namespace kiln {

// The dtype of layer_norm's and rms_norm's per-row statistics (mean, rstd)
// for x of `dt`: f32 for bf16 / f16 (a rounded mean or rstd would skew the
// gradient's normalized x; ONNX's stash_type and PyTorch keep them f32),
// else dt.
inline DataType norm_stats_dtype(DataType dt) {
  return dt == DataType::BFloat16 || dt == DataType::Float16 ? DataType::Float32 : dt;
}

// (y, mean, rstd) = kiln.layer_norm(x, weight, bias) {begin_norm_axis, epsilon}
//   x is seen as [M, N]: M = prod(dims < begin_norm_axis) rows of
//   N = prod(dims >= begin_norm_axis) elements (begin_norm_axis in
//   [-rank, rank), negative counts from the end; 0 normalizes all of x).
//   y[m, n] = (x[m, n] - mean[m]) · rstd[m] · weight[n] + bias[n], with
//   mean[m] the row's mean and rstd[m] = 1 / sqrt(var[m] + epsilon) (biased
//   variance); mean and rstd are [M] (f32 or f64, x's dtype) and are what the
//   gradient op reads. weight and bias are required, shaped like the
//   normalized dims (x's dims from begin_norm_axis on) or flattened to [N];
//   a frontend without them passes ones / zeros (nn::functional::layer_norm
//   does). epsilon > 0. Gradients flow from y only (mean and rstd are saved
//   statistics; grads fed into them are ignored).
struct LayerNormOp : Op<LayerNormOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.layer_norm";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 3, num_results = 3;
  KILN_ATTRIBUTES((std::int64_t, begin_norm_axis), (double, epsilon));
  static void build(Builder& b, OperationArgument& arg, Value x, Value weight, Value bias,
                    std::int64_t begin_norm_axis = -1, double epsilon = 1e-5);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // layer_norm_grad(x, weight, mean, rstd, dy) -> (dx, dweight, dbias): one
  // pass per row for dx; dweight / dbias accumulated over the rows.
  struct Grad : GradSpec<5, 0, 1, 1> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// (y, rstd) = kiln.rms_norm(x, weight) {begin_norm_axis, epsilon}
//   rows as layer_norm's; y[m, n] = x[m, n] · rstd[m] · weight[n] with
//   rstd[m] = 1 / sqrt(mean_n(x[m, n]²) + epsilon), rstd [M]. weight shaped
//   like the normalized dims or [N]. epsilon > 0. Gradients flow from y.
struct RmsNormOp : Op<RmsNormOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.rms_norm";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 2;
  KILN_ATTRIBUTES((std::int64_t, begin_norm_axis), (double, epsilon));
  static void build(Builder& b, OperationArgument& arg, Value x, Value weight,
                    std::int64_t begin_norm_axis = -1, double epsilon = 1e-6);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // rms_norm_grad(x, weight, rstd, dy) -> (dx, dweight)
  struct Grad : GradSpec<4, 0, 1> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// The dtype of batch_norm's and fused_batch_norm's per-channel operands
// (scale, bias, running_mean, running_var), saved statistics and dscale /
// dbias for x of `dt`: f32 for bf16 / f16 x (cuDNN's and PyTorch's mixed
// batch norm: the parameters and running statistics stay f32, y and dx
// are x's dtype), else dt.
inline DataType batch_norm_param_dtype(DataType dt) { return norm_stats_dtype(dt); }

// (y, running_mean_out, running_var_out, saved_mean, saved_invstd) =
//   kiln.batch_norm(x, scale, bias, running_mean, running_var)
//   {momentum, epsilon, is_test}
//   x [N, C, ...] (rank >= 2, channels on axis 1); scale, bias, running_mean,
//   running_var [C]. Training (is_test false): per channel, the batch mean
//   and biased variance over N and the trailing dims normalize x,
//   y = (x - mean) · invstd · scale + bias with invstd = 1/sqrt(var + eps),
//   and the running statistics are updated IN PLACE (results 1, 2 alias
//   operands 3, 4): running = momentum · running + (1 - momentum) · batch,
//   with the unbiased batch variance for running_var (as PyTorch; the biased
//   one when a channel has a single element). is_test: the running
//   statistics normalize x and are passed through unchanged. saved_mean /
//   saved_invstd [C] are the statistics used (batch or running), read by the
//   gradient op. momentum in [0, 1], epsilon > 0. running_mean / running_var
//   must be mutable tensors (not vtensors). Gradients flow from y to x,
//   scale and bias; the running statistics get none. data_format "NCHW"
//   (default: channels on axis 1) or "NHWC" (x rank 4, [N, H, W, C]:
//   channels last; CPU only, what the channels_last pass writes; the
//   gradient op takes the same layout). x may be bf16 or f16 with the
//   [C] operands f32 (batch_norm_param_dtype): y is then x's dtype, the
//   saved statistics f32, and the gradient's dy and dx x's dtype, dscale
//   and dbias f32; the kernels compute in f32. Any other mix of dtypes is
//   a kiln::Error naming the operand.
struct BatchNormOp : Op<BatchNormOp, Inplace, InferMetaInterface, VjpInterface, MixedHalfInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.batch_norm";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 5, num_results = 5;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 2> inplace_map{
      {{1, 3}, {2, 4}}};
  // x may be bf16 / f16 beside f32 parameters; y follows it.
  static constexpr std::array<std::uint32_t, 1> mixed_half_operands{0}, mixed_half_results{0};
  KILN_ATTRIBUTES((double, momentum), (double, epsilon), (bool, is_test), (std::string, data_format));
  // A program saved before `data_format` existed loads as NCHW.
  static std::vector<NamedAttribute> attribute_defaults() {
    return {{"data_format", StrAttribute::get("NCHW")}};
  }
  static void build(Builder& b, OperationArgument& arg, Value x, Value scale, Value bias,
                    Value running_mean, Value running_var, double momentum = 0.9,
                    double epsilon = 1e-5, bool is_test = false, std::string data_format = "NCHW");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // batch_norm_grad(x, scale, saved_mean, saved_invstd, dy) -> (dx, dscale,
  // dbias); training: dx = scale·invstd·(dy - mean(dy) - x̂·mean(dy·x̂)) per
  // channel (x̂ the normalized x); is_test: dx = scale·invstd·dy.
  struct Grad : GradSpec<5, 0, 1, 1> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// kiln.fused_batch_norm: kiln.batch_norm (its operands, results, attributes
// and in-place running statistics) with an activation applied to y in the
// same pass, as Paddle's fused batch_norm_act: activation "relu" (as
// kiln.relu) or "relu6" (as kiln.clip to [0, 6]). Its gradient op reads
// bias too and recomputes the pre-activation from x and the saved
// statistics, so the activation's gradient needs no tensor of its own:
// fused_batch_norm_grad(x, scale, bias, saved_mean, saved_invstd, dy) ->
// (dx, dscale, dbias), each result the bits batch_norm_grad gives for the
// activation's gradient of dy. The fuse pass builds both from batch_norm +
// relu / clip(0, 6) and their gradients (fuse_batch_norm_activation), for
// CPU and CUDA targets. Kernels: CPU (NCHW and NHWC) and CUDA (NCHW), f32
// and f64, and bf16 / f16 x with f32 parameters as batch_norm's.
struct FusedBatchNormOp : Op<FusedBatchNormOp, Inplace, InferMetaInterface, VjpInterface, MixedHalfInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.fused_batch_norm";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 5, num_results = 5;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 2> inplace_map{
      {{1, 3}, {2, 4}}};
  // x may be bf16 / f16 beside f32 parameters; y follows it.
  static constexpr std::array<std::uint32_t, 1> mixed_half_operands{0}, mixed_half_results{0};
  KILN_ATTRIBUTES((double, momentum), (double, epsilon), (bool, is_test), (std::string, data_format),
                  (std::string, activation));
  static void build(Builder& b, OperationArgument& arg, Value x, Value scale, Value bias,
                    Value running_mean, Value running_var, double momentum, double epsilon, bool is_test,
                    std::string data_format, std::string activation);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  struct Grad : GradSpec<6, 0, 1, 2> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

}  // namespace kiln
