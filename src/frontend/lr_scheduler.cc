// The schedules of kiln/frontend/lr_scheduler.h: each one's host formula,
// the same formula as ops (f64, from the step as f64), and the step counter
// the main program reads and increments.
#include "kiln/frontend/lr_scheduler.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>
#include <string_view>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/initializer.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/support/error.h"

namespace kiln::lr {

namespace {

void require_rate(std::string_view who, std::string_view what, double v) {
  if (!(v >= 0.0) || std::isinf(v))
    throw_error(ErrorKind::InvalidArgument, who, ": ", what, " must be finite and >= 0, got ", v);
}

void require_step(std::string_view who, std::int64_t step) {
  if (step < 0) throw_error(ErrorKind::InvalidArgument, who, ": step must be >= 0, got ", step);
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Value full(Builder& b, double v) {
  return b.create<FullOp>(std::vector<std::int64_t>{1}, v, DataType::Float64).result();
}

// scale · x + bias
Value affine(Builder& b, Value x, double scale, double bias) {
  return b.create<ScaleOp>(x, scale, bias).result();
}

// cos(theta) for theta in [0, π] (f64). kiln has no cos op: the Taylor
// series of cos(theta / 4) (|theta / 4| <= π/4, terms up to the 18th power:
// truncation < 1e-20) by Horner in u = (theta / 4)², then cos(2a) =
// 2·cos²(a) − 1 twice. Each doubling at most quadruples the error, so the
// result is within ~1e-15 of std::cos.
Value cos_0_pi(Builder& b, Value theta) {
  Value a = b.create<ScaleOp>(theta, 0.25).result();
  Value u = b.create<SquareOp>(a).result();
  constexpr int kTerms = 10;  // n = 0 … 9: (-1)^n u^n / (2n)!
  double coef[kTerms];
  double fact = 1.0;
  for (int n = 0; n < kTerms; ++n) {
    if (n > 0) fact *= (2.0 * n - 1.0) * (2.0 * n);
    coef[n] = (n % 2 ? -1.0 : 1.0) / fact;
  }
  Value h = affine(b, u, coef[kTerms - 1], coef[kTerms - 2]);
  for (int n = kTerms - 3; n >= 0; --n) h = affine(b, b.create<MulOp>(h, u).result(), 1.0, coef[n]);
  for (int i = 0; i < 2; ++i) h = affine(b, b.create<SquareOp>(h).result(), 2.0, -1.0);
  return h;
}

Value less_than(Builder& b, Value t, double bound) {
  return b.create<LessThanOp>(t, full(b, bound)).result();
}

}  // namespace

// ---- StepDecay ----

StepDecay::StepDecay(double base_lr, std::int64_t step_size, double gamma)
    : base_lr_(base_lr), step_size_(step_size), gamma_(gamma) {
  require_rate("StepDecay", "base_lr", base_lr);
  if (step_size <= 0)
    throw_error(ErrorKind::InvalidArgument, "StepDecay: step_size must be > 0, got ", step_size);
  require_rate("StepDecay", "gamma", gamma);
}

double StepDecay::rate(std::int64_t step) const {
  require_step("StepDecay", step);
  return base_lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

Value StepDecay::build(Builder& b, Value step) const {
  // ⌊step / step_size⌋: the f64 quotient of two integers is exact when it is
  // an integer and below it otherwise; the cast to i64 truncates (step >= 0).
  Value q = b.create<DivOp>(step, full(b, static_cast<double>(step_size_))).result();
  Value k = b.create<CastOp>(b.create<CastOp>(q, DataType::Int64).result(), DataType::Float64)
                .result();
  Value decay = b.create<PowOp>(full(b, gamma_), k).result();
  return b.create<ScaleOp>(decay, base_lr_).result();
}

std::string StepDecay::describe() const {
  return "StepDecay(base_lr=" + fmt(base_lr_) + ", step_size=" + std::to_string(step_size_) +
         ", gamma=" + fmt(gamma_) + ")";
}

// ---- CosineWithWarmup ----

CosineWithWarmup::CosineWithWarmup(double base_lr, std::int64_t warmup_steps,
                                   std::int64_t total_steps, double min_lr)
    : base_lr_(base_lr), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {
  require_rate("CosineWithWarmup", "base_lr", base_lr);
  require_rate("CosineWithWarmup", "min_lr", min_lr);
  if (warmup_steps < 0)
    throw_error(ErrorKind::InvalidArgument, "CosineWithWarmup: warmup_steps must be >= 0, got ",
                warmup_steps);
  if (total_steps < warmup_steps)
    throw_error(ErrorKind::InvalidArgument, "CosineWithWarmup: total_steps (", total_steps,
                ") must be >= warmup_steps (", warmup_steps, ")");
}

double CosineWithWarmup::rate(std::int64_t step) const {
  require_step("CosineWithWarmup", step);
  if (step < warmup_steps_)
    return base_lr_ * static_cast<double>(step) / static_cast<double>(warmup_steps_);
  if (step >= total_steps_) return min_lr_;
  const double p = static_cast<double>(step - warmup_steps_) /
                   static_cast<double>(total_steps_ - warmup_steps_);
  return min_lr_ + (base_lr_ - min_lr_) * (1.0 + std::cos(std::numbers::pi * p)) / 2.0;
}

Value CosineWithWarmup::build(Builder& b, Value step) const {
  Value decayed;
  if (total_steps_ == warmup_steps_) {
    decayed = full(b, min_lr_);
  } else {
    const double span = static_cast<double>(total_steps_ - warmup_steps_);
    Value p = affine(b, step, 1.0 / span, -static_cast<double>(warmup_steps_) / span);
    p = b.create<ClipOp>(p, 0.0, 1.0).result();
    Value c = cos_0_pi(b, b.create<ScaleOp>(p, std::numbers::pi).result());
    // min + (base − min) · (1 + c) / 2
    decayed = affine(b, c, (base_lr_ - min_lr_) / 2.0, min_lr_ + (base_lr_ - min_lr_) / 2.0);
  }
  if (warmup_steps_ == 0) return decayed;
  Value warm = b.create<ScaleOp>(step, base_lr_ / static_cast<double>(warmup_steps_)).result();
  return b.create<WhereOp>(less_than(b, step, static_cast<double>(warmup_steps_)), warm, decayed)
      .result();
}

std::string CosineWithWarmup::describe() const {
  return "CosineWithWarmup(base_lr=" + fmt(base_lr_) + ", warmup_steps=" +
         std::to_string(warmup_steps_) + ", total_steps=" + std::to_string(total_steps_) +
         ", min_lr=" + fmt(min_lr_) + ")";
}

// ---- LinearWarmup ----

LinearWarmup::LinearWarmup(double learning_rate, std::int64_t warmup_steps, double start_lr,
                           std::optional<double> end_lr)
    : learning_rate_(learning_rate),
      warmup_steps_(warmup_steps),
      start_lr_(start_lr),
      end_lr_(end_lr.value_or(learning_rate)) {
  require_rate("LinearWarmup", "learning_rate", learning_rate);
  if (warmup_steps < 0)
    throw_error(ErrorKind::InvalidArgument, "LinearWarmup: warmup_steps must be >= 0, got ",
                warmup_steps);
  require_rate("LinearWarmup", "start_lr", start_lr);
  require_rate("LinearWarmup", "end_lr", end_lr_);
}

LinearWarmup::LinearWarmup(SchedulePtr inner, std::int64_t warmup_steps, double start_lr,
                           std::optional<double> end_lr)
    : inner_(std::move(inner)), warmup_steps_(warmup_steps), start_lr_(start_lr) {
  if (!inner_)
    throw_error(ErrorKind::InvalidArgument, "LinearWarmup: the inner schedule is null");
  if (warmup_steps < 0)
    throw_error(ErrorKind::InvalidArgument, "LinearWarmup: warmup_steps must be >= 0, got ",
                warmup_steps);
  require_rate("LinearWarmup", "start_lr", start_lr);
  end_lr_ = end_lr ? *end_lr : inner_->rate(0);
  require_rate("LinearWarmup", "end_lr", end_lr_);
}

double LinearWarmup::rate(std::int64_t step) const {
  require_step("LinearWarmup", step);
  if (step < warmup_steps_)
    return start_lr_ + (end_lr_ - start_lr_) * static_cast<double>(step) /
                           static_cast<double>(warmup_steps_);
  return inner_ ? inner_->rate(step - warmup_steps_) : learning_rate_;
}

Value LinearWarmup::build(Builder& b, Value step) const {
  const double w = static_cast<double>(warmup_steps_);
  Value after;
  if (inner_) {
    // The inner schedule sees step − warmup_steps, never below 0 (its value
    // during the warm-up is built but not used).
    Value shifted = affine(b, step, 1.0, -w);
    shifted = b.create<ClipOp>(shifted, 0.0, std::numeric_limits<double>::max()).result();
    after = inner_->build(b, shifted);
  } else {
    after = full(b, learning_rate_);
  }
  if (warmup_steps_ == 0) return after;
  Value warm = affine(b, step, (end_lr_ - start_lr_) / w, start_lr_);
  return b.create<WhereOp>(less_than(b, step, w), warm, after).result();
}

std::string LinearWarmup::describe() const {
  return "LinearWarmup(" + (inner_ ? inner_->describe() : fmt(learning_rate_)) +
         ", warmup_steps=" + std::to_string(warmup_steps_) + ", start_lr=" + fmt(start_lr_) +
         ", end_lr=" + fmt(end_lr_) + ")";
}

// ---- the step counter ----

ScheduledRate append_schedule(const Schedule& schedule) {
  Program& main = current_main_program();
  (void)current_startup_program();  // kiln::Error now, before anything is appended
  Block& block = main.block();
  Operation* const mark = block.back();  // what follows it is this call's
  ScheduledRate out;
  out.step_name = unique_name("lr_step");
  Value counter = create_parameter(out.step_name, {1}, DataType::Int64, init::Constant(0.0),
                                   /*trainable=*/false);
  Builder b = main_builder();
  out.step = b.create<CastOp>(counter, DataType::Float64).result();
  out.rate = schedule.build(b, out.step);
  if (!out.rate || !is_shaped(out.rate.type()) ||
      shaped_data_type(out.rate.type()) != DataType::Float64 ||
      shaped_dims(out.rate.type()) != std::vector<std::int64_t>{1})
    throw_error(ErrorKind::InvalidArgument, "append_schedule: ", schedule.describe(),
                " must build an f64 [1] rate, got ",
                out.rate ? out.rate.type().to_string() : std::string("a null value"));
  b.create<SetParameterOp>(b.create<ScaleOp>(counter, 1.0, 1.0).result(), out.step_name);
  set_op_role_after(block, mark, OpRole::Optimize);
  return out;
}

}  // namespace kiln::lr
