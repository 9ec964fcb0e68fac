// The ops of kiln/dialect/dataflow_ops.h: build, type inference, checks.
#include "kiln/dialect/dataflow_ops.h"

#include "kiln/dialect/control_flow_ops.h"
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/send_recv_ops.h"
#include "kiln/dialect/tensor_array_ops.h"

namespace kiln {

KILN_REGISTER_OP(SwitchOp, MergeOp, EnterOp, ExitOp, NextIterationOp);

namespace {

// Operand i must be a tensor, vtensor or tensor array.
Type data_operand(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  const Type t = in[i];
  if (!t || !(is_shaped(t) || is_tensor_array(t)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", i,
                " must be a tensor or a tensor array, got ", t ? t.to_string() : "no type");
  return t;
}

}  // namespace

void SwitchOp::build(Builder&, OperationArgument& arg, Value data, Value pred) {
  arg.add_operand(data);
  arg.add_operand(pred);
}

std::vector<Type> SwitchOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  const Type data = data_operand(name, in, 0);
  const Type pred = in[1];
  if (!pred || !is_shaped(pred))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' predicate (operand #1) must be a bool tensor of one element, got ",
                pred ? pred.to_string() : "no type");
  if (shaped_data_type(pred) != DataType::Bool)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' predicate (operand #1) must be a bool tensor of one element, got dtype ",
                to_string(shaped_data_type(pred)), " (", pred.to_string(), ")");
  if (!is_condition_type(pred))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' predicate (operand #1) must be a bool tensor of one element, got shape ",
                meta::dims_string(shaped_dims(pred)), " (", pred.to_string(), ")");
  return {data, data};
}

void MergeOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& inputs) {
  arg.add_operands(inputs);
}

std::vector<Type> MergeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  if (in.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one input");
  Type joined = data_operand(name, in, 0);
  for (std::size_t i = 1; i < in.size(); ++i) {
    const Type t = data_operand(name, in, i);
    const Type j = join_types(joined, t);
    if (!j)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' input #", i, " is ", t.to_string(),
                  ", which does not match input #0's ", in[0].to_string(),
                  " (inputs must agree in kind, dtype and rank)");
    joined = j;
  }
  return {joined, TensorType::get(DataType::Int64, {})};
}

void EnterOp::build(Builder&, OperationArgument& arg, Value x, const std::string& frame_name,
                    bool is_constant, std::int64_t parallel_iterations) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{frame_name, is_constant, parallel_iterations});
}

std::vector<Type> EnterOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  if (a.frame_name.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a non-empty frame_name");
  if (a.parallel_iterations < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' into frame '", a.frame_name,
                "': parallel_iterations must be at least 1, got ", a.parallel_iterations);
  return {data_operand(name, in, 0)};
}

void ExitOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }

std::vector<Type> ExitOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  return {data_operand(name, in, 0)};
}

void NextIterationOp::build(Builder&, OperationArgument& arg, Value next, Value merged) {
  arg.add_operand(next);
  arg.add_operand(merged);
}

std::vector<Type> NextIterationOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  const Type next = data_operand(name, in, 0);
  const Type merged = data_operand(name, in, 1);
  if (!type_fits(next, merged))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' value ", next.to_string(),
                " does not fit the merge it feeds, whose output is ", merged.to_string());
  return {};
}

void NextIterationOp::verify() const {
  const Value merged = op_->operand_source(1);
  Operation* def = merged.defining_op();
  if (!def || !def->isa<MergeOp>() || OpResult(static_cast<detail::OpResultImpl*>(merged.impl())).index() != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' operand #1 must be the output (result #0) of the kiln.merge it feeds, got ",
                def ? "a result of '" + std::string(def->name()) + "'" : std::string("a block argument"));
}

bool is_dataflow_op(const Operation& op) {
  return op.isa<SwitchOp>() || op.isa<MergeOp>() || op.isa<EnterOp>() || op.isa<ExitOp>() ||
         op.isa<NextIterationOp>();
}

bool has_dataflow_ops(const Block& block) {
  const Attribute yes = BoolAttribute::get(true);  // uniqued: compared by pointer
  for (const Operation* op : block)
    if (is_dataflow_op(*op) || (op->isa<RecvOp>() && op->attribute("passes_dead") == yes)) return true;
  return false;
}

}  // namespace kiln
