// The tensor-array ops of kiln/dialect/tensor_array_ops.h: build, InferMeta,
// Vjp and registration.
#include "kiln/dialect/tensor_array_ops.h"

#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

KILN_REGISTER_OP(ArrayCreateOp, ArrayLengthOp, ArrayWriteOp, ArrayReadOp, ArrayStackOp,
                 ArrayFromTensorOp, ArrayAddOp, ArrayEraseOp, ArrayReadOrZerosOp, ArrayStackLikeOp);

namespace {

// Operand i as a tensor_array type; kiln::Error naming the op otherwise.
TensorArrayType array_operand(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  if (i >= in.size() || !is_tensor_array(in[i]))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", i,
                " must be a tensor_array, got ",
                i < in.size() && in[i] ? in[i].to_string() : std::string("nothing"));
  return in[i].cast<TensorArrayType>();
}

// Operand i as an index: an i32 / i64 tensor of one element.
void index_operand(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  Type t = meta::tensor_operand(op, in, i);
  bool one = true;
  for (std::int64_t d : shaped_dims(t)) one = one && (d == 1 || d == -1);
  if (!meta::is_index_dtype(shaped_data_type(t)) || !one)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", i,
                " (the index) must be an i32 or i64 tensor of one element, got ", t.to_string());
}

// kiln::Error unless tensor type `x` fits array `a`'s elements.
void require_element(std::string_view op, TensorArrayType a, Type x, std::size_t i) {
  if (shaped_data_type(x) != a.data_type() || !meta::compatible_dims(shaped_dims(x), a.dims()))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", i, " is ", x.to_string(),
                ", which does not fit the elements of ", Type(a).to_string());
}

std::int64_t stack_axis(std::string_view op, std::int64_t axis, std::size_t element_rank) {
  return meta::normalize_axis(op, axis, static_cast<std::int64_t>(element_rank) + 1);
}

}  // namespace

// ---- create / length ----

void ArrayCreateOp::build(Builder&, OperationArgument& arg, DataType dtype,
                          const std::vector<std::int64_t>& element_dims) {
  arg.attributes = to_named_attributes(Attributes{dtype, element_dims});
}

std::vector<Type> ArrayCreateOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 0);
  auto a = from_attributes<Attributes>(attrs, name);
  meta::check_shape_attr(name, a.dims);
  return {TensorArrayType::get(a.dtype, a.dims)};
}

void ArrayLengthOp::build(Builder&, OperationArgument& arg, Value array) { arg.add_operand(array); }

std::vector<Type> ArrayLengthOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  array_operand(name, in, 0);
  return {TensorType::get(DataType::Int64, {1})};
}

// ---- write / read ----

void ArrayWriteOp::build(Builder&, OperationArgument& arg, Value array, Value index, Value x) {
  arg.add_operands({array, index, x});
}

std::vector<Type> ArrayWriteOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 3);
  TensorArrayType a = array_operand(name, in, 0);
  index_operand(name, in, 1);
  require_element(name, a, meta::tensor_operand(name, in, 2), 2);
  return {a};
}

std::vector<Value> ArrayWriteOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> in(3);
  if (!g[0]) return in;
  Value index = op->operand_source(1);
  Value x = op->operand_source(2);
  if (vjp::differentiable(x)) in[2] = b.create<ArrayReadOrZerosOp>(g[0], index, x).result();
  // The write replaced element i: nothing of the old one reaches the result.
  if (vjp::differentiable(op->operand_source(0)))
    in[0] = b.create<ArrayEraseOp>(g[0], index).result();
  return in;
}

void ArrayReadOp::build(Builder&, OperationArgument& arg, Value array, Value index) {
  arg.add_operands({array, index});
}

std::vector<Type> ArrayReadOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  TensorArrayType a = array_operand(name, in, 0);
  index_operand(name, in, 1);
  return {array_element_type(a)};
}

std::vector<Value> ArrayReadOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value dx = vjp::single_grad(op, g);
  std::vector<Value> in(2);
  if (!dx || !vjp::differentiable(op->operand_source(0))) return in;
  auto t = op->operand_source(0).type().cast<TensorArrayType>();
  Value empty = b.create<ArrayCreateOp>(t.data_type(), t.dims()).result();
  in[0] = b.create<ArrayWriteOp>(empty, op->operand_source(1), dx).result();
  return in;
}

// ---- stack / from_tensor ----

void ArrayStackOp::build(Builder&, OperationArgument& arg, Value array, std::int64_t axis) {
  arg.add_operand(array);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> ArrayStackOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 1);
  TensorArrayType a = array_operand(name, in, 0);
  const std::int64_t axis = stack_axis(name, from_attributes<Attributes>(attrs, name).axis, a.rank());
  std::vector<std::int64_t> dims = a.dims();
  dims.insert(dims.begin() + axis, -1);
  return {TensorType::get(a.data_type(), dims)};
}

std::vector<Value> ArrayStackOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value dy = vjp::single_grad(op, g);
  if (!dy || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<ArrayFromTensorOp>(dy, ArrayStackOp(op).attrs().axis).result()};
}

void ArrayFromTensorOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t axis) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> ArrayFromTensorOp::infer_meta(const std::vector<Type>& in,
                                                DictionaryAttribute attrs) {
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  std::vector<std::int64_t> dims = shaped_dims(x);
  if (dims.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a tensor of rank >= 1, got ",
                x.to_string());
  const std::int64_t axis = meta::normalize_axis(name, from_attributes<Attributes>(attrs, name).axis,
                                                 static_cast<std::int64_t>(dims.size()));
  dims.erase(dims.begin() + axis);
  return {TensorArrayType::get(shaped_data_type(x), dims)};
}

std::vector<Value> ArrayFromTensorOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value da = vjp::single_grad(op, g);
  Value x = op->operand_source(0);
  if (!da || !vjp::differentiable(x)) return {Value()};
  return {b.create<ArrayStackLikeOp>(da, x, ArrayFromTensorOp(op).attrs().axis).result()};
}

// ---- gradient arrays ----

void ArrayAddOp::build(Builder&, OperationArgument& arg, Value a, Value other) {
  arg.add_operands({a, other});
}

std::vector<Type> ArrayAddOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  TensorArrayType a = array_operand(name, in, 0);
  TensorArrayType o = array_operand(name, in, 1);
  meta::require_floating(name, a.data_type(), 0);
  if (a.data_type() != o.data_type() || !meta::compatible_dims(a.dims(), o.dims()))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' adds ", Type(o).to_string(), " to ",
                Type(a).to_string(), ": the element types differ");
  return {a};
}

void ArrayEraseOp::build(Builder&, OperationArgument& arg, Value array, Value index) {
  arg.add_operands({array, index});
}

std::vector<Type> ArrayEraseOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  TensorArrayType a = array_operand(name, in, 0);
  index_operand(name, in, 1);
  return {a};
}

void ArrayReadOrZerosOp::build(Builder&, OperationArgument& arg, Value array, Value index,
                               Value like) {
  arg.add_operands({array, index, like});
}

std::vector<Type> ArrayReadOrZerosOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 3);
  TensorArrayType a = array_operand(name, in, 0);
  index_operand(name, in, 1);
  Type like = meta::tensor_operand(name, in, 2);
  require_element(name, a, like, 2);
  return {TensorType::get(shaped_data_type(like), shaped_dims(like))};
}

void ArrayStackLikeOp::build(Builder&, OperationArgument& arg, Value array, Value like,
                             std::int64_t axis) {
  arg.add_operands({array, like});
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> ArrayStackLikeOp::infer_meta(const std::vector<Type>& in,
                                               DictionaryAttribute attrs) {
  meta::require_count(name, in, 2);
  TensorArrayType a = array_operand(name, in, 0);
  Type like = meta::tensor_operand(name, in, 1);
  std::vector<std::int64_t> dims = shaped_dims(like);
  if (dims.size() != a.rank() + 1 || shaped_data_type(like) != a.data_type())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' stacks ", Type(a).to_string(),
                " like ", like.to_string(), ": expected a ", to_string(a.data_type()), " tensor of rank ",
                a.rank() + 1);
  const std::int64_t axis = stack_axis(name, from_attributes<Attributes>(attrs, name).axis, a.rank());
  std::vector<std::int64_t> element = dims;
  element.erase(element.begin() + axis);
  if (!meta::compatible_dims(element, a.dims()))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' stacks ", Type(a).to_string(),
                " like ", like.to_string(), ": the elements' dims differ");
  return {TensorType::get(a.data_type(), dims)};
}

std::vector<Value> ArrayStackLikeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  if (!g[0] || !vjp::differentiable(op->operand_source(0))) return {Value(), Value()};
  return {b.create<ArrayFromTensorOp>(g[0], ArrayStackLikeOp(op).attrs().axis).result(), Value()};
}

}  // namespace kiln
