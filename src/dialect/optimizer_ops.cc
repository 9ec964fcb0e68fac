// Definitions of the optimizer update ops declared in
// kiln/dialect/optimizer_ops.h: build() and the shared InferMeta checks
// (dtypes, shapes, 1-element learning rate / beta powers, mutable operands,
// attribute ranges).
#include "kiln/dialect/optimizer_ops.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kiln {

KILN_REGISTER_OP(Sgd_Op);
KILN_REGISTER_OP(Momentum_Op);
KILN_REGISTER_OP(Adam_Op);
KILN_REGISTER_OP(AdamW_Op);

static_assert(Sgd_Op::operand_names[kGradOperand] == "grad" &&
              Momentum_Op::operand_names[kGradOperand] == "grad" &&
              Adam_Op::operand_names[kGradOperand] == "grad" &&
              AdamW_Op::operand_names[kGradOperand] == "grad");

namespace {

std::string operand_label(std::span<const std::string_view> names, std::size_t i) {
  return "'" + std::string(names[i]) + "' (#" + std::to_string(i) + ")";
}

bool dims_compatible(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (a[k] != -1 && b[k] != -1 && a[k] != b[k]) return false;
  return true;
}

// False only when the element count is known and is not 1.
bool may_be_one_element(const std::vector<std::int64_t>& d) {
  std::int64_t n = 1;
  for (auto x : d) {
    if (x == -1) return std::none_of(d.begin(), d.end(), [](std::int64_t v) { return v == 0; });
    n *= x;
  }
  return n == 1;
}

void check_range(std::string_view op, std::string_view attr, double v, double lo, double hi,
                 bool hi_open) {
  if (!(v >= lo) || (hi_open ? !(v < hi) : !(v <= hi)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' attribute ", attr, " must be in [", lo,
                ", ", hi, hi_open ? ")" : "]", ", got ", v);
}

void check_adam_attrs(std::string_view op, double beta1, double beta2, double epsilon) {
  check_range(op, "beta1", beta1, 0.0, 1.0, true);
  check_range(op, "beta2", beta2, 0.0, 1.0, true);
  if (!(epsilon >= 0.0) || std::isinf(epsilon))
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' attribute epsilon must be finite and >= 0, got ", epsilon);
}

void check_skip_operand(std::string_view op, Type t, std::size_t index) {
  if (!t || !is_shaped(t) || shaped_data_type(t) != DataType::Bool ||
      !may_be_one_element(shaped_dims(t)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand '", kSkipOperandName, "' (#", index,
                ") must be a bool tensor of one element, got ",
                t ? t.to_string() : std::string("nothing"));
}

}  // namespace

void throw_gradient_dtype(std::string_view op, std::string_view operand, DataType param, DataType grad) {
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand ", operand, " must be ", to_string(param),
              param == DataType::Float32 ? ", bf16 or f16" : "", " for 'param' of ", to_string(param), ", got ",
              to_string(grad));
}

std::vector<Type> infer_optimizer_update(std::string_view op, const std::vector<Type>& in,
                                         std::span<const std::string_view> names,
                                         std::span<const std::uint32_t> same_as_param,
                                         std::span<const std::uint32_t> scalars,
                                         std::span<const std::uint32_t> written) {
  if (in.size() != names.size() && in.size() != names.size() + 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes ", names.size(), " operands (",
                names.size() + 1, " with '", kSkipOperandName, "'), got ", in.size());
  if (in.size() > names.size()) check_skip_operand(op, in.back(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    if (!in[i] || !is_shaped(in[i]))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand ", operand_label(names, i),
                  " must be a tensor, got ", in[i] ? in[i].to_string() : std::string("nothing"));
  const DataType dt = shaped_data_type(in[0]);
  if (dt != DataType::Float32 && dt != DataType::Float64)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand ", operand_label(names, 0),
                " must be f32 or f64, got ", to_string(dt));
  const auto& pdims = shaped_dims(in[0]);
  auto require_dtype = [&](std::uint32_t i) {
    if (i == kGradOperand) {
      if (!accepts_gradient(dt, shaped_data_type(in[i])))
        throw_gradient_dtype(op, operand_label(names, i), dt, shaped_data_type(in[i]));
      return;
    }
    if (shaped_data_type(in[i]) != dt)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand ", operand_label(names, i),
                  " must have the dtype of 'param' (", to_string(dt), "), got ",
                  to_string(shaped_data_type(in[i])));
  };
  for (auto i : same_as_param) {
    require_dtype(i);
    if (!dims_compatible(pdims, shaped_dims(in[i])))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand ", operand_label(names, i),
                  " must have the shape of 'param' ", meta::dims_string(pdims), ", got ",
                  meta::dims_string(shaped_dims(in[i])));
  }
  for (auto i : scalars) {
    require_dtype(i);
    if (!may_be_one_element(shaped_dims(in[i])))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand ", operand_label(names, i),
                  " must hold exactly one element (e.g. shape [1]), got shape ",
                  meta::dims_string(shaped_dims(in[i])));
  }
  std::vector<Type> out;
  for (auto i : written) {
    if (in[i].isa<VTensorType>())
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' writes operand ",
                  operand_label(names, i),
                  " in place, so it must be a tensor, not a vtensor (value semantics)");
    out.push_back(in[i]);
  }
  return out;
}

// ---- sgd_ ----

void Sgd_Op::build(Builder&, OperationArgument& arg, Value param, Value grad, Value lr, Value skip) {
  arg.add_operands({param, grad, lr});
  if (skip) arg.add_operands({skip});
}
std::vector<Type> Sgd_Op::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  static constexpr std::uint32_t same[] = {1}, scalars[] = {2}, written[] = {0};
  return infer_optimizer_update(name, in, operand_names, same, scalars, written);
}

// ---- momentum_ ----

void Momentum_Op::build(Builder&, OperationArgument& arg, Value param, Value grad, Value velocity,
                        Value lr, double mu, bool use_nesterov, Value skip) {
  arg.add_operands({param, grad, velocity, lr});
  if (skip) arg.add_operands({skip});
  arg.attributes = to_named_attributes(Attributes{mu, use_nesterov});
}
std::vector<Type> Momentum_Op::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  if (!(a.mu >= 0.0) || std::isinf(a.mu))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' attribute mu must be finite and >= 0, got ",
                a.mu);
  static constexpr std::uint32_t same[] = {1, 2}, scalars[] = {3}, written[] = {0, 2};
  return infer_optimizer_update(name, in, operand_names, same, scalars, written);
}

// ---- adam_ / adamw_ ----

namespace {
constexpr std::uint32_t kAdamSame[] = {1, 3, 4}, kAdamScalars[] = {2, 5, 6},
                        kAdamWritten[] = {0, 3, 4, 5, 6};
}  // namespace

void Adam_Op::build(Builder&, OperationArgument& arg, Value param, Value grad, Value lr,
                    Value moment1, Value moment2, Value beta1_pow, Value beta2_pow, double beta1,
                    double beta2, double epsilon, Value skip) {
  arg.add_operands({param, grad, lr, moment1, moment2, beta1_pow, beta2_pow});
  if (skip) arg.add_operands({skip});
  arg.attributes = to_named_attributes(Attributes{beta1, beta2, epsilon});
}
std::vector<Type> Adam_Op::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  check_adam_attrs(name, a.beta1, a.beta2, a.epsilon);
  return infer_optimizer_update(name, in, operand_names, kAdamSame, kAdamScalars, kAdamWritten);
}

void AdamW_Op::build(Builder&, OperationArgument& arg, Value param, Value grad, Value lr,
                     Value moment1, Value moment2, Value beta1_pow, Value beta2_pow, double beta1,
                     double beta2, double epsilon, double coeff, Value skip) {
  arg.add_operands({param, grad, lr, moment1, moment2, beta1_pow, beta2_pow});
  if (skip) arg.add_operands({skip});
  arg.attributes = to_named_attributes(Attributes{beta1, beta2, epsilon, coeff});
}
std::vector<Type> AdamW_Op::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  check_adam_attrs(name, a.beta1, a.beta2, a.epsilon);
  if (!(a.coeff >= 0.0) || std::isinf(a.coeff))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' attribute coeff (weight decay) must be finite and >= 0, got ", a.coeff);
  return infer_optimizer_update(name, in, operand_names, kAdamSame, kAdamScalars, kAdamWritten);
}

}  // namespace kiln
