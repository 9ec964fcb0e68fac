// Optimizer update ops (seed 001 §1.2.2.2, the ops `_create_optimization_pass`
// appends): sgd_, momentum_, adam_ and adamw_ with Paddle's semantics. Each is
// Inplace — its outputs are the parameter's and the optimizer state's own
// variables — so the executor's WAR/WAW ordering puts every update after the
// last reader of the old value. The learning rate is a 1-element tensor value.
//
// Each takes an optional last operand `skip` (Paddle's SkipUpdate): a bool
// tensor of one element. When it holds true the op changes nothing — the
// parameter and its state keep their values (a copy of them when run out of
// place). Mixed precision's loss scaling skips a step whose gradients
// overflowed this way (kiln/dialect/loss_scaling_ops.h); the flag may live on
// a device, so the decision is the kernel's, not the host's.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

// InferMeta of the update ops (shared): `names[i]` names operand i; operands
// in `same_as_param` must have param's dtype (the
// gradient: accepts_gradient's) and shape, those in `scalars`
// param's dtype and exactly one element, those in `written` must be mutable
// tensors. Errors name the op and the operand ("op 'kiln.adam_' operand
// 'moment1' (#3) …"). Returns the types of the written operands, in order.
std::vector<Type> infer_optimizer_update(std::string_view op, const std::vector<Type>& in,
                                         std::span<const std::string_view> names,
                                         std::span<const std::uint32_t> same_as_param,
                                         std::span<const std::uint32_t> scalars,
                                         std::span<const std::uint32_t> written);

// The gradient's operand index in every update op (and in each
// parameter's group of a merged one). Mixed precision: an f32 parameter's
// gradient may be bf16 or f16 as backward made it (the f32 master weights
// of Paddle's multi_precision, PyTorch's autocast); the kernels widen each
// element exactly, so the update has the bits it has on the gradient cast
// to f32, without the cast's pass and f32 copy. Any other gradient has the
// parameter's dtype.
inline constexpr std::uint32_t kGradOperand = 1;
// Whether an update of a `param` parameter reads a `grad` gradient.
constexpr bool accepts_gradient(DataType param, DataType grad) {
  return grad == param || (param == DataType::Float32 &&
                           (grad == DataType::BFloat16 || grad == DataType::Float16));
}
// kiln::Error(InvalidArgument) for a gradient accepts_gradient refuses:
// "op 'kiln.sgd_' operand 'grad' (#1) must be f32, bf16 or f16 for 'param'
// of f32, got i32" (`operand` names it as the caller's op does). InferMeta
// and the CPU and CUDA kernels raise it alike.
[[noreturn]] void throw_gradient_dtype(std::string_view op, std::string_view operand, DataType param,
                                       DataType grad);

// The optional `skip` operand's name in errors.
inline constexpr std::string_view kSkipOperandName = "skip";

// param_out = param - lr * grad
struct Sgd_Op : Op<Sgd_Op, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.sgd_";
  static constexpr int num_operands = 3, num_results = 1, num_optional_operands = 1;  // + skip
  static constexpr std::array<std::string_view, 3> operand_names{"param", "grad", "learning_rate"};
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value param, Value grad, Value lr,
                    Value skip = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// velocity_out = mu * velocity + grad
// param_out    = param - lr * (grad + mu * velocity_out)   (use_nesterov)
//              = param - lr * velocity_out                  (otherwise)
// Results: param_out (aliases param), velocity_out (aliases velocity).
struct Momentum_Op : Op<Momentum_Op, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.momentum_";
  static constexpr int num_operands = 4, num_results = 2, num_optional_operands = 1;
  static constexpr std::array<std::string_view, 4> operand_names{"param", "grad", "velocity",
                                                                 "learning_rate"};
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 2> inplace_map{
      {{0, 0}, {1, 2}}};
  KILN_ATTRIBUTES((double, mu), (bool, use_nesterov));
  static void build(Builder& b, OperationArgument& arg, Value param, Value grad, Value velocity,
                    Value lr, double mu = 0.9, bool use_nesterov = false, Value skip = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Paddle's adam (bias correction through the beta powers, which start at
// beta1 / beta2 and are updated in place):
//   lr_t  = lr * sqrt(1 - beta2_pow) / (1 - beta1_pow)
//   m1    = beta1 * m1 + (1 - beta1) * g
//   m2    = beta2 * m2 + (1 - beta2) * g²
//   param = param - lr_t * m1 / (sqrt(m2) + epsilon * sqrt(1 - beta2_pow))
//   beta1_pow *= beta1;  beta2_pow *= beta2
// Operands: param, grad, learning_rate, moment1, moment2, beta1_pow,
// beta2_pow. Results: param, moment1, moment2, beta1_pow, beta2_pow (each
// aliasing its operand).
struct Adam_Op : Op<Adam_Op, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.adam_";
  static constexpr int num_operands = 7, num_results = 5, num_optional_operands = 1;
  static constexpr std::array<std::string_view, 7> operand_names{
      "param", "grad", "learning_rate", "moment1", "moment2", "beta1_pow", "beta2_pow"};
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 5> inplace_map{
      {{0, 0}, {1, 3}, {2, 4}, {3, 5}, {4, 6}}};
  KILN_ATTRIBUTES((double, beta1), (double, beta2), (double, epsilon));
  static void build(Builder& b, OperationArgument& arg, Value param, Value grad, Value lr,
                    Value moment1, Value moment2, Value beta1_pow, Value beta2_pow,
                    double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8,
                    Value skip = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// adam_ with decoupled weight decay (Loshchilov & Hutter; Paddle's adamw):
// first param -= lr * coeff * param (the plain learning rate, no bias
// correction), then the adam_ update. Same operands and results as adam_.
struct AdamW_Op : Op<AdamW_Op, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.adamw_";
  static constexpr int num_operands = 7, num_results = 5, num_optional_operands = 1;
  static constexpr std::array<std::string_view, 7> operand_names = Adam_Op::operand_names;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 5> inplace_map =
      Adam_Op::inplace_map;
  KILN_ATTRIBUTES((double, beta1), (double, beta2), (double, epsilon), (double, coeff));
  static void build(Builder& b, OperationArgument& arg, Value param, Value grad, Value lr,
                    Value moment1, Value moment2, Value beta1_pow, Value beta2_pow,
                    double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8,
                    double coeff = 0.01, Value skip = {});
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
