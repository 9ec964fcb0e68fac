// The collective ops (kiln/dialect/collective_ops.h).
#include "kiln/dialect/collective_ops.h"

#include "kiln/dialect/infer_meta_util.h"
#include "kiln/support/reduce_kind.h"

namespace kiln {

KILN_REGISTER_OP(AllReduceOp, BroadcastOp, AllGatherOp, ReduceScatterOp, BarrierOp);

namespace {

// The reduction of `reduce` for operand dtype `dtype`; kiln::Error naming the op.
void check_reduction(std::string_view op, const std::string& reduce, DataType dtype, std::size_t operand) {
  ReduceKind kind;
  try {
    kind = reduce_kind_from_string(reduce);
  } catch (const Error& e) {
    throw Error(e.kind(), "op '" + std::string(op) + "': " + e.message());
  }
  if (dtype != DataType::Undefined && !is_reducible(dtype, kind))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", operand, ": cannot ", reduce, " dtype ",
                to_string(dtype), " (", not_reducible_reason(dtype, kind), ")");
}

void check_num_ranks(std::string_view op, std::int64_t n) {
  if (n < 1) throw_error(ErrorKind::InvalidArgument, "op '", op, "': num_ranks ", n, " must be >= 1");
}

}  // namespace

void AllReduceOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& xs, const std::string& reduce) {
  if (xs.empty()) throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  arg.add_operands(xs);
  arg.attributes = to_named_attributes(Attributes{reduce});
}

std::vector<Type> AllReduceOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  if (in.empty()) throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  const DataType dt = shaped_data_type(meta::tensor_operand(name, in, 0));
  for (std::size_t i = 0; i < in.size(); ++i) {
    const DataType di = shaped_data_type(meta::tensor_operand(name, in, i));
    meta::require_same_dtype(name, dt, di, 0, i);
    check_reduction(name, a.reduce, di, i);
  }
  return in;
}

void BroadcastOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t root) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{root});
}

std::vector<Type> BroadcastOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  if (a.root < 0) throw_error(ErrorKind::InvalidArgument, "op '", name, "': root ", a.root, " is not a rank");
  return {x};
}

void AllGatherOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t num_ranks) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{num_ranks});
}

std::vector<Type> AllGatherOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  check_num_ranks(name, a.num_ranks);
  Type x = meta::tensor_operand(name, in, 0);
  std::vector<std::int64_t> dims = shaped_dims(x);
  if (dims.empty()) dims.push_back(a.num_ranks);
  else if (dims[0] >= 0) dims[0] *= a.num_ranks;
  return {meta::result_like(in, shaped_data_type(x), std::move(dims))};
}

void ReduceScatterOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t num_ranks,
                            const std::string& reduce) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{reduce, num_ranks});
}

std::vector<Type> ReduceScatterOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  check_num_ranks(name, a.num_ranks);
  Type x = meta::tensor_operand(name, in, 0);
  check_reduction(name, a.reduce, shaped_data_type(x), 0);
  std::vector<std::int64_t> dims = shaped_dims(x);
  if (dims.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "': a scalar cannot be scattered over ", a.num_ranks,
                " ranks (needs a first dimension)");
  if (dims[0] >= 0) {
    if (dims[0] % a.num_ranks != 0)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "': dim 0 of ", meta::dims_string(dims),
                  " does not divide by num_ranks ", a.num_ranks);
    dims[0] /= a.num_ranks;
  }
  return {meta::result_like(in, shaped_data_type(x), std::move(dims))};
}

void BarrierOp::build(Builder&, OperationArgument&) {}

std::vector<Type> BarrierOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 0);
  return {};
}

}  // namespace kiln
