// Definitions of the loss-scaling ops declared in
// kiln/dialect/loss_scaling_ops.h: build() and InferMeta (dtypes, one-element
// state tensors, attribute ranges; errors name the op and the operand).
#include "kiln/dialect/loss_scaling_ops.h"

#include <string>

#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

KILN_REGISTER_OP(CheckFiniteAndUnscaleOp, UpdateLossScaling_Op);

namespace {

// False only when the element count is known and is not 1.
bool may_be_one_element(Type t) {
  std::int64_t n = 1;
  for (auto d : shaped_dims(t)) {
    if (d == -1) return true;
    n *= d;
  }
  return n == 1;
}

void require_one(std::string_view op, std::string_view what, std::size_t index, Type t,
                 DataType dtype) {
  if (!t || !is_shaped(t) || shaped_data_type(t) != dtype || !may_be_one_element(t))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand '", what, "' (#", index, ") must be ",
                to_string(dtype), " of one element, got ", t ? t.to_string() : std::string("nothing"));
}

bool is_float(DataType dt) {
  return dt == DataType::Float32 || dt == DataType::Float64 || dt == DataType::BFloat16 ||
         dt == DataType::Float16;
}

}  // namespace

void CheckFiniteAndUnscaleOp::build(Builder&, OperationArgument& arg, Value scale,
                                    const std::vector<Value>& xs) {
  if (xs.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one tensor to check");
  arg.add_operands({scale});
  arg.add_operands(xs);
}

std::vector<Type> CheckFiniteAndUnscaleOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  if (in.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes the scale and at least one tensor, got ",
                in.size(), " operands");
  require_one(name, "scale", 0, in[0], DataType::Float32);
  std::vector<Type> out;
  for (std::size_t i = 1; i < in.size(); ++i) {
    if (!in[i] || !is_shaped(in[i]) || !is_float(shaped_data_type(in[i])))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operand #", i,
                  " must be a f32, f64, bf16 or f16 tensor, got ", in[i] ? in[i].to_string() : "nothing");
    out.push_back(in[i]);
  }
  out.push_back(TensorType::get(DataType::Bool, {1}));
  return out;
}

void UpdateLossScaling_Op::build(Builder&, OperationArgument& arg, Value found_inf, Value scale,
                                 Value good_steps, Value bad_steps, const Attributes& attrs) {
  arg.add_operands({found_inf, scale, good_steps, bad_steps});
  arg.attributes = to_named_attributes(attrs);
}

std::vector<Type> UpdateLossScaling_Op::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  if (a.incr_every_n_steps < 1 || a.decr_every_n_nan_or_inf < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs incr_every_n_steps >= 1 and decr_every_n_nan_or_inf >= 1, got ",
                a.incr_every_n_steps, " and ", a.decr_every_n_nan_or_inf);
  if (!(a.incr_ratio >= 1.0) || !(a.decr_ratio > 0.0 && a.decr_ratio <= 1.0) || a.incr_ratio > 1e30)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs incr_ratio >= 1 (finite) and decr_ratio in (0, 1], got ", a.incr_ratio, " and ",
                a.decr_ratio);
  if (in.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes 4 operands, got ", in.size());
  static constexpr DataType kDtypes[] = {DataType::Bool, DataType::Float32, DataType::Int32, DataType::Int32};
  for (std::size_t i = 0; i < 4; ++i) require_one(name, operand_names[i], i, in[i], kDtypes[i]);
  for (std::size_t i = 1; i < 4; ++i)
    if (in[i].isa<VTensorType>())
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' writes operand '", operand_names[i],
                  "' in place, so it must be a tensor, not a vtensor (value semantics)");
  return {in[1], in[2], in[3]};
}

}  // namespace kiln
