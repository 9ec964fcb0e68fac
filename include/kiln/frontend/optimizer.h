// Optimizers (seed 001 §1.2.2.2, `optimizer.minimize(loss)`): append_backward,
// then global-norm clipping and L2 regularization when asked, then one
// in-place update op per parameter (kiln/dialect/optimizer_ops.h). Learning
// rate and state (velocity, moments, beta powers) are non-trainable
// parameters initialized in startup; the rate is a constant the host may
// overwrite, or a schedule the main program computes each step
// (kiln/frontend/lr_scheduler.h).
#pragma once

#include <concepts>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/frontend/lr_scheduler.h"
#include "kiln/ir/value.h"
#include "kiln/runtime/scope.h"
#include "kiln/support/data_type.h"

namespace kiln {
class Builder;  // kiln/ir/builder.h: an optimizer's own append_update() builds through it
class Program;
}  // namespace kiln

namespace kiln::optim {

// Paddle's ClipGradByGlobalNorm: with n = sqrt(Σ over every gradient of
// Σ g²), each gradient becomes g · max_norm / max(n, max_norm) (unchanged
// when n <= max_norm). Built from square, sum, add_n, sqrt, maximum, div and
// mul. max_norm must be finite and > 0 (kiln::Error otherwise).
class ClipGradByGlobalNorm {
 public:
  explicit ClipGradByGlobalNorm(double max_norm);
  double max_norm() const { return max_norm_; }

 private:
  double max_norm_;
};

// What an optimizer's constructor takes as its learning rate: a constant,
// or a schedule (`optim::Adam adam(lr::CosineWithWarmup(1e-3, 100, 1000))`).
class LearningRate {
 public:
  LearningRate(double value) : initial_(value) {}  // NOLINT: implicit on purpose
  template <std::derived_from<lr::Schedule> S>
  LearningRate(S schedule)  // NOLINT: implicit on purpose
      : LearningRate(lr::SchedulePtr(std::make_shared<const S>(std::move(schedule)))) {}
  // kiln::Error for a null schedule.
  LearningRate(lr::SchedulePtr schedule);  // NOLINT: implicit on purpose

  // The constant, or the schedule's rate at step 0.
  double initial() const { return initial_; }
  // Null for a constant rate.
  const lr::SchedulePtr& schedule() const { return schedule_; }

 private:
  double initial_;
  lr::SchedulePtr schedule_;
};

class Optimizer {
 public:
  virtual ~Optimizer();

  // append_backward(loss, parameters, no_grad_set) then apply_gradients.
  // Builds into the current ProgramGuard's programs (the loss's main program
  // and its startup program). Returns the (parameter, gradient) pairs, the
  // gradients as backward made them (before clipping / regularization).
  // kiln::Error: no active ProgramGuard with a startup program, a bad loss
  // (see append_backward), no parameter that the loss depends on.
  std::vector<std::pair<Value, Value>> minimize(Value loss,
                                                const std::vector<Value>& parameters = {},
                                                const std::vector<Value>& no_grad_set = {});

  // Seed §1.2.2.2's apply_gradients on pairs from append_backward: sorts them
  // by parameter name, clips, adds weight_decay · param to each gradient (L2;
  // not for AdamW, whose decay is decoupled), and appends one update op per
  // parameter to the current main program. Every op it appends to the main
  // program is marked OpRole::Optimize (kiln/frontend/op_role.h). Returns
  // the update ops. `skip`: a bool value of one element; when it holds true
  // at run time every update leaves its parameter and state as they were
  // (loss scaling's overflow, kiln/dialect/loss_scaling_ops.h). Mixed
  // precision: an update whose gradient is a cast of a bf16 / f16 value to
  // its f32 parameter reads that value as it is (the update ops widen it
  // exactly: the same bits, without the cast's pass and f32 copy; the cast
  // stays for other readers, and goes at run time when none reads it).
  std::vector<Operation*> apply_gradients(std::vector<std::pair<Value, Value>> params_grads,
                                          Value skip = {});

  // Global-norm clipping for the next minimize / apply_gradients.
  Optimizer& set_grad_clip(ClipGradByGlobalNorm clip);
  const std::optional<ClipGradByGlobalNorm>& grad_clip() const { return clip_; }

  // The initial learning rate (what startup writes; a schedule's rate at
  // step 0).
  double learning_rate() const { return lr_.initial(); }
  // The schedule the main program computes the rate with; null for a
  // constant rate.
  const lr::SchedulePtr& lr_schedule() const { return lr_.schedule(); }
  double weight_decay() const { return weight_decay_; }
  // Names of the learning-rate parameters made so far ("learning_rate_0"),
  // one per parameter dtype; empty before the first minimize.
  std::vector<std::string> learning_rate_names() const;
  // Writes `lr` into every learning-rate parameter in `scope` (a host-driven
  // schedule; run the startup program first). kiln::Error: NotFound naming
  // the parameter when the scope lacks it; PreconditionNotMet when the
  // optimizer has a schedule (the next step would overwrite the rate).
  void set_learning_rate(Scope& scope, double lr) const;
  // The rate in `scope`: the one the last run of the main program used (a
  // schedule writes each step's rate into the learning-rate parameter), or
  // what startup wrote. kiln::Error(NotFound) before the first minimize or
  // when the scope lacks the parameter.
  double current_learning_rate(const Scope& scope) const;
  // With a schedule: the rate of the running step (f64 [1]) in the main
  // program of the last minimize / apply_gradients, to fetch alongside the
  // loss, and the step counter's parameter name ("lr_step_0"). Null / empty
  // without a schedule or before the first minimize.
  Value scheduled_rate() const { return scheduled_.rate; }
  const std::string& lr_step_name() const { return scheduled_.step_name; }

 protected:
  // `kind` names the optimizer in errors ("Adam"); weight_decay >= 0.
  Optimizer(std::string_view kind, LearningRate learning_rate, double weight_decay,
            std::optional<ClipGradByGlobalNorm> clip);

  // Appends the update op of one parameter (its name, its gradient after
  // clipping / regularization, the learning rate of its dtype, the skip
  // flag or null) to `b`.
  virtual Operation* append_update(Builder& b, const std::string& name, Value param, Value grad,
                                   Value lr, Value skip) = 0;
  // Whether weight_decay is added to the gradients as L2 (false: the update
  // op applies it itself).
  virtual bool l2_regularization() const { return true; }
  // A non-trainable state parameter "<param>_<suffix>_<n>" of `shape`, set to
  // `init` by the startup program; its value in the main program.
  Value add_state(const std::string& param_name, std::string_view suffix, Type param_type,
                  const std::vector<std::int64_t>& shape, double init);

  std::string kind_;

 private:
  Value learning_rate_value(DataType dtype);
  std::vector<std::pair<Value, Value>> clip_by_global_norm(
      const std::vector<std::pair<Value, Value>>& params_grads);

  LearningRate lr_;
  double weight_decay_;
  std::optional<ClipGradByGlobalNorm> clip_;
  std::map<DataType, std::string> lr_names_;
  // With a schedule: its ops in the last main program built into
  // (append_schedule, once per program) and the rate per parameter dtype.
  lr::ScheduledRate scheduled_;
  const Program* scheduled_program_ = nullptr;
  std::map<DataType, Value> scheduled_rates_;
};

// param -= lr · grad. weight_decay: L2 coefficient.
class SGD : public Optimizer {
 public:
  explicit SGD(LearningRate learning_rate, double weight_decay = 0.0,
               std::optional<ClipGradByGlobalNorm> grad_clip = std::nullopt);

 protected:
  Operation* append_update(Builder& b, const std::string& name, Value param, Value grad,
                           Value lr, Value skip) override;
};

// velocity = momentum · velocity + grad; param -= lr · velocity (Nesterov:
// param -= lr · (grad + momentum · velocity)). Velocity "<param>_velocity_0"
// starts at 0. weight_decay: L2 coefficient.
class Momentum : public Optimizer {
 public:
  Momentum(LearningRate learning_rate, double momentum = 0.9, bool use_nesterov = false,
           double weight_decay = 0.0,
           std::optional<ClipGradByGlobalNorm> grad_clip = std::nullopt);

 protected:
  Operation* append_update(Builder& b, const std::string& name, Value param, Value grad,
                           Value lr, Value skip) override;

 private:
  double momentum_;
  bool nesterov_;
};

// Paddle's adam (kiln.adam_): moments "<param>_moment1_0" / "_moment2_0"
// start at 0, beta powers "<param>_beta1_pow_acc_0" / "_beta2_pow_acc_0" at
// beta1 / beta2. weight_decay: L2 coefficient added to the gradient.
class Adam : public Optimizer {
 public:
  explicit Adam(LearningRate learning_rate, double beta1 = 0.9, double beta2 = 0.999,
                double epsilon = 1e-8, double weight_decay = 0.0,
                std::optional<ClipGradByGlobalNorm> grad_clip = std::nullopt);

 protected:
  Operation* append_update(Builder& b, const std::string& name, Value param, Value grad,
                           Value lr, Value skip) override;
  Adam(std::string_view kind, LearningRate learning_rate, double beta1, double beta2,
       double epsilon, double weight_decay, std::optional<ClipGradByGlobalNorm> grad_clip);
  double beta1_, beta2_, epsilon_;
};

// Adam with decoupled weight decay (kiln.adamw_): param -= lr · weight_decay
// · param before each adam step; no L2 term in the gradient.
class AdamW : public Adam {
 public:
  explicit AdamW(LearningRate learning_rate, double beta1 = 0.9, double beta2 = 0.999,
                 double epsilon = 1e-8, double weight_decay = 0.01,
                 std::optional<ClipGradByGlobalNorm> grad_clip = std::nullopt);

 protected:
  Operation* append_update(Builder& b, const std::string& name, Value param, Value grad,
                           Value lr, Value skip) override;
  bool l2_regularization() const override { return false; }
};

}  // namespace kiln::optim
