// The optimizers of kiln/frontend/optimizer.h: minimize → append_backward →
// apply_gradients (clip, L2, update ops), learning-rate and state parameters.
#include "kiln/frontend/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/frontend/backward.h"
#include "kiln/frontend/initializer.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/runtime/tensor.h"

namespace kiln::optim {

namespace {
void require_finite_nonneg(std::string_view kind, std::string_view what, double v) {
  if (!(v >= 0.0) || std::isinf(v))
    throw_error(ErrorKind::InvalidArgument, kind, ": ", what, " must be finite and >= 0, got ", v);
}

// A kiln update op whose gradient is a cast of a bf16 / f16 value to the
// parameter's f32 (mixed precision: the gradient of a parameter the
// forward read through a low cast) reads that value instead: its kernels
// widen each element exactly, so the update has the same bits, without
// the cast's pass over the gradient and its f32 copy. The cast stays for
// whoever else reads it (minimize returns it); run, an unread cast is
// dead code and goes.
void read_half_gradient(Operation* update) {
  if (!update || !(update->isa<Sgd_Op>() || update->isa<Momentum_Op>() || update->isa<Adam_Op>() ||
                   update->isa<AdamW_Op>()))
    return;
  Operation* cast = update->operand_source(kGradOperand).defining_op();
  if (!cast || !cast->isa<CastOp>()) return;
  const Value low = cast->operand_source(0);
  const Type param = update->operand_source(0).type(), grad = cast->result(0).type();
  if (!is_shaped(low.type()) || !is_shaped(param) || !is_shaped(grad)) return;
  const DataType from = shaped_data_type(low.type()), to = shaped_data_type(param);
  // Only a cast up to the parameter's dtype is exact (f16 → bf16 rounds).
  if (shaped_data_type(grad) == to && from != to && accepts_gradient(to, from))
    update->set_operand(kGradOperand, low);
}
}  // namespace

ClipGradByGlobalNorm::ClipGradByGlobalNorm(double max_norm) : max_norm_(max_norm) {
  if (!(max_norm > 0.0) || std::isinf(max_norm))
    throw_error(ErrorKind::InvalidArgument,
                "ClipGradByGlobalNorm: max_norm must be finite and > 0, got ", max_norm);
}

LearningRate::LearningRate(lr::SchedulePtr schedule)
    : initial_(schedule ? schedule->rate(0) : 0.0), schedule_(std::move(schedule)) {
  if (!schedule_)
    throw_error(ErrorKind::InvalidArgument, "LearningRate: the schedule is a null pointer");
}

Optimizer::Optimizer(std::string_view kind, LearningRate learning_rate, double weight_decay,
                     std::optional<ClipGradByGlobalNorm> clip)
    : kind_(kind), lr_(std::move(learning_rate)), weight_decay_(weight_decay), clip_(clip) {
  if (!std::isfinite(lr_.initial()))
    throw_error(ErrorKind::InvalidArgument, kind_, ": learning_rate must be finite, got ",
                lr_.initial());
  require_finite_nonneg(kind_, "weight_decay", weight_decay);
}

Optimizer::~Optimizer() = default;

Optimizer& Optimizer::set_grad_clip(ClipGradByGlobalNorm clip) {
  clip_ = clip;
  return *this;
}

std::vector<std::string> Optimizer::learning_rate_names() const {
  std::vector<std::string> out;
  for (const auto& [dt, name] : lr_names_) out.push_back(name);
  return out;
}

void Optimizer::set_learning_rate(Scope& scope, double lr) const {
  if (lr_.schedule())
    throw_error(ErrorKind::PreconditionNotMet, kind_, ": the learning rate follows ",
                lr_.schedule()->describe(),
                "; set_learning_rate would be overwritten by the next step");
  if (!std::isfinite(lr))
    throw_error(ErrorKind::InvalidArgument, kind_, ": learning rate must be finite, got ", lr);
  for (const auto& [dt, name] : lr_names_) {
    Variable* v = scope.find_var(name);
    if (!v)
      throw_error(ErrorKind::NotFound, kind_, ": the scope has no learning-rate parameter '", name,
                  "' (run the startup program first)");
    if (dt == DataType::Float64) v->set(Tensor::from_vector<double>(Dims{1}, {lr}));
    else v->set(Tensor::from_vector<float>(Dims{1}, {static_cast<float>(lr)}));
  }
}

double Optimizer::current_learning_rate(const Scope& scope) const {
  if (lr_names_.empty())
    throw_error(ErrorKind::NotFound, kind_,
                ": no learning-rate parameter yet (call minimize or apply_gradients first)");
  const std::string& name = lr_names_.begin()->second;
  const Variable* v = scope.find_var(name);
  if (!v || !v->is_initialized())
    throw_error(ErrorKind::NotFound, kind_, ": the scope has no learning-rate parameter '", name,
                "' (run the startup program first)");
  const Tensor& t = v->get<Tensor>();
  if (t.dtype() == DataType::Float64) return t.to_vector<double>().at(0);
  return t.to_vector<float>().at(0);
}

Value Optimizer::learning_rate_value(DataType dtype) {
  if (dtype != DataType::Float32 && dtype != DataType::Float64)
    throw_error(ErrorKind::InvalidArgument, kind_,
                ": parameters must be f32 or f64 to be optimized, got ", to_string(dtype));
  Program& main = current_main_program();
  if (lr_.schedule()) {
    // One counter and one rate per main program, however many parameters,
    // dtypes and apply_gradients calls share them.
    if (scheduled_program_ == &main && main.has_parameter(scheduled_.step_name)) {
      if (auto r = scheduled_rates_.find(dtype); r != scheduled_rates_.end()) return r->second;
    } else {
      scheduled_rates_.clear();
      scheduled_ = lr::append_schedule(*lr_.schedule());
      scheduled_program_ = &main;
    }
  }
  auto it = lr_names_.find(dtype);
  const Type type = TensorType::get(dtype, {1});
  if (!lr_.schedule() && it != lr_names_.end() && main.has_parameter(it->second))
    return parameter_value(it->second, type, /*trainable=*/false);
  const std::string name = it != lr_names_.end() ? it->second : unique_name("learning_rate");
  Value v = create_parameter(name, {1}, dtype, init::Constant(lr_.initial()), /*trainable=*/false);
  lr_names_[dtype] = name;
  if (!lr_.schedule()) return v;
  // The update ops read this step's rate; it is also written into the
  // parameter, so the scope shows the rate the last step used.
  Builder b = main_builder();
  Value rate = scheduled_.rate;
  if (dtype != DataType::Float64) rate = b.create<CastOp>(rate, dtype).result();
  b.create<SetParameterOp>(rate, name);
  scheduled_rates_[dtype] = rate;
  return rate;
}

Value Optimizer::add_state(const std::string& param_name, std::string_view suffix,
                           Type param_type, const std::vector<std::int64_t>& shape, double init) {
  const std::string name = unique_name(param_name + "_" + std::string(suffix));
  return create_parameter(name, shape, shaped_data_type(param_type), init::Constant(init),
                          /*trainable=*/false);
}

std::vector<std::pair<Value, Value>> Optimizer::minimize(Value loss,
                                                         const std::vector<Value>& parameters,
                                                         const std::vector<Value>& no_grad_set) {
  (void)current_startup_program();  // kiln::Error now, before backward changes anything
  // The dtype errors apply_gradients would raise, checked before backward
  // appends anything, so a failed minimize leaves both programs as they were.
  const std::vector<Value> params =
      parameters.empty() ? trainable_parameters(current_main_program()) : parameters;
  for (Value p : params) {
    if (!p || !is_shaped(p.type())) continue;  // append_backward names these
    const DataType dt = shaped_data_type(p.type());
    if (dt != DataType::Float32 && dt != DataType::Float64)
      throw_error(ErrorKind::InvalidArgument, kind_, ": parameters must be f32 or f64 to be optimized, got ",
                  to_string(dt), " (parameter '", parameter_name(p), "')");
    if (clip_ && dt != shaped_data_type(params.front().type()))
      throw_error(ErrorKind::Unimplemented, kind_,
                  ": global-norm clipping needs every parameter of one dtype, got ",
                  to_string(shaped_data_type(params.front().type())), " and ", to_string(dt),
                  " (parameter '", parameter_name(p), "')");
  }
  auto params_grads = append_backward(loss, parameters, no_grad_set);
  if (params_grads.empty())
    throw_error(ErrorKind::InvalidArgument, kind_,
                ".minimize: the loss depends on no trainable parameter, nothing to optimize");
  apply_gradients(params_grads);
  return params_grads;
}

std::vector<std::pair<Value, Value>> Optimizer::clip_by_global_norm(
    const std::vector<std::pair<Value, Value>>& params_grads) {
  Builder b = main_builder();
  const DataType dt = shaped_data_type(params_grads.front().second.type());
  std::vector<Value> sums;
  for (const auto& [p, g] : params_grads) {
    if (shaped_data_type(g.type()) != dt)
      throw_error(ErrorKind::Unimplemented, kind_,
                  ": global-norm clipping needs every gradient of one dtype, got ", to_string(dt),
                  " and ", to_string(shaped_data_type(g.type())), " (parameter '",
                  parameter_name(p), "')");
    Value sq = b.create<SquareOp>(g).result();
    sums.push_back(b.create<SumOp>(sq).result());  // every axis: rank 0
  }
  Value total = sums.size() == 1 ? sums[0] : b.create<AddNOp>(sums).result();
  Value norm = b.create<SqrtOp>(total).result();
  Value max_norm = b.create<FullOp>(std::vector<std::int64_t>{}, clip_->max_norm(), dt).result();
  Value denom = b.create<MaximumOp>(norm, max_norm).result();
  Value scale = b.create<DivOp>(max_norm, denom).result();
  std::vector<std::pair<Value, Value>> out;
  for (const auto& [p, g] : params_grads)
    out.emplace_back(p, b.create<MulOp>(g, scale).result());
  return out;
}

std::vector<Operation*> Optimizer::apply_gradients(
    std::vector<std::pair<Value, Value>> params_grads, Value skip) {
  if (skip && (!is_shaped(skip.type()) || shaped_data_type(skip.type()) != DataType::Bool))
    throw_error(ErrorKind::InvalidArgument, kind_, ": the skip flag must be a bool tensor of one element, got ",
                skip.type().to_string());
  for (const auto& [p, g] : params_grads) {
    if (!p || !g)
      throw_error(ErrorKind::InvalidArgument, kind_, ": a (parameter, gradient) pair has a null value");
    if (parameter_name(p).empty())
      throw_error(ErrorKind::InvalidArgument, kind_, ": value ", p.type().to_string(),
                  " is not a parameter (a builtin.parameter value); only parameters are updated");
  }
  std::stable_sort(params_grads.begin(), params_grads.end(), [](const auto& a, const auto& c) {
    return parameter_name(a.first) < parameter_name(c.first);
  });
  if (params_grads.empty()) return {};
  Block& block = current_main_program().block();
  Operation* const mark = block.back();  // what follows it is this call's
  if (clip_) params_grads = clip_by_global_norm(params_grads);
  if (weight_decay_ > 0.0 && l2_regularization()) {
    Builder b = main_builder();
    for (auto& [p, g] : params_grads) {
      Value decay = b.create<ScaleOp>(p, weight_decay_).result();
      g = b.create<AddOp>(g, decay).result();
    }
  }
  std::vector<Operation*> ops;
  for (const auto& [p, g] : params_grads) {
    Value lr = learning_rate_value(shaped_data_type(p.type()));
    Builder b = main_builder();
    ops.push_back(append_update(b, parameter_name(p), p, g, lr, skip));
    read_half_gradient(ops.back());
  }
  set_op_role_after(block, mark, OpRole::Optimize);
  return ops;
}

// ---- SGD ----

SGD::SGD(LearningRate learning_rate, double weight_decay,
         std::optional<ClipGradByGlobalNorm> grad_clip)
    : Optimizer("SGD", std::move(learning_rate), weight_decay, grad_clip) {}

Operation* SGD::append_update(Builder& b, const std::string&, Value param, Value grad, Value lr,
                              Value skip) {
  return b.create<Sgd_Op>(param, grad, lr, skip).operation();
}

// ---- Momentum ----

Momentum::Momentum(LearningRate learning_rate, double momentum, bool use_nesterov,
                   double weight_decay, std::optional<ClipGradByGlobalNorm> grad_clip)
    : Optimizer("Momentum", std::move(learning_rate), weight_decay, grad_clip),
      momentum_(momentum),
      nesterov_(use_nesterov) {
  require_finite_nonneg(kind_, "momentum", momentum);
}

Operation* Momentum::append_update(Builder& b, const std::string& name, Value param, Value grad,
                                   Value lr, Value skip) {
  Value velocity = add_state(name, "velocity", param.type(), shaped_dims(param.type()), 0.0);
  return b.create<Momentum_Op>(param, grad, velocity, lr, momentum_, nesterov_, skip).operation();
}

// ---- Adam / AdamW ----

namespace {
void check_betas(std::string_view kind, double beta1, double beta2, double epsilon) {
  for (auto [what, v] : {std::pair<const char*, double>{"beta1", beta1}, {"beta2", beta2}})
    if (!(v >= 0.0 && v < 1.0))
      throw_error(ErrorKind::InvalidArgument, kind, ": ", what, " must be in [0, 1), got ", v);
  require_finite_nonneg(kind, "epsilon", epsilon);
}
}  // namespace

Adam::Adam(LearningRate learning_rate, double beta1, double beta2, double epsilon,
           double weight_decay, std::optional<ClipGradByGlobalNorm> grad_clip)
    : Adam("Adam", std::move(learning_rate), beta1, beta2, epsilon, weight_decay, grad_clip) {}

Adam::Adam(std::string_view kind, LearningRate learning_rate, double beta1, double beta2,
           double epsilon, double weight_decay, std::optional<ClipGradByGlobalNorm> grad_clip)
    : Optimizer(kind, std::move(learning_rate), weight_decay, grad_clip),
      beta1_(beta1),
      beta2_(beta2),
      epsilon_(epsilon) {
  check_betas(kind_, beta1, beta2, epsilon);
}

Operation* Adam::append_update(Builder& b, const std::string& name, Value param, Value grad,
                               Value lr, Value skip) {
  const auto& dims = shaped_dims(param.type());
  Value m1 = add_state(name, "moment1", param.type(), dims, 0.0);
  Value m2 = add_state(name, "moment2", param.type(), dims, 0.0);
  Value b1p = add_state(name, "beta1_pow_acc", param.type(), {1}, beta1_);
  Value b2p = add_state(name, "beta2_pow_acc", param.type(), {1}, beta2_);
  return b.create<Adam_Op>(param, grad, lr, m1, m2, b1p, b2p, beta1_, beta2_, epsilon_, skip)
      .operation();
}

AdamW::AdamW(LearningRate learning_rate, double beta1, double beta2, double epsilon,
             double weight_decay, std::optional<ClipGradByGlobalNorm> grad_clip)
    : Adam("AdamW", std::move(learning_rate), beta1, beta2, epsilon, weight_decay, grad_clip) {}

Operation* AdamW::append_update(Builder& b, const std::string& name, Value param, Value grad,
                                Value lr, Value skip) {
  const auto& dims = shaped_dims(param.type());
  Value m1 = add_state(name, "moment1", param.type(), dims, 0.0);
  Value m2 = add_state(name, "moment2", param.type(), dims, 0.0);
  Value b1p = add_state(name, "beta1_pow_acc", param.type(), {1}, beta1_);
  Value b2p = add_state(name, "beta2_pow_acc", param.type(), {1}, beta2_);
  return b.create<AdamW_Op>(param, grad, lr, m1, m2, b1p, b2p, beta1_, beta2_, epsilon_,
                            weight_decay(), skip)
      .operation();
}

}  // namespace kiln::optim
