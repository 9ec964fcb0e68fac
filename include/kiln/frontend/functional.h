// kiln::nn::functional — the stateless forms of the layers and losses (seed
// 001 §1.2, `paddle.nn.functional`): each builds its ops at the end of the
// current main program (ProgramGuard) and returns the result. Inputs must be
// values of that program (kiln::Error naming the function otherwise).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/ir/value.h"

namespace kiln::nn {

// How a loss reduces its per-element values.
enum class Reduction { Mean, Sum, None };

namespace functional {

// x · weight (+ bias): weight [in, out] (Paddle layout), bias [out] or null.
Value linear(Value x, Value weight, Value bias = {});
Value relu(Value x);
// approximate: the tanh form (else exact erf, PyTorch's default).
Value gelu(Value x, bool approximate = false);
Value tanh(Value x);
Value sigmoid(Value x);
Value softmax(Value x, std::int64_t axis = -1);
// training: keep with probability 1 - p, scaled by 1 / (1 - p); else x.
Value dropout(Value x, double p = 0.5, bool training = true, std::int64_t seed = 0);
// weight [num, dim], ids i32/i64 → [ids…, dim].
Value embedding(Value ids, Value weight, std::int64_t padding_idx = -1);
// Normalizes over the trailing normalized_shape.size() axes (which must
// equal normalized_shape): (x - mean) / √(var + eps) · weight + bias
// (biased variance, as PyTorch); weight / bias (shaped like
// normalized_shape) may be null; eps > 0. One fused kiln.layer_norm op (a
// null weight / bias becomes kiln.full ones / zeros).
Value layer_norm(Value x, const std::vector<std::int64_t>& normalized_shape, Value weight = {},
                 Value bias = {}, double eps = 1e-5);

// Root-mean-square normalization over the trailing normalized_shape axes:
// x / √(mean(x²) + eps) · weight (weight shaped like normalized_shape, or
// null for none). One fused kiln.rms_norm op.
Value rms_norm(Value x, const std::vector<std::int64_t>& normalized_shape, Value weight = {},
               double eps = 1e-6);
// Batch normalization of x [N, C, ...] over N and the trailing axes (Paddle's
// F.batch_norm): training uses the batch statistics and updates
// running_mean / running_var [C] in place (running = momentum · running +
// (1 - momentum) · batch); otherwise the running statistics normalize x.
// weight / bias [C] may be null (ones / zeros). Marks the op is_test when
// not training, so clone_for_test switches a training op to inference.
Value batch_norm(Value x, Value running_mean, Value running_var, Value weight = {},
                 Value bias = {}, bool training = false, double momentum = 0.9,
                 double eps = 1e-5);

// 2-D convolution, NCHW: x [N, C, H, W], weight [O, C / groups, kH, kW],
// bias [O] or null. strides / dilations: 1 or 2 numbers; paddings: 1, 2
// (symmetric per axis) or 4 (top, bottom, left, right) numbers.
Value conv2d(Value x, Value weight, Value bias = {}, std::vector<std::int64_t> strides = {1},
             std::vector<std::int64_t> paddings = {0}, std::vector<std::int64_t> dilations = {1},
             std::int64_t groups = 1);
// The transpose (gradient) of conv2d: weight [C, O / groups, kH, kW].
Value conv2d_transpose(Value x, Value weight, Value bias = {},
                       std::vector<std::int64_t> strides = {1},
                       std::vector<std::int64_t> paddings = {0},
                       std::vector<std::int64_t> output_padding = {0},
                       std::vector<std::int64_t> dilations = {1}, std::int64_t groups = 1);
// Pooling, NCHW; strides default to the kernel size. avg_pool2d's
// exclusive: the padding is not counted in a window's average (Paddle's
// default; PyTorch's count_include_pad=True is exclusive = false).
Value max_pool2d(Value x, std::vector<std::int64_t> kernel_size,
                 std::vector<std::int64_t> strides = {}, std::vector<std::int64_t> paddings = {0},
                 bool ceil_mode = false);
Value avg_pool2d(Value x, std::vector<std::int64_t> kernel_size,
                 std::vector<std::int64_t> strides = {}, std::vector<std::int64_t> paddings = {0},
                 bool ceil_mode = false, bool exclusive = true);
Value adaptive_avg_pool2d(Value x, std::vector<std::int64_t> output_size);
// Region pooling (Paddle's vision.ops.roi_align, torchvision's roi_align
// with aligned = true): x [N, C, H, W], boxes [R, 4] as (x1, y1, x2, y2) in
// image units, batch_indices [R] (the image of each box) -> [R, C, oh, ow];
// output_size 1 or 2 numbers; sampling_ratio <= 0 samples adaptively. See
// kiln.roi_align (kiln/dialect/pool_ops.h). x gets a gradient.
Value roi_align(Value x, Value boxes, Value batch_indices, std::vector<std::int64_t> output_size,
                double spatial_scale = 1.0, std::int64_t sampling_ratio = 0, bool aligned = true);
// Joins axes start_axis..stop_axis into one (PyTorch's default start 1
// keeps the batch axis).
Value flatten(Value x, std::int64_t start_axis = 1, std::int64_t stop_axis = -1);

// softmax(q · kᵀ · scale (+ causal mask)) · v over q [B, H, Lq, D],
// k [B, H, Lk, D], v [B, H, Lk, Dv] (scale 0: 1 / √D); one fused op. With
// key_lengths (int32 or int64 [B]), batch b's rows see only its first
// key_lengths[b] keys: a right-padded batch's key padding mask. attn_mask
// (PyTorch's): bool (true: the key takes part) or q's dtype (added to the
// scores, and given a gradient), broadcasting to [B, H, Lq, Lk].
// enable_gqa (PyTorch's): k and v may have Hk heads, Hk dividing H
// (grouped-query attention; query head h reads k / v head h / (H / Hk));
// without it, head counts that differ are a kiln::Error. dropout_p
// (PyTorch's; in [0, 1)) drops attention probabilities, the kept ones
// scaled by the inverse keep rate (1 / (1 - dropout_p)), as a training run would (the for-test
// clone turns it off); which drop is new each run (a kiln.random_key op
// with `seed`: 0 draws from the process-wide generator, another value the
// same mask every run) and the gradient drops the same ones.
Value scaled_dot_product_attention(Value q, Value k, Value v, bool causal = false,
                                   double scale = 0.0, Value key_lengths = Value(),
                                   Value attn_mask = Value(), bool enable_gqa = false,
                                   double dropout_p = 0.0, std::int64_t seed = 0);

// (input - label)²; input and label of one shape (kiln::Error otherwise).
Value mse_loss(Value input, Value label, Reduction reduction = Reduction::Mean);
// |input - label|.
Value l1_loss(Value input, Value label, Reduction reduction = Reduction::Mean);
// Softmax cross-entropy with hard int64/int32 labels: logits [N, C], label
// [N] or [N, 1] (kiln.cross_entropy: no softmax kept); None gives [N, 1] (0 on
// rows labelled ignore_index). Mean divides the sum by the number of rows
// not ignored (as PyTorch; NaN when every row is ignored). Logits [..., C]
// take a label of their leading dims, each position a row: a language
// model's [B, L, V] against [B, L] needs no reshape to [B·L, V] (a view,
// which would keep the logits' buffer from their gradient).
Value cross_entropy(Value logits, Value label, Reduction reduction = Reduction::Mean,
                    std::int64_t ignore_index = -100);

}  // namespace functional
}  // namespace kiln::nn
