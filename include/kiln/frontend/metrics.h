// Evaluation metrics built into the program (Paddle's paddle.static.accuracy,
// seed 001 §1): ordinary ops at the end of the current main program, so the
// metric is fetched with the loss, from the training program or its
// clone_for_test copy.
#pragma once

#include <cstdint>

#include "kiln/ir/value.h"

namespace kiln::nn::functional {

// Top-k accuracy: the fraction of the N rows of `input` (logits or
// probabilities [N, C], f32 / f64 / i32 / i64) whose label (i32 / i64, [N] or
// [N, 1]) is among the row's k largest entries. An f32 scalar (rank 0) in
// [0, 1]. Ties among entries are broken toward the lower class index (as
// kiln.topk), so with k = 1 a row whose largest value appears twice counts as
// correct only for the first of them. Built from topk, equal, cast, sum and
// mean. kiln::Error naming `accuracy`: input not rank 2, label not integer or
// not [N] / [N, 1] (N, C compared when known), k <= 0 or k > C, values not of
// the current main program.
Value accuracy(Value input, Value label, std::int64_t k = 1);

}  // namespace kiln::nn::functional
