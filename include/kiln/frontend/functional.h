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

// (input - label)²; input and label of one shape (kiln::Error otherwise).
Value mse_loss(Value input, Value label, Reduction reduction = Reduction::Mean);
// |input - label|.
Value l1_loss(Value input, Value label, Reduction reduction = Reduction::Mean);
// Softmax cross-entropy with hard int64/int32 labels: logits [N, C], label
// [N] or [N, 1] (kiln.softmax_with_cross_entropy); None gives [N, 1]. Mean
// divides by N (rows labelled ignore_index count, with loss 0).
Value cross_entropy(Value logits, Value label, Reduction reduction = Reduction::Mean,
                    std::int64_t ignore_index = -100);

}  // namespace functional
}  // namespace kiln::nn
