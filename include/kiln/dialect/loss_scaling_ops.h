// Dynamic loss scaling (Paddle's check_finite_and_unscale and
// update_loss_scaling ops; PyTorch's GradScaler). An f16 gradient underflows
// to zero below 2⁻²⁴, so the loss is multiplied by a scale before the
// backward, and the gradients are divided by it before the update. When
// any gradient overflowed (inf or nan) the step is skipped (the update ops'
// `skip` operand, kiln/dialect/optimizer_ops.h) and the scale shrinks; after
// a run of good steps it grows again. kiln::amp::decorate builds the three
// pieces for an f16 program (kiln/frontend/amp.h).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/dialect/builtin.h"

namespace kiln {

// %y0, …, %yk-1, %found_inf = kiln.check_finite_and_unscale(%scale, %x0, …, %xk-1)
// Each yi = xi · (1 / scale), in xi's dtype (f32, f64, bf16 or f16; the
// product in f32 or f64). found_inf: bool [1], whether any element of any
// xi is an inf or a nan — one fused pass over all of them. scale: f32 of
// one element. When found_inf is true the yi are not meant to be used.
struct CheckFiniteAndUnscaleOp : Op<CheckFiniteAndUnscaleOp, ReadOnly, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.check_finite_and_unscale";
  static constexpr int num_operands = -1, num_results = -1;
  static void build(Builder& b, OperationArgument& arg, Value scale, const std::vector<Value>& xs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.update_loss_scaling_(%found_inf, %scale, %good_steps, %bad_steps)
// In place, on the three state tensors (results alias operands 1, 2, 3):
//   found_inf: good = 0; bad += 1; when bad reaches decr_every_n_nan_or_inf,
//              scale *= decr_ratio and bad = 0.
//   otherwise: bad = 0; good += 1; when good reaches incr_every_n_steps,
//              scale *= incr_ratio (kept as it was if that is not finite)
//              and good = 0.
// found_inf: bool of one element; scale: f32 of one element; good_steps and
// bad_steps: i32 of one element. Attributes: incr_every_n_steps >= 1,
// decr_every_n_nan_or_inf >= 1, incr_ratio >= 1, decr_ratio in (0, 1].
// The arithmetic is kiln/kernel/loss_scaling_math.h's.
struct UpdateLossScaling_Op : Op<UpdateLossScaling_Op, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.update_loss_scaling_";
  static constexpr int num_operands = 4, num_results = 3;
  static constexpr std::array<std::string_view, 4> operand_names{"found_inf", "scale", "good_steps",
                                                                 "bad_steps"};
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 3> inplace_map{
      {{0, 1}, {1, 2}, {2, 3}}};
  KILN_ATTRIBUTES((std::int64_t, incr_every_n_steps), (std::int64_t, decr_every_n_nan_or_inf),
                  (double, incr_ratio), (double, decr_ratio));
  static void build(Builder& b, OperationArgument& arg, Value found_inf, Value scale, Value good_steps,
                    Value bad_steps, const Attributes& attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
