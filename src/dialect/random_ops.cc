// Definitions of the random ops of random_ops.h other than uniform_random
// (defined with the first op set in kiln_ops.cc): gaussian_random, dropout.
#include "kiln/dialect/random_ops.h"

#include <cmath>

#include "op_helpers.h"

namespace kiln {

using dialect_detail::check_shape_attr;
using dialect_detail::expect_tensor;

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
  check_shape_attr(name, a.shape);
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
  Type x = expect_tensor(name, in, 0);
  if (!is_floating(shaped_data_type(x)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a floating input, got ",
                x.to_string());
  check_dropout_p(name, a.p);
  Type mask = x.isa<VTensorType>() ? Type(VTensorType::get(DataType::Bool, shaped_dims(x)))
                                   : Type(TensorType::get(DataType::Bool, shaped_dims(x)));
  return {x, mask};
}

void DropoutOp::verify() const { check_dropout_p(name, attrs().p); }

KILN_REGISTER_OP(GaussianRandomOp);
KILN_REGISTER_OP(DropoutOp);

}  // namespace kiln
