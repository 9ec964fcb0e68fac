// The random ops of kiln/dialect/random_ops.h: uniform_random,
// gaussian_random, random_key and dropout (with its gradient op).
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/random_ops.h"

#include <cmath>


namespace kiln {


namespace {
void check_gaussian(std::string_view op, double mean, double std) {
  if (!std::isfinite(mean) || !std::isfinite(std) || std < 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' needs a finite mean and a finite std >= 0, got mean = ", mean, ", std = ", std);
}

void check_dropout_p(std::string_view op, double p) {
  if (!(p >= 0.0 && p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs a drop probability p in [0, 1), got ",
                p);
}
}  // namespace

void GaussianRandomOp::build(Builder&, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                             double mean, double std, std::int64_t seed, DataType dtype, Place place) {
  arg.attributes = to_named_attributes(Attributes{shape, mean, std, seed, dtype, place});
}

std::vector<Type> GaussianRandomOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::check_shape_attr(name, a.shape);
  if (!is_floating(a.dtype))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a floating dtype, got ",
                to_string(a.dtype));
  check_gaussian(name, a.mean, a.std);
  return {TensorType::get(a.dtype, a.shape)};
}

void GaussianRandomOp::verify() const {
  auto a = attrs();
  check_gaussian(name, a.mean, a.std);
}

void DropoutOp::build(Builder&, OperationArgument& arg, Value x, double p, bool is_test,
                      std::int64_t seed) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{p, is_test, seed});
}

std::vector<Type> DropoutOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0);
  if (!is_floating(shaped_data_type(x)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a floating input, got ",
                x.to_string());
  check_dropout_p(name, a.p);
  Type mask = x.isa<VTensorType>() ? Type(VTensorType::get(DataType::Bool, shaped_dims(x)))
                                   : Type(TensorType::get(DataType::Bool, shaped_dims(x)));
  return {x, mask};
}

void DropoutOp::verify() const { check_dropout_p(name, attrs().p); }

KILN_REGISTER_OP(UniformRandomOp, GaussianRandomOp, RandomKeyOp, DropoutOp, GradOf<DropoutOp>);

void RandomKeyOp::build(Builder&, OperationArgument& arg, std::int64_t seed, Place place) {
  arg.attributes = to_named_attributes(Attributes{seed, false, place});
}

std::vector<Type> RandomKeyOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  from_attributes<Attributes>(attrs, name);
  return {TensorType::get(DataType::UInt64, {1})};
}

void UniformRandomOp::build(Builder&, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                            double min, double max, std::int64_t seed, DataType dtype, Place place) {
  arg.attributes = to_named_attributes(Attributes{shape, min, max, seed, dtype, place});
}

std::vector<Type> UniformRandomOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::check_shape_attr(name, a.shape);
  if (!is_floating(a.dtype))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a floating dtype, got ",
                to_string(a.dtype));
  if (!(a.min <= a.max))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs min <= max, got [", a.min, ", ",
                a.max, "]");
  return {TensorType::get(a.dtype, a.shape)};
}

void UniformRandomOp::verify() const {
  auto a = attrs();
  if (!(a.min <= a.max))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs min <= max, got [", a.min, ", ",
                a.max, "]");
}

void DropoutOp::Grad::check(std::string_view name, const std::vector<Type>& in,
                            DictionaryAttribute attrs) {
  auto a = from_attributes<DropoutOp::Attributes>(attrs, name);
  Type dout = meta::float_operand(name, in, 0), mask = meta::tensor_operand(name, in, 1);
  if (shaped_data_type(mask) != DataType::Bool)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' mask (operand #1) must be bool, got ",
                to_string(shaped_data_type(mask)));
  if (!meta::compatible_dims(shaped_dims(dout), shaped_dims(mask)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", meta::dims_string(shaped_dims(dout)),
                " and mask ", meta::dims_string(shaped_dims(mask)), " must have one shape");
  if (!(a.p >= 0.0 && a.p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs a drop probability p in [0, 1), got ", a.p);
}

// Through the mask result (#1); the mask's own grad (if any) is ignored.
std::vector<Value> DropoutOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<DropoutOp>>(op, d, op->result(1)).result()};
}


}  // namespace kiln
