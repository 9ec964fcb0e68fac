// Learning-rate schedules that live in the program (Paddle's
// paddle.optimizer.lr in a static graph, seed 001 §1.2.2.2): the main
// program reads a persistable step counter, computes the rate of that step
// with ordinary ops and increments the counter, so a run of the main program
// is one step and nothing is written from the host between steps.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kiln/ir/value.h"

namespace kiln {
class Builder;  // kiln/ir/builder.h: a schedule's own build() builds through it
}  // namespace kiln

namespace kiln::lr {

// A rate as a function of the step (0 = the first run of the main program).
// Derive from it for a schedule of your own: rate() and build() must agree.
class Schedule {
 public:
  virtual ~Schedule() = default;
  // The rate at `step`, computed on the host (what the program computes at
  // that step; e.g. the value startup writes). kiln::Error for step < 0.
  virtual double rate(std::int64_t step) const = 0;
  // Appends to `b` the ops computing the rate (f64 [1]) from `step` (f64 [1],
  // an integral value >= 0).
  virtual Value build(Builder& b, Value step) const = 0;
  // E.g. "StepDecay(base_lr=0.1, step_size=30, gamma=0.1)", for messages.
  virtual std::string describe() const = 0;
};

using SchedulePtr = std::shared_ptr<const Schedule>;

// PyTorch's StepLR: base_lr · gamma^⌊step / step_size⌋. kiln::Error:
// base_lr < 0 or not finite, step_size <= 0, gamma < 0 or not finite.
class StepDecay final : public Schedule {
 public:
  StepDecay(double base_lr, std::int64_t step_size, double gamma = 0.1);
  double rate(std::int64_t step) const override;
  Value build(Builder& b, Value step) const override;
  std::string describe() const override;

 private:
  double base_lr_;
  std::int64_t step_size_;
  double gamma_;
};

// Linear warm-up from 0, then a cosine from base_lr down to min_lr:
//   step < warmup_steps:          base_lr · step / warmup_steps
//   warmup_steps <= step:         min_lr + (base_lr − min_lr) · (1 + cos(π · p)) / 2,
//                                 p = min((step − warmup_steps) / (total_steps − warmup_steps), 1)
// so the rate is min_lr from total_steps on (and from warmup_steps on when
// the two are equal). The cosine part is PyTorch's CosineAnnealingLR (T_max =
// total_steps − warmup_steps, eta_min = min_lr). cos is built from a
// polynomial and two angle doublings (kiln has no cos op); it is within
// ~1e-15 of std::cos. kiln::Error: base_lr or min_lr < 0 or not finite,
// warmup_steps < 0, total_steps < warmup_steps.
class CosineWithWarmup final : public Schedule {
 public:
  CosineWithWarmup(double base_lr, std::int64_t warmup_steps, std::int64_t total_steps,
                   double min_lr = 0.0);
  double rate(std::int64_t step) const override;
  Value build(Builder& b, Value step) const override;
  std::string describe() const override;

 private:
  double base_lr_;
  std::int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

// Paddle's LinearWarmup: for step < warmup_steps the rate goes linearly
//   start_lr + (end_lr − start_lr) · step / warmup_steps,
// then it is `learning_rate` (constant), or the inner schedule at
// step − warmup_steps. end_lr defaults to the rate after the warm-up starts
// (learning_rate, or the inner schedule's rate at its step 0). kiln::Error:
// a rate < 0 or not finite, warmup_steps < 0, a null inner schedule.
class LinearWarmup final : public Schedule {
 public:
  LinearWarmup(double learning_rate, std::int64_t warmup_steps, double start_lr,
               std::optional<double> end_lr = std::nullopt);
  LinearWarmup(SchedulePtr inner, std::int64_t warmup_steps, double start_lr,
               std::optional<double> end_lr = std::nullopt);
  template <std::derived_from<Schedule> S>
  LinearWarmup(S inner, std::int64_t warmup_steps, double start_lr,
               std::optional<double> end_lr = std::nullopt)
      : LinearWarmup(SchedulePtr(std::make_shared<const S>(std::move(inner))), warmup_steps,
                     start_lr, end_lr) {}

  double rate(std::int64_t step) const override;
  Value build(Builder& b, Value step) const override;
  std::string describe() const override;

 private:
  SchedulePtr inner_;  // null: the constant learning_rate_
  double learning_rate_ = 0.0;
  std::int64_t warmup_steps_;
  double start_lr_, end_lr_;
};

// The rate of one run of the main program and the counter it came from.
struct ScheduledRate {
  Value rate;             // f64 [1]: the schedule at this run's step (fetchable)
  Value step;             // f64 [1]: this run's step (the counter before its increment;
                          // fetching the parameter itself gives it after)
  std::string step_name;  // the counter parameter, "lr_step_<n>"
};

// Appends `schedule` to the current main program (ProgramGuard): a
// non-trainable parameter "lr_step_<n>" (i64 [1], 0 from the startup
// program), the schedule's ops on it, and `builtin.set_parameter` of
// counter + 1. Every op it appends is marked OpRole::Optimize, so
// clone_for_test drops the counter, the increment and the rate. Optimizers
// given a schedule call this; use it directly for a rate of your own.
// kiln::Error: no active ProgramGuard with a startup program; a schedule
// whose build() gives no f64 [1] value.
ScheduledRate append_schedule(const Schedule& schedule);

}  // namespace kiln::lr
