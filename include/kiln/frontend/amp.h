// Automatic mixed precision as a program rewrite (Paddle's
// `paddle.static.amp`, PyTorch's autocast): the forward of a training
// program runs its GEMMs and attention in bf16 or f16, and the ops between
// them that lose nothing by it, while norms, softmax and losses stay f32.
//
// Level O1 (PyTorch's autocast, Paddle's O1 white / gray / black lists)
// sorts the forward's ops into three lists, each op on one at most:
//   allow  — runs low: its f32 floating operands read a cast to the low
//            dtype, its result is low (f32 accumulation inside its kernel).
//            Default: kiln.matmul, kiln.scaled_dot_product_attention.
//   follow — runs in its operands' dtype: low when every floating operand
//            is low (one made low by the rewrite), else f32, its low
//            operands read a cast back up (PyTorch's type promotion; as
//            there, a 0-dim f32 operand beside a low one with dims does
//            not promote it, and reads a low cast).
//            Default: default_follow_list() — activations, elementwise
//            binaries, data movement, dropout, pools.
//   deny   — runs f32, as does every op on no list (a user's op amp knows
//            nothing about). Default: default_deny_list().
// And one rule of its own: kiln.add(y, b), y the low result of an allow-list
// op and b an f32 bias of y — a row (one element, or y's last dim) or, y
// NCHW, one value per channel ([C, 1, 1] or [1, C, 1, 1]) — runs low and
// reads b through a low cast: a linear layer's or a convolution's bias
// add, which PyTorch's autocast runs low inside F.linear and F.conv2d.
// Without it each such layer's result would go back to f32 at once and
// every op after it with it. An op that
// reads f64 or the other 16-bit float keeps its dtypes. An op kept f32
// reads each value made low through a cast back to f32, or as it is where
// the op's kernels read 16-bit floats there (kiln/ir/half_operands.h:
// cross_entropy's logits). A batch norm (kiln.batch_norm,
// kiln.fused_batch_norm: on the deny list, its statistics and parameters
// f32) runs in its x's dtype (kiln/ir/mixed_half.h, MixedHalfInterface):
// where its x was made low and Options::place has its 16-bit kernel, it
// reads x as it is and its y is low, as cuDNN's under autocast; its f32
// scale, bias and running statistics (updated in place: they stay the f32
// variables) are never cast. Elsewhere it reads x through a cast to f32,
// as any deny-list op. One cast per (value, dtype), placed before its
// first reader, shared by every later reader. The backward that
// append_backward (or an optimizer's minimize) then builds runs the
// lowered ops' gradients in the low dtype too, and the casts' gradients
// bring the parameters' gradients back to f32: the parameters stay f32
// (they are the master weights the optimizer updates).
//
// Loss scaling: f16's gradients underflow (below 2⁻²⁴) where f32's would
// not, so an f16 program's minimize scales the loss by a parameter before
// the backward, unscales and checks every gradient in one op, skips the
// update of a step where one overflowed, and shrinks or grows the scale
// (kiln/dialect/loss_scaling_ops.h; PyTorch's GradScaler, Paddle's dynamic
// loss scaling). bf16 needs none (its exponent is f32's).
//
//   auto opt = kiln::optim::Adam(1e-3);
//   kiln::amp::decorate(opt, {.dtype = kiln::DataType::BFloat16}).minimize(loss);
//
//   auto scaler = kiln::amp::decorate(opt, {.dtype = kiln::DataType::Float16});
//   scaler.minimize(loss);          // ... run steps ...
//   scaler.loss_scale(scope);       // the scale the next step uses
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/block.h"
#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"
#include "kiln/support/place.h"

namespace kiln {

class Program;
class Scope;

namespace optim {
class Optimizer;
}

namespace amp {

// O0: nothing changes. O1: the allow list's ops run low, the follow list's
// in their operands' dtype, linear and conv layers' bias adds low (above). O2:
// every op runs low that has a floating first operand, a floating result
// and a kernel for the dtype at Options::place, unless the deny list names it
// (default_deny_list: losses, reductions, exp / log, softmax, norms keep
// f32, as PyTorch's autocast and Paddle's O2 keep them) or its floating
// operands and results all hold one element (a loss's tail after its
// reductions — cross_entropy's sum / count, a weighted sum of losses —
// stays f32, so the loss is f32 as autocast's); activations then flow low
// from op to op, and a denied op reads an f32 cast. The parameters
// stay the f32 master weights in both, read by the forward through one low
// cast each per step (the cast's gradient brings their gradients back to
// f32).
enum class Level : std::uint8_t { O0, O1, O2 };

// Whether minimize scales the loss. Auto: for f16, not for bf16.
enum class Scaling : std::uint8_t { Auto, On, Off };

// The scale's rule (PyTorch GradScaler's defaults): start at init_scale;
// after decr_every_n_nan_or_inf overflowing steps in a row multiply it by
// decr_ratio, after incr_every_n_steps good steps in a row by incr_ratio.
// dynamic = false keeps init_scale (overflowing steps are still skipped).
struct LossScaling {
  double init_scale = 65536.0;
  std::int64_t incr_every_n_steps = 2000;
  std::int64_t decr_every_n_nan_or_inf = 1;
  double incr_ratio = 2.0;
  double decr_ratio = 0.5;
  bool dynamic = true;
};

// The lists (op names, as `kiln.matmul`): a list given replaces its
// default; a name one given list holds leaves the other lists' defaults (so
// `allow = {"kiln.softmax"}` takes softmax off the default deny list); a
// name on two given lists is an error; a default entry of allow or follow
// without a kernel for the dtype at Options::place is left out.
struct Options {
  Level level = Level::O1;
  DataType dtype = DataType::BFloat16;  // BFloat16 or Float16
  // O1: the ops run in `dtype`; empty: default_allow_list().
  std::vector<std::string> allow;
  // O1: the ops run in their floating operands' dtype; empty: default_follow_list().
  std::vector<std::string> follow;
  // O1 and O2: the ops kept in f32; empty: default_deny_list(). Those with
  // MixedHalfInterface (batch norms) keep only their f32 operands f32.
  std::vector<std::string> deny;
  Scaling scaling = Scaling::Auto;
  LossScaling loss_scaling;
  // Where the program will run (the Executor's place): the kernels the
  // rewrite asks for — the allow list's, O2's, those of the ops that read a
  // 16-bit operand as it is (kiln/ir/half_operands.h, kiln/ir/mixed_half.h) — are looked up there
  // (a host stream runs the CPU's).
  Place place = Place::cpu();
};

// kiln.matmul, kiln.scaled_dot_product_attention.
const std::vector<std::string>& default_allow_list();
// The unary family but exp, log, square and PyTorch's f32 ones (asin,
// acos, tan, sinh, cosh); gelu, scale, assign; add, sub, mul, div,
// maximum, minimum, add_n; reshape, transpose, split, concat, stack, slice,
// strided_slice, squeeze, unsqueeze, flatten, expand, tile and their `_by`
// forms; dropout; the pools — ops with CPU kernels for bf16 and f16.
const std::vector<std::string>& default_follow_list();
// softmax_with_cross_entropy, cross_entropy, mean, sum, exp, log, square,
// softmax, log_softmax, layer_norm, rms_norm, batch_norm.
const std::vector<std::string>& default_deny_list();

struct RewriteResult {
  std::size_t lowered_ops = 0;  // ops now running in the low dtype (allowed, following, bias adds)
  std::size_t casts = 0;        // casts inserted, down and back up
};

// Rewrites the forward ops of `block` (a program's top-level block, before
// its backward is built). kiln::Error(InvalidArgument): an unknown level or
// a dtype other than bf16 / f16; a list name that is no registered op; an
// allow- or follow-list name whose op has no InferMeta or no kernel for the
// dtype at Options::place ("no CPU kernel"); a name on two given lists; a
// block that already holds backward ops. Each names what is wrong. On an
// error `block` is unchanged.
RewriteResult rewrite(Block& block, const Options& options = {});

// For an inference program that rewrite() lowered (no optimizer will update
// its parameters): every builtin.parameter that only casts to `dtype` (bf16
// or f16) read becomes a `dtype` parameter "<name>@<dtype>" (e.g.
// "conv1.w@bf16"), which this writes into `scope` once, the f32 value
// rounded as the cast kernel rounds it; the casts go. Each run then reads
// its weights low as they are, instead of casting every weight again (and
// oneDNN reorders each convolution weight once, not every run). The f32
// parameters stay in `scope`, unchanged; call this again after they change.
// Paddle's cast_parameters_to_fp16 for inference. Returns the parameters
// cast. kiln::Error: a dtype other than bf16 / f16 (InvalidArgument), a
// parameter `scope` does not hold (NotFound; run the startup program
// first), one that is no f32 CPU tensor of the program's dims
// (InvalidArgument), each naming the parameter. On an error `main` and
// `scope` are unchanged.
std::size_t cast_parameters(Program& main, Scope& scope, DataType dtype);

// An optimizer whose minimize first rewrites the loss's program.
class Decorated {
 public:
  Decorated(optim::Optimizer& optimizer, Options options) : optimizer_(optimizer), options_(std::move(options)) {}
  // rewrite(the loss's block), then the optimizer's minimize — with loss
  // scaling when the options ask for it: the parameters "loss_scaling_N"
  // (f32 [1]) and its good / bad step counters (i32 [1]), set by the
  // startup program; the loss times the scale (marked backward, so
  // clone_for_test drops it) is what append_backward differentiates; the
  // gradients go through kiln.check_finite_and_unscale, the updates skip on
  // its found_inf, and kiln.update_loss_scaling_ moves the scale. Returns
  // the (parameter, gradient) pairs, the gradients unscaled. kiln::Error:
  // rewrite's errors; bad LossScaling values (InvalidArgument, naming the
  // field), checked before the program changes.
  std::vector<std::pair<Value, Value>> minimize(Value loss);

  // Whether the last minimize scaled the loss; the scale's parameter name.
  bool scales_loss() const { return !scale_name_.empty(); }
  const std::string& loss_scale_name() const { return scale_name_; }
  // The scale in `scope` (what the next step multiplies the loss by).
  // kiln::Error(NotFound) before a minimize that scales, or when the scope
  // lacks the parameter (run the startup program first).
  double loss_scale(const Scope& scope) const;
  // The bool [1] value that holds, in a step, whether a gradient
  // overflowed (fetch it to see which steps were skipped); null without
  // loss scaling.
  Value found_inf() const { return found_inf_; }

 private:
  std::vector<std::pair<Value, Value>> minimize_scaled(Value loss);

  optim::Optimizer& optimizer_;
  Options options_;
  std::string scale_name_;
  Value found_inf_;
};

inline Decorated decorate(optim::Optimizer& optimizer, Options options = {}) {
  return Decorated(optimizer, std::move(options));
}

}  // namespace amp
}  // namespace kiln
